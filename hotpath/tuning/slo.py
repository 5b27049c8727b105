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
    # The in-process floor's batch-1 p50 on the host where p95_ms was set. With it, the target also reads
    # relative to the floor measured in the same run: p95_ms x floor_now / floor_reference_ms, so a host
    # 3x slower than that one gets a 3x looser bound for the same code.
    floor_reference_ms: float | None = None
    verdict: str = "absolute"             # which bound perf-check fails on: "absolute" or "relative"

    def relative_target_ms(self, floor_now_ms: float) -> float | None:
        """p95_ms scaled by this host's floor (measured now) against the reference host's; None without one."""
        if not self.floor_reference_ms or floor_now_ms <= 0:
            return None
        return self.p95_ms * floor_now_ms / self.floor_reference_ms


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
                             e.get("floor_ratio_goal"), e.get("capacity_per_s"), e.get("floor_reference_ms"),
                             e.get("verdict", "absolute"))
        except KeyError as exc:
            raise HotpathError(f"{path}: profiles.{profile}.endpoints.{name} needs '{exc.args[0]}'") from None
        slo = slos[name]
        if slo.verdict not in ("absolute", "relative") or (slo.verdict == "relative" and not slo.floor_reference_ms):
            raise HotpathError(f"{path}: profiles.{profile}.endpoints.{name}: verdict must be 'absolute' or "
                               f"'relative', and 'relative' needs floor_reference_ms (got {slo.verdict!r})")
    return slos


@dataclass(frozen=True)
class StreamingSlo:
    endpoint: str
    ttft_p95_ms: float
    itl_p95_ms: float
    concurrency: int


def load_streaming_slos(profile: str = "cpu", path: Path | None = None) -> dict[str, StreamingSlo]:
    """TTFT and ITL targets from perf/slo.toml, `[profiles.<profile>.streaming.<endpoint>]`."""
    path = Path(path or slo_file())
    table = tomllib.loads(path.read_text()).get("profiles", {}).get(profile, {}).get("streaming", {})
    try:
        return {name: StreamingSlo(name, float(e["ttft_p95_ms"]), float(e["itl_p95_ms"]), int(e["concurrency"]))
                for name, e in table.items()}
    except KeyError as exc:
        raise HotpathError(f"{path}: profiles.{profile}.streaming entries need '{exc.args[0]}'") from None
