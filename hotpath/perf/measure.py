"""One measured point: perf_analyzer for the client view, statistics deltas for every step."""

from __future__ import annotations

import contextlib
from pathlib import Path

import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

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


@contextlib.contextmanager
def response_cache_off(url: str, endpoint: str):
    """Measure compute, not the cache: reload `endpoint` with its response cache disabled meanwhile.

    perf payloads repeat (50 texts cycled), so with the cache on every request after the first
    pass would be a hit. The cache is measured on its own (hotpath.perf.cache).
    """
    client = grpcclient.InferenceServerClient(url)
    config = json_format.ParseDict(client.get_model_config(endpoint, as_json=True)["config"], mc.ModelConfig(),
                                   ignore_unknown_fields=True)
    if not config.response_cache.enable:
        yield
        return
    off = mc.ModelConfig()
    off.CopyFrom(config)
    off.response_cache.enable = False
    client.load_model(endpoint, config=json_format.MessageToJson(off, preserving_proto_field_name=True))
    try:
        yield
    finally:
        client.load_model(endpoint, config=json_format.MessageToJson(config, preserving_proto_field_name=True))
