"""prometheus-adapter rules that turn Triton's queue time into a per-pod custom metric for the HPA."""

from __future__ import annotations

from hotpath.monitoring import promql as q
from hotpath.monitoring.endpoints import Watched

METRIC = "hotpath_queue_ms_per_request"   # what deploy/'s HorizontalPodAutoscaler asks for


def adapter_config(endpoints: list[Watched]) -> dict:
    """The adapter's config file (`rules:`): queue ms per endpoint request, per pod, over 1 minute."""
    models = list(dict.fromkeys(m for e in endpoints for m in e.models))
    names = [e.name for e in endpoints]
    return {"rules": [{
        "seriesQuery": 'nv_inference_queue_duration_us{namespace!="",pod!=""}',
        "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
        "name": {"matches": "^nv_inference_queue_duration_us$", "as": METRIC},
        "metricsQuery": q.queue_ms_per_endpoint_request(models, names, "1m", "<<.LabelMatchers>>", "<<.GroupBy>>"),
    }]}


def hpa_target_patch(endpoints: list[Watched]) -> dict:
    """Strategic-merge patch setting the HPA's target to the tightest endpoint's queue budget."""
    from hotpath.monitoring.rules import queue_budget_ms

    budget = min(queue_budget_ms(e.p95_ms) for e in endpoints)
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "hotpath"},
            "spec": {"metrics": [{"type": "Pods", "pods": {
                "metric": {"name": METRIC},
                "target": {"type": "AverageValue", "averageValue": f"{budget:g}"}}}]}}
