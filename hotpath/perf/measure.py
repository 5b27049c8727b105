"""One measured point: perf_analyzer for the client view, statistics deltas for every step."""

from __future__ import annotations

from pathlib import Path

from hotpath import paths
from hotpath.perf import analyzer, stats
from hotpath.perf.analyzer import Measurement, PerfPoint
from hotpath.perf.payloads import payload_for
from hotpath.spec import load_spec


def endpoint_steps(endpoint: str) -> list[str]:
    """Model names of an ensemble's steps, in order; [endpoint] for a plain model."""
    path = paths.ensemble_specs_dir() / f"{endpoint}.toml"
    if not path.exists():
        return [endpoint]
    return [step.model_name for step in load_spec(path).config.ensemble_scheduling.step]


def measure(url: str, model: str, load_kind: str, load: float, input_data: Path | None = None,
            measurement: Measurement = Measurement(), label: str = "") -> PerfPoint:
    """Measure `model` at one load; `steps` holds the server-side breakdown of it and its steps."""
    steps = endpoint_steps(model)
    before = stats.snapshot(url)
    point = analyzer.run(model, url, load_kind, load, input_data or payload_for(model), measurement=measurement)
    point.steps = stats.breakdown(before, stats.snapshot(url), [model, *[s for s in steps if s != model]])
    point.label = label
    return point
