"""The dashboard of a streaming (token by token) endpoint, from the model's custom metrics.

Triton's own request metrics time a decoupled request as a whole, which says little about a chat
reply: operators watch time to first token and time between tokens. The text_generation model
publishes those as histograms, with its KV pool and prefix cache (hotpath.runtime.llm.metrics: vLLM's own statistics).
"""

from __future__ import annotations

from hotpath.monitoring import promql as q
from hotpath.monitoring.dashboard import WHERE, WINDOW, Panel, _panel_json, dashboard
from hotpath.monitoring.rules import Alert
from hotpath.runtime.llm.metrics import PREFIX
from hotpath.specs.repository import Endpoint

PREEMPTIONS_PER_S_MAX = 0.1   # sustained preemption: the KV budget is too small for the load


def _m(metric: str, name: str, where: str = WHERE) -> str:
    return f'{PREFIX}{metric}{{model="{name}"{"," + where if where else ""}}}'


def _rate(metric: str, name: str, by: str = "", window: str = WINDOW, where: str = WHERE) -> str:
    return f"sum{f' by ({by})' if by else ''} (rate({_m(metric, name, where)}[{window}]))"


def token_quantile_ms(histogram: str, name: str, quantile: str, window: str = WINDOW, where: str = WHERE) -> str:
    """A quantile of a latency histogram (seconds) over every replica, in ms."""
    return f"histogram_quantile({quantile}, {_rate(histogram + '_bucket', name, 'model, le', window, where)}) * 1000"


def streaming_alerts(slos) -> list[Alert]:
    """TTFT and ITL p95 over their perf/slo.toml targets, and sustained preemption, per streaming endpoint."""
    alerts = []
    for slo in slos:
        name = slo.endpoint
        for short, histogram, target in (("TTFT", "ttft_seconds", slo.ttft_p95_ms),
                                         ("ITL", "itl_seconds", slo.itl_p95_ms)):
            p95 = token_quantile_ms(histogram, name, "0.95", "5m", "")
            alerts.append(Alert(
                f"Hotpath{short}OverTarget", f"{p95} > {target}", f"{p95} > bool {target}", "5m", "page", name,
                f"{name}: {short} p95 above its {target:g} ms target",
                f"{short} p95 is " + "{{ $value | printf \"%.0f\" }} ms (target " + f"{target:g} ms, perf/slo.toml). "
                "Check KV occupancy and waiting streams on the dashboard: waiting means add replicas."))
        rate = _rate("preemptions_total", name, "model", "5m", "")
        alerts.append(Alert(
            "HotpathKVPreempting", f"{rate} > {PREEMPTIONS_PER_S_MAX}", f"{rate} > bool {PREEMPTIONS_PER_S_MAX}",
            "15m", "warning", name, f"{name}: streams keep being preempted for KV memory",
            "{{ $value | printf \"%.2f\" }} preemptions/s over 5 minutes: preempted streams recompute their "
            "context. Raise kv_cache_mib (memory) or add replicas."))
    return alerts


def generation_panels(name: str, ttft_target_ms: float, itl_target_ms: float) -> list[Panel]:
    def quantiles(histogram):
        return tuple((token_quantile_ms(histogram, name, x), f"p{x[2:].ljust(2, '0')}") for x in q.QUANTILES)

    lookups = _rate("prefix_cache_lookups_total", name)
    return [
        Panel("Time to first token p50 / p95 / p99 vs target", "ms",
              quantiles("ttft_seconds") + ((f"vector({ttft_target_ms})", "p95 target (perf/slo.toml)"),),
              "From request arrival to its first token (queueing for KV memory and prefill included), all replicas."),
        Panel("Inter-token latency p50 / p95 / p99 vs target", "ms",
              quantiles("itl_seconds") + ((f"vector({itl_target_ms})", "p95 target (perf/slo.toml)"),),
              "Time between consecutive tokens of a stream: one decode step of the batch it runs in."),
        Panel("Tokens per second", "short",
              ((f"{_rate('itl_seconds_count', name)} + {_rate('ttft_seconds_count', name)}", "tokens/s"),
               (_rate("ttft_seconds_count", name), "streams started/s")),
              "Generated tokens streamed per second, all replicas."),
        Panel("KV pool occupancy", "percentunit",
              ((f"sum by (instance) ({_m('kv_used_tokens', name)}) / "
                f"sum by (instance) ({_m('kv_capacity_tokens', name)})", "{{instance}}"),),
              "KV positions in use / the engine's KV space (kv_cache_mib). Near 1, new streams wait and vLLM "
              "preempts the newest running sequence (recomputed later)."),
        Panel("Sequences running and waiting", "short",
              ((f"sum by (instance) ({_m('running', name)})", "{{instance}} running"),
               (f"sum by (instance) ({_m('waiting', name)})", "{{instance}} waiting")),
              "Streams decoding, and requests waiting for admission (queued or preempted)."),
        Panel("Preemptions", "short", ((_rate("preemptions_total", name), "preempted/s"),),
              "Streams preempted to free KV memory (vLLM recomputes them on readmission). "
              "Sustained preemptions: raise kv_cache_mib or add replicas."),
        Panel("Prefix cache hit rate", "percentunit",
              ((f'sum (rate({PREFIX}prefix_cache_lookups_total{{model="{name}",result="hit",{WHERE}}}[{WINDOW}]))'
                f" / {lookups}", "hit rate"),),
              "Admissions that reused cached KV entries (a system turn or an earlier chat turn)."),
        Panel("Prompt tokens reused per second", "short",
              ((_rate("prefix_cache_tokens_total", name), "reused tokens/s"),),
              "Prompt positions copied from the prefix cache instead of prefilled."),
        Panel("Failures by reason", "reqps", ((q.failures_per_second([name], WINDOW, WHERE), "{{reason}}"),),
              "Requests Triton counts as failed: refused when the admission queue is full, bad inputs."),
        Panel("CPU utilization", "percentunit", ((q.host_gauge("nv_cpu_utilization", WHERE), "{{instance}}"),),
              "Host CPU busy share, from /proc/stat."),
    ]


def generation_dashboard(name: str, ttft_target_ms: float, itl_target_ms: float) -> dict:
    """Grafana's JSON model for a streaming endpoint (the endpoint dashboards' layout and variables)."""
    board = dashboard(Endpoint(name, (name,), inputs=(), instances=(1,), response_cache=False))
    board["description"] = (f"Streaming endpoint {name}: per-token latency, KV memory and prefix cache. "
                            "Generated by `hotpath monitoring`.")
    panels = generation_panels(name, ttft_target_ms, itl_target_ms)
    board["panels"] = [_panel_json(p, i + 1) for i, p in enumerate(panels)]
    return board
