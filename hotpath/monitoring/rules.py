"""Prometheus recording and alert rules for every endpoint, thresholds from perf/slo.toml.

Each alert also carries a *probe*: the same expression with its comparisons made `bool`, which
returns a series whenever the signal exists, firing or not. The integration test queries probes to
prove every alert watches metrics that a real tritonserver exports.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hotpath.monitoring import promql as q
from hotpath.monitoring.endpoints import Watched

FAILURE_RATIO_MAX = 0.01        # more than 1% of requests failing pages someone
QUEUE_SHARE_OF_P95 = 0.25       # queueing may eat a quarter of the p95 budget before it is a trend to act on
CACHE_COLLAPSE_FACTOR = 0.5     # hit rate over 5 minutes below half of the last hour's
CACHE_MIN_RPS = 1.0             # below this traffic a hit rate says nothing


def queue_budget_ms(p95_ms: float) -> float:
    """Queue time per request above which to scale out (also the HPA target in deploy/)."""
    return round(p95_ms * QUEUE_SHARE_OF_P95, 3)


@dataclass(frozen=True)
class Record:
    record: str
    expr: str
    labels: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"record": self.record, "expr": self.expr}
        if self.labels:
            d["labels"] = dict(self.labels)
        return d


@dataclass(frozen=True)
class Alert:
    alert: str
    expr: str
    probe: str
    for_: str
    severity: str
    endpoint: str | None
    summary: str
    description: str

    def to_dict(self) -> dict:
        labels = {"severity": self.severity}
        if self.endpoint:
            labels["endpoint"] = self.endpoint
        return {"alert": self.alert, "expr": self.expr, "for": self.for_, "labels": labels,
                "annotations": {"summary": self.summary, "description": self.description}}


def _m(name: str) -> str:
    return f'{{model="{name}"}}'


def recording_rules(endpoints: list[Watched]) -> list[Record]:
    names = [e.name for e in endpoints]
    steps = list(dict.fromkeys(s for e in endpoints for s in e.steps))
    rules = []
    for e in endpoints:
        # Static model labels: one rule per endpoint under the same name, told apart by its label.
        label = {"model": e.name}
        for quantile in q.QUANTILES:
            pct = quantile[2:].ljust(2, "0")
            rules.append(Record(f"hotpath:request_latency_ms:p{pct}", q.latency_quantile_ms(e, quantile), label))
        rules.append(Record("hotpath:p95_target_ms", f"vector({e.p95_ms})", label))
        rules.append(Record("hotpath:endpoint_queue_ms_per_request:rate1m",
                            q.queue_ms_per_endpoint_request(e.models, [e.name], "1m"), label))
    cached = [e.name for e in endpoints if e.response_cache]
    rules += [
        Record("hotpath:requests_per_second:rate1m", q.requests_per_second(names, "1m")),
        Record("hotpath:failure_ratio:rate5m", q.failure_ratio(names, "5m")),
        Record("hotpath:queue_ms_per_request:rate1m", q.queue_ms_per_request(steps, "1m")),
        Record("hotpath:compute_ms_per_request:rate1m", q.compute_ms_per_request(steps, "1m")),
    ]
    if cached:
        rules += [Record("hotpath:cache_hit_ratio:rate5m", q.cache_hit_ratio(cached, "5m")),
                  Record("hotpath:cache_hit_ratio:rate1h", q.cache_hit_ratio(cached, "1h"))]
    return rules


def endpoint_alerts(e: Watched) -> list[Alert]:
    m = _m(e.name)
    budget = queue_budget_ms(e.p95_ms)
    queue = f"hotpath:endpoint_queue_ms_per_request:rate1m{m}"
    loaded = q.loaded_models(e.models, f'job="{q.JOB}"')
    missing = f'up{{job="{q.JOB}"}} == 1 unless on (instance) nv_inference_request_success{m}'
    alerts = [
        Alert("HotpathP95OverTarget", f"hotpath:request_latency_ms:p95{m} > {e.p95_ms}",
              f"hotpath:request_latency_ms:p95{m} > bool {e.p95_ms}", "5m", "page", e.name,
              f"{e.name}: p95 above its {e.p95_ms:g} ms target",
              "p95 is {{ $value | printf \"%.1f\" }} ms (target " + f"{e.p95_ms:g} ms, perf/slo.toml). "
              "Check queue vs compute per step on the dashboard: queue growing means add replicas."),
        Alert("HotpathQueueTimeRising", f"{queue} > {budget} and deriv({queue}[10m]) > 0",
              f"({queue} > bool {budget}) and (deriv({queue}[10m]) > bool 0)", "5m", "warning", e.name,
              f"{e.name}: requests queue longer and longer",
              "Queue time per request is {{ $value | printf \"%.1f\" }} ms and rising "
              f"(budget {budget:g} ms, a quarter of the p95 target): demand is above capacity."),
        Alert("HotpathFailureRatioHigh", f"hotpath:failure_ratio:rate5m{m} > {FAILURE_RATIO_MAX}",
              f"hotpath:failure_ratio:rate5m{m} > bool {FAILURE_RATIO_MAX}", "5m", "page", e.name,
              f"{e.name}: more than {FAILURE_RATIO_MAX:.0%} of requests fail",
              "{{ $value | humanizePercentage }} of requests failed over 5 minutes; the failures "
              "panel splits them by step and reason."),
        Alert("HotpathModelNotReady", f"{loaded} < {len(e.models)} or ({missing})",
              f"({loaded} < bool {len(e.models)}) or ({missing})", "1m", "page", e.name,
              f"{e.name}: a replica serves without all of its models",
              f"A replica answers scrapes but lacks a model of {e.name} (expected: {', '.join(e.models)}): "
              "a model failed to load or was unloaded."),
    ]
    if e.response_cache:
        ratio5m, ratio1h = f"hotpath:cache_hit_ratio:rate5m{m}", f"hotpath:cache_hit_ratio:rate1h{m}"
        rps = f"hotpath:requests_per_second:rate1m{m}"
        alerts.append(Alert(
            "HotpathCacheHitRateCollapsed",
            f"{ratio5m} < {CACHE_COLLAPSE_FACTOR} * {ratio1h} and on (model) {rps} > {CACHE_MIN_RPS}",
            f"({ratio5m} < bool {CACHE_COLLAPSE_FACTOR} * {ratio1h}) and on (model) ({rps} > bool {CACHE_MIN_RPS})",
            "15m", "warning", e.name, f"{e.name}: response cache hit rate collapsed",
            "Hit rate is {{ $value | humanizePercentage }}, under half of the last hour's: traffic "
            "changed shape or the cache is too small (nv_cache_util); the steps now compute every request."))
    return alerts


def replica_alerts() -> list[Alert]:
    up = f'up{{job="{q.JOB}"}}'
    return [Alert("HotpathReplicaDown", f"{up} == 0", f"{up} == bool 0", "1m", "page", None,
                  "a hotpath replica does not answer scrapes",
                  "{{ $labels.instance }} has not answered Prometheus for a minute: the process is gone "
                  "or hung; the orchestrator's probes should replace it.")]


def all_alerts(endpoints: list[Watched]) -> list[Alert]:
    return [a for e in endpoints for a in endpoint_alerts(e)] + replica_alerts()


def rule_file(endpoints: list[Watched], extra_alerts: list[Alert] = ()) -> dict:
    """The rule file as Prometheus reads it (`rule_files:`); `extra_alerts` after the endpoints' (the
    streaming endpoints', hotpath.monitoring.generation).

    One group: Prometheus runs groups concurrently but a group's rules in order, so every alert sees
    the recorded series of the same evaluation, never last round's.
    """
    alerts = all_alerts(endpoints) + list(extra_alerts)
    rules = [r.to_dict() for r in recording_rules(endpoints)] + [a.to_dict() for a in alerts]
    return {"groups": [{"name": "hotpath", "rules": rules}]}
