"""PromQL over Triton's own metrics, shared by the recording rules and the dashboards.

Every function takes `where` (extra label matchers, e.g. the dashboard's instance filter) and a
rate window, so the dashboard and the rules ask the same question the same way. Latencies come out
in milliseconds (Triton reports microseconds).
"""

from __future__ import annotations

from hotpath.specs.repository import Endpoint

JOB = "hotpath"   # scrape job of Triton's metrics port (docs/operations.md, deploy/ pod annotations)
QUANTILES = ("0.5", "0.95", "0.99")
PHASE_SUMMARIES = tuple(f"nv_inference_{phase}_summary_us"
                        for phase in ("queue", "compute_input", "compute_infer", "compute_output"))
COMPUTE = tuple(f"nv_inference_compute_{phase}_duration_us" for phase in ("input", "infer", "output"))


def sel(models: tuple[str, ...] | list[str], where: str = "", **labels: str) -> str:
    """A label matcher for `models` plus `where` and exact `labels`."""
    models = tuple(models)
    parts = [f'model="{models[0]}"' if len(models) == 1 else f'model=~"{"|".join(models)}"']
    parts += [f'{k}="{v}"' for k, v in labels.items()]
    if where:
        parts.append(where)
    return "{" + ",".join(parts) + "}"


def _rate(metric: str, models, window: str, where: str, by: str = "model") -> str:
    return f"sum by ({by}) (rate({metric}{sel(models, where)}[{window}]))"


def latency_quantile_ms(endpoint: Endpoint, quantile: str, where: str = "") -> str:
    """One latency quantile of the endpoint from Triton's summaries (--metrics-config summary_latencies=true).

    Summaries cannot be merged across replicas; the worst replica (max) is what an SLO cares about.
    With the response cache on, Triton publishes no request summary for the endpoint itself, so the
    quantile is that of a cache miss, summed from parts: each step's request summary for an
    ensemble, the queue and compute phase summaries for a single model. A sum of quantiles is
    exact when the parts are slow together (queueing) and errs high otherwise.
    """
    if not endpoint.response_cache:
        return f"max by (model) (nv_inference_request_summary_us{sel([endpoint.name], where, quantile=quantile)}) / 1000"
    if endpoint.steps == (endpoint.name,):
        parts = [f"max by (model) ({m}{sel([endpoint.name], where, quantile=quantile)})" for m in PHASE_SUMMARIES]
    else:
        parts = [f"max by (model) (nv_inference_request_summary_us{sel(endpoint.steps, where, quantile=quantile)})"]
    total = " + ".join(f"sum({p})" for p in parts)
    return f'label_replace({total}, "model", "{endpoint.name}", "", "") / 1000'


def mean_latency_ms(models, window: str, where: str = "") -> str:
    """Mean request latency per model, cache hits included."""
    return (f"{_rate('nv_inference_request_duration_us', models, window, where)} / "
            f"{_rate('nv_inference_request_success', models, window, where)} / 1000")


def queue_ms_per_request(models, window: str, where: str = "") -> str:
    """Time a request waits in each model's scheduler queue, per model."""
    return (f"{_rate('nv_inference_queue_duration_us', models, window, where)} / "
            f"{_rate('nv_inference_request_success', models, window, where)} / 1000")


def compute_ms_per_request(models, window: str, where: str = "") -> str:
    """Compute time (input + infer + output) per request, per model."""
    # One rate() per counter: a name regex inside one rate() yields duplicate label sets once
    # rate() drops the names, which Prometheus 2.x rejects.
    compute = " + ".join(_rate(m, models, window, where) for m in COMPUTE)
    return (f"({compute}) / "
            f"{_rate('nv_inference_request_success', models, window, where)} / 1000")


def queue_quantile_ms(models, quantile: str, where: str = "") -> str:
    return f"max by (model) (nv_inference_queue_summary_us{sel(models, where, quantile=quantile)}) / 1000"


def compute_infer_quantile_ms(models, quantile: str, where: str = "") -> str:
    return f"max by (model) (nv_inference_compute_infer_summary_us{sel(models, where, quantile=quantile)}) / 1000"


def queue_ms_per_endpoint_request(models, endpoints, window: str, where: str = "", group: str | None = None) -> str:
    """Queue time summed over `models`, per request answered by `endpoints`: the scaling signal.

    `group` keeps those labels (prometheus-adapter's <<.GroupBy>>); without it the result is one
    series labelled model=<the endpoint> (a single endpoint).
    """
    queue = f"rate(nv_inference_queue_duration_us{sel(models, where)}[{window}])"
    served = f"rate(nv_inference_request_success{sel(endpoints, where)}[{window}])"
    if group:
        return f"sum by ({group}) ({queue}) / sum by ({group}) ({served}) / 1000"
    (name,) = endpoints
    return f'label_replace(sum({queue}), "model", "{name}", "", "") / sum by (model) ({served}) / 1000'


def requests_per_second(models, window: str, where: str = "") -> str:
    return _rate("nv_inference_request_success", models, window, where)


def inferences_per_second(models, window: str, where: str = "") -> str:
    """Batch items computed per second (cache hits excluded)."""
    return _rate("nv_inference_count", models, window, where)


def average_batch(models, window: str, where: str = "") -> str:
    return (f"{_rate('nv_inference_count', models, window, where)} / "
            f"{_rate('nv_inference_exec_count', models, window, where)}")


def failures_per_second(models, window: str, where: str = "") -> str:
    return _rate("nv_inference_request_failure", models, window, where, by="model, reason")


def failure_ratio(models, window: str, where: str = "") -> str:
    failed = _rate("nv_inference_request_failure", models, window, where)
    ok = _rate("nv_inference_request_success", models, window, where)
    return f"{failed} / ({ok} + {failed})"


def cache_hit_ratio(models, window: str, where: str = "") -> str:
    hits = _rate("nv_cache_num_hits_per_model", models, window, where)
    misses = _rate("nv_cache_num_misses_per_model", models, window, where)
    return f"{hits} / ({hits} + {misses})"


def pending_requests(models, where: str = "") -> str:
    return f"sum by (model) (nv_inference_pending_request_count{sel(models, where)})"


def loaded_models(models, where: str = "") -> str:
    """How many of `models` each replica exports metrics for (Triton drops an unloaded model's series)."""
    return f"count by (instance) (nv_inference_request_success{sel(models, where)})"


def host_gauge(metric: str, where: str = "") -> str:
    """A per-replica host gauge (nv_cpu_*, nv_gpu_*, nv_cache_util)."""
    return f"max by (instance) ({metric}{{{where}}})" if where else f"max by (instance) ({metric})"
