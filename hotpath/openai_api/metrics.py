"""Prometheus metrics of the API itself (GET /metrics on its port): requests and errors by status, latency,
requests in flight and tokens, by route and model. Triton's own metrics stay on its metrics port."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from hotpath.openai_api.stream_phases import PHASES

# Seconds: from sub-millisecond (the API's own cost, perf/reports/openai_api.md) to a long generation.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# A phase lasts from microseconds (one chunk's relay) to a prefill.
PHASE_BUCKETS = (0.00002, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                 0.5, 1, 5)


class APIMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("hotpath_openai_requests", "Requests answered, by route, model and HTTP status",
                                ["route", "model", "code"], registry=self.registry)
        self.errors = Counter("hotpath_openai_errors", "Requests answered with an error, by route and error code",
                              ["route", "code", "type"], registry=self.registry)
        self.latency = Histogram("hotpath_openai_request_duration_seconds",
                                 "Time from the request's arrival to its last byte, by route",
                                 ["route"], buckets=BUCKETS, registry=self.registry)
        self.in_flight = Gauge("hotpath_openai_requests_in_flight", "Requests being answered now",
                               registry=self.registry)
        self.tokens = Counter("hotpath_openai_tokens", "Tokens by model and kind (prompt | completion)",
                              ["model", "kind"], registry=self.registry)
        self.cache = Counter("hotpath_openai_cache", "The fleet's answer cache (hotpath.openai_api.answer_cache): "
                             "lookups by kind (exact | semantic) and result (hit | miss | store | error)",
                             ["kind", "result"], registry=self.registry)
        self.phases = Histogram("hotpath_openai_generation_phase_seconds",
                                "Where a streamed generation's time goes inside the API, by phase "
                                "(hotpath.openai_api.stream_phases)", ["phase"], buckets=PHASE_BUCKETS,
                                registry=self.registry)
        self.phase = {phase: self.phases.labels(phase) for phase in PHASES}

    def exposition(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
