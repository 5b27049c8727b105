"""Service-level objectives per endpoint: a p95 target and the load where it must hold."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError


@dataclass(frozen=True)
class Slo:
    endpoint: str
    p95_ms: float
    concurrency: int
    input_data: Path
    floor_ratio_goal: float | None = None
    capacity_per_s: float | None = None   # measured throughput within p95_ms at `concurrency` (gateway's admission cap)


def slo_file() -> Path:
    return paths.ROOT / "perf" / "slo.toml"


def load_slos(profile: str = "cpu", path: Path | None = None) -> dict[str, Slo]:
    """The SLOs of one profile, by endpoint name."""
    path = Path(path or slo_file())
    data = tomllib.loads(path.read_text())
    try:
        endpoints = data["profiles"][profile]["endpoints"]
    except KeyError:
        known = ", ".join(data.get("profiles", {}))
        raise HotpathError(f"{path}: no profile '{profile}' with endpoints (known: {known})") from None
    slos = {}
    for name, e in endpoints.items():
        try:
            slos[name] = Slo(name, float(e["p95_ms"]), int(e["concurrency"]), paths.ROOT / e["input_data"],
                             e.get("floor_ratio_goal"), e.get("capacity_per_s"))
        except KeyError as exc:
            raise HotpathError(f"{path}: profiles.{profile}.endpoints.{name} needs '{exc.args[0]}'") from None
    return slos
