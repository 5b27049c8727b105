"""One Grafana dashboard per endpoint (JSON model, schemaVersion 39), built from the shared PromQL."""

from __future__ import annotations

from dataclasses import dataclass

from hotpath.monitoring import promql as q
from hotpath.specs.repository import Endpoint

WHERE = 'instance=~"$instance"'
WINDOW = "$__rate_interval"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GPU_METRICS = ("nv_gpu_utilization", "nv_gpu_memory_used_bytes")  # published only where DCGM sees a GPU


@dataclass(frozen=True)
class Panel:
    title: str
    unit: str
    targets: tuple[tuple[str, str], ...]   # (expr, legend)
    description: str
    kind: str = "timeseries"
    stacked: bool = False


def _panels(e: Endpoint) -> list[Panel]:
    quantiles = tuple((q.latency_quantile_ms(e, x, WHERE), f"p{x[2:].ljust(2, '0')}") for x in q.QUANTILES)
    latency_note = ("Worst replica's quantiles from Triton's summaries (sliding window)."
                    + (" The response cache is on, so Triton publishes no summary for the endpoint itself: "
                       "quantiles are the sum of its steps' (a cache miss); the mean includes hits." if e.response_cache else ""))
    panels = [
        Panel("Latency p50 / p95 / p99 vs target", "ms",
              quantiles + ((f'hotpath:p95_target_ms{{model="{e.name}"}}', "p95 target (perf/slo.toml)"),
                           (q.mean_latency_ms([e.name], WINDOW, WHERE), "mean")), latency_note),
        Panel("Queue vs compute per step (per request)", "ms",
              ((q.queue_ms_per_request(e.models, WINDOW, WHERE), "{{model}} queue"),
               (q.compute_ms_per_request(e.steps, WINDOW, WHERE), "{{model}} compute")),
              "Where a request's time goes. A growing queue with flat compute means too little capacity: "
              "add replicas or instances; growing compute means each batch got slower.", stacked=True),
        Panel("Step p95: queue and inference", "ms",
              ((q.queue_quantile_ms(e.models, "0.95", WHERE), "{{model}} queue p95"),
               (q.compute_infer_quantile_ms(e.steps, "0.95", WHERE), "{{model}} infer p95")),
              "Per-step tails from Triton's summaries (worst replica)."),
        Panel("Throughput", "reqps",
              ((q.requests_per_second([e.name], WINDOW, WHERE), "{{model}} requests/s"),
               (q.inferences_per_second(e.steps, WINDOW, WHERE), "{{model}} batch items/s")),
              "Requests answered per second; batch items computed per step (cache hits skip the steps)."),
        Panel("Average batch size per step", "short", ((q.average_batch(e.steps, WINDOW, WHERE), "{{model}}"),),
              "Batch items per execution: how much the dynamic batcher groups."),
        Panel("Pending requests", "short", ((q.pending_requests(e.models, WHERE), "{{model}}"),),
              "Requests waiting for an instance right now, per model (the HPA's other signal)."),
        Panel("Failures by step and reason", "reqps",
              ((q.failures_per_second(e.models, WINDOW, WHERE), "{{model}} {{reason}}"),),
              "REJECTED: queue full or timed out; BACKEND: the model raised; CANCELED: the client left."),
        Panel("Failure ratio", "percentunit", ((q.failure_ratio([e.name], WINDOW, WHERE), "{{model}}"),),
              "Failed / all requests of the endpoint."),
    ]
    if e.response_cache:
        panels.append(Panel("Response cache hit rate and fill", "percentunit",
                            ((q.cache_hit_ratio([e.name], WINDOW, WHERE), "hit rate"),
                             (q.host_gauge("nv_cache_util", WHERE), "{{instance}} cache fill")),
                            "Hits / lookups of the endpoint; fill of the cache (near 1 means evictions)."))
    panels += [
        Panel("CPU utilization", "percentunit", ((q.host_gauge("nv_cpu_utilization", WHERE), "{{instance}}"),),
              "Host CPU busy share, from /proc/stat (all processes of the host or pod's node)."),
        Panel("Memory used", "bytes", ((q.host_gauge("nv_cpu_memory_used_bytes", WHERE), "{{instance}}"),),
              "Host RAM in use, from /proc/meminfo."),
        Panel("GPU utilization", "percentunit", ((q.host_gauge("nv_gpu_utilization", WHERE), "{{instance}}"),),
              "From DCGM; empty on CPU-only hosts."),
        Panel("GPU memory used", "bytes", ((q.host_gauge("nv_gpu_memory_used_bytes", WHERE), "{{instance}}"),),
              "From DCGM; empty on CPU-only hosts."),
        Panel("Replicas answering scrapes", "short", ((f'sum(up{{job="{q.JOB}",{WHERE}}})', "replicas up"),),
              "Prometheus scrape health of the replicas (job 'hotpath').", kind="stat"),
    ]
    return panels


def _panel_json(panel: Panel, pid: int) -> dict:
    custom = {"stacking": {"mode": "normal" if panel.stacked else "none"}}
    return {
        "id": pid, "type": panel.kind, "title": panel.title, "description": panel.description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": 12, "x": 12 * ((pid - 1) % 2), "y": 8 * ((pid - 1) // 2)},
        "fieldConfig": {"defaults": {"unit": panel.unit, "custom": custom} if panel.kind == "timeseries"
                        else {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]},
                    "tooltip": {"mode": "multi"}} if panel.kind == "timeseries" else {},
        "targets": [{"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
                    for i, (expr, legend) in enumerate(panel.targets)],
    }


def dashboard(e: Endpoint) -> dict:
    """The dashboard of one endpoint as Grafana's JSON model (import it or provision it from a file)."""
    return {
        "title": f"hotpath / {e.name}",
        "uid": f"hotpath-{e.name.replace('_', '-')}",
        "description": f"Endpoint {e.name}: steps {' -> '.join(e.steps)}. Generated by `hotpath monitoring`.",
        "tags": ["hotpath", "triton"],
        "timezone": "utc", "schemaVersion": 39, "version": 1, "editable": True,
        "refresh": "10s", "time": {"from": "now-1h", "to": "now"},
        "annotations": {"list": []},
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            {"name": "instance", "type": "query", "label": "replica", "datasource": DATASOURCE,
             "query": f'label_values(nv_inference_request_success{{job="{q.JOB}",model="{e.name}"}}, instance)',
             "refresh": 2, "includeAll": True, "multi": True, "allValue": ".*",
             "current": {"text": "All", "value": "$__all"}},
        ]},
        "panels": [_panel_json(p, i + 1) for i, p in enumerate(_panels(e))],
    }


def expressions(board: dict) -> list[str]:
    """Every PromQL expression of a dashboard, its variables left in."""
    return [t["expr"] for p in board["panels"] for t in p["targets"]]
