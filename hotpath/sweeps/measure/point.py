"""One measured point: perf_analyzer for the client view, statistics deltas for every step."""

from __future__ import annotations

import contextlib
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath.exporters.samples import payload_for
from hotpath.specs.repository import Repository
from hotpath.sweeps.measure import perf_analyzer as analyzer
from hotpath.sweeps.measure import server_stats as stats
from hotpath.sweeps.measure.perf_analyzer import Measurement, PerfPoint
from hotpath.sweeps.measure.reconfigure import reconfigured, served_config


def endpoint_steps(endpoint: str) -> list[str]:
    """Model names of an ensemble's steps, in order; [endpoint] for a plain model (from the repository)."""
    return list(Repository().endpoint(endpoint).steps)


def measure(url: str, model: str, load_kind: str, load: float, input_data: Path | None = None,
            measurement: Measurement = Measurement(), label: str = "") -> PerfPoint:
    """Measure `model` at one load; `steps` holds the server-side breakdown of it and its steps."""
    steps = endpoint_steps(model)
    before = stats.snapshot(url)
    point = analyzer.run(model, url, load_kind, load, input_data or payload_for(model), measurement=measurement)
    point.steps = stats.breakdown(before, stats.snapshot(url), [model, *[s for s in steps if s != model]])
    point.label = label
    return point


@contextlib.contextmanager
def response_cache_off(url: str, endpoint: str):
    """Measure compute, not the cache: reload `endpoint` with its response cache disabled meanwhile.

    perf payloads repeat (50 texts cycled), so with the cache on every request after the first
    pass would be a hit. The cache is measured on its own (hotpath.sweeps.measure.response_cache).
    """
    if not served_config(grpcclient.InferenceServerClient(url), endpoint).response_cache.enable:
        yield
        return

    def cache_off(config):
        config.response_cache.enable = False
        return config

    with reconfigured(url, {endpoint: cache_off}):
        yield
