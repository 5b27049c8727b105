"""Server-side time per model from Triton's statistics extension, as deltas over a measurement.

perf_analyzer's CSV aggregates an ensemble into one row; the statistics API has every composing
model, so the difference of two snapshots gives the per-step breakdown of exactly one run.
"""

from __future__ import annotations

from typing import Any

import tritonclient.grpc as grpcclient

from hotpath.server.admin import admin_headers

PHASES = ("queue", "compute_input", "compute_infer", "compute_output")


def snapshot(url: str) -> dict[str, dict[str, Any]]:
    """Cumulative statistics of every model, by model name."""
    with grpcclient.InferenceServerClient(url) as client:
        stats = client.get_inference_statistics(as_json=True, headers=admin_headers()).get("model_stats", [])
    out = {}
    for s in stats:
        inf = s.get("inference_stats", {})
        out[s["name"]] = {
            "inference_count": int(s.get("inference_count", 0)),
            "execution_count": int(s.get("execution_count", 0)),
            "success_count": int(inf.get("success", {}).get("count", 0)),
            **{f"{p}_ns": int(inf.get(p, {}).get("ns", 0)) for p in PHASES},
            **{f"{c}_count": int(inf.get(c, {}).get("count", 0)) for c in ("cache_hit", "cache_miss")},
            **{f"{c}_ns": int(inf.get(c, {}).get("ns", 0)) for c in ("cache_hit", "cache_miss")},
        }
    return out


def breakdown(before: dict, after: dict, models: list[str]) -> dict[str, dict[str, float]]:
    """Per model: requests, executions, average batch, and average us per request in each phase."""
    result = {}
    for m in models:
        a, b = after.get(m), before.get(m, {})
        if not a:
            continue
        d = {k: a[k] - b.get(k, 0) for k in a}
        n = d["success_count"]
        if n <= 0:
            continue
        lookups = d.get("cache_hit_count", 0) + d.get("cache_miss_count", 0)
        result[m] = {
            "requests": n,
            "cache_hit_rate": d.get("cache_hit_count", 0) / lookups if lookups else 0.0,
            "executions": d["execution_count"],
            "avg_batch": d["inference_count"] / d["execution_count"] if d["execution_count"] else 0.0,
            **{f"{p}_us": d[f"{p}_ns"] / n / 1e3 for p in PHASES},
        }
    return result


def step_cost(step: dict[str, float]) -> float:
    """Server time per request of one step (queue plus compute), in us."""
    return sum(step.get(f"{p}_us", 0.0) for p in PHASES)


def bottleneck(steps: dict[str, dict[str, float]]) -> str | None:
    """The step with the most server time per request."""
    if not steps:
        return None
    return max(steps, key=lambda m: step_cost(steps[m]))
