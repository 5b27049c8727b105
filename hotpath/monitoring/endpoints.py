"""The endpoints to watch: steps and response cache from the repository, p95 target from perf/slo.toml."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.specs.repository import Endpoint, Repository
from hotpath.tuning.slo import load_slos


@dataclass(frozen=True)
class Watched(Endpoint):
    """An endpoint of the repository and the p95 target it is watched against."""
    p95_ms: float

    @classmethod
    def of(cls, endpoint: Endpoint, p95_ms: float) -> "Watched":
        return cls(**{f.name: getattr(endpoint, f.name) for f in fields(Endpoint)}, p95_ms=p95_ms)


def load_endpoints(profile: str, repository: Path | None = None, slo_path: Path | None = None) -> list[Watched]:
    """Every endpoint of `profile` in perf/slo.toml, described from its config in the repository."""
    repo = Repository(repository)
    out = []
    for name, slo in sorted(load_slos(profile, slo_path).items()):
        if name not in repo.configs():
            raise HotpathError(f"endpoint '{name}' of perf/slo.toml has no config in {repo.path}")
        out.append(Watched.of(repo.endpoint(name), slo.p95_ms))
    return out


def profiles(slo_path: Path | None = None) -> list[str]:
    """Hardware profiles declared in perf/slo.toml."""
    import tomllib

    from hotpath.tuning.slo import slo_file

    return sorted(tomllib.loads(Path(slo_path or slo_file()).read_text())["profiles"])
