"""The endpoints to watch: steps and response cache from the repository, p95 target from perf/slo.toml."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hotpath import paths
from hotpath.config import read_config
from hotpath.errors import HotpathError
from hotpath.slo import load_slos


@dataclass(frozen=True)
class Endpoint:
    name: str
    steps: tuple[str, ...]   # composing models in order; the model itself when it is not an ensemble
    cached: bool             # response cache on: Triton then publishes no request-latency summary for it
    p95_ms: float

    @property
    def models(self) -> tuple[str, ...]:
        """The endpoint and its steps, each once."""
        return tuple(dict.fromkeys((self.name, *self.steps)))


def load_endpoints(profile: str, repository: Path | None = None, slo_path: Path | None = None) -> list[Endpoint]:
    """Every endpoint of `profile` in perf/slo.toml, described from its config in the repository."""
    repository = Path(repository or paths.model_repository())
    out = []
    for name, slo in sorted(load_slos(profile, slo_path).items()):
        if not (repository / name / "config.pbtxt").exists():
            raise HotpathError(f"endpoint '{name}' of perf/slo.toml has no config in {repository}")
        config = read_config(repository / name)
        steps = tuple(s.model_name for s in config.ensemble_scheduling.step) or (name,)
        out.append(Endpoint(name, steps, config.response_cache.enable, slo.p95_ms))
    return out


def profiles(slo_path: Path | None = None) -> list[str]:
    """Hardware profiles declared in perf/slo.toml."""
    import tomllib

    from hotpath.slo import slo_file

    return sorted(tomllib.loads(Path(slo_path or slo_file()).read_text())["profiles"])
