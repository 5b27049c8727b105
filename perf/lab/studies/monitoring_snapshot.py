"""What the dashboards show on this machine under a steady load, next to perf_analyzer's own figures.

    .venv/bin/python -m perf study monitoring_snapshot [--allow-busy]   # writes perf/reports/monitoring.md

A local tritonserver, Debian's Prometheus scraping it every second with the generated cpu rules,
perf_analyzer at a fixed concurrency per endpoint; then the recorded series are read back.
"""

from datetime import datetime, timezone

from hotpath import paths
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.monitoring.local import LocalPrometheus
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import require_quiet
from hotpath.sweeps.measure.perf_analyzer import Measurement, run
from hotpath.sweeps.measure.point import response_cache_off
from hotpath.tuning.slo import load_slos
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "monitoring.md"


def value(prometheus: LocalPrometheus, expr: str) -> dict[str, float]:
    return {s["metric"].get("model", s["metric"].get("instance", "")): float(s["value"][1])
            for s in prometheus.query(expr)}


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("monitoring_snapshot", __doc__)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--concurrency", type=int, default=2,
                        help="closed-loop clients per endpoint (the declared load of perf/slo.toml overloads this host)")
    args = parser.parse_args(argv)
    quiet = require_quiet(args.allow_busy)
    endpoints = load_endpoints(args.profile)
    slos = load_slos(args.profile)
    models = tuple(dict.fromkeys(m for e in endpoints for m in e.models))
    http, grpc, metrics, prom = free_ports(4)
    rules = paths.ROOT / "monitoring" / "rules" / f"hotpath-{args.profile}.rules.yml"
    lines = ["# What the dashboards read on this machine", "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `.venv/bin/python -m perf study monitoring_snapshot`: "
             f"local tritonserver, Debian Prometheus 2.42 scraping every second with "
             f"`monitoring/rules/hotpath-{args.profile}.rules.yml`, perf_analyzer at concurrency {args.concurrency} "
             f"with real payloads and the response cache off (the payloads repeat), one endpoint at a time; "
             f"Prometheus read right after each run. Machine: {quiet.summary()}.", ""]
    with LocalTriton(linked(models), ServerPorts(http, grpc, metrics),
                     model_control="explicit", extra_args=["--metrics-interval-ms=1000"], log=lambda m: None) as server, \
            LocalPrometheus([f"127.0.0.1:{metrics}"], [rules], prom) as prometheus:
        for e in endpoints:
            slo = slos[e.name]
            # perf payloads cycle 50 inputs: with the cache on every request would be a hit.
            with response_cache_off(server.grpc_url, e.name):
                point = run(e.name, server.grpc_url, "concurrency", args.concurrency, slo.input_data,
                            measurement=Measurement(interval_ms=8000, stability_pct=60, max_trials=4))
            m = f'{{model="{e.name}"}}'
            q = {name: value(prometheus, f"hotpath:request_latency_ms:{name}{m}").get(e.name) for name in ("p50", "p95", "p99")}
            steps_queue = value(prometheus, "hotpath:queue_ms_per_request:rate1m")
            steps_compute = value(prometheus, "hotpath:compute_ms_per_request:rate1m")
            cpu = value(prometheus, "max_over_time(nv_cpu_utilization[30s])")
            pending = value(prometheus, f"max_over_time(sum by (model) (nv_inference_pending_request_count{{model=~\"{'|'.join(e.models)}\"}})[30s:1s])")
            lines += [f"## {e.name} at concurrency {args.concurrency} (target p95 {slo.p95_ms:g} ms)", "",
                      "| question | series | value |", "|---|---|---|",
                      f"| how slow, client side (perf_analyzer) | p50 / p95 / p99 | {point.p50_ms:.1f} / {point.p95_ms:.1f} / "
                      f"{point.p99_ms:.1f} ms at {point.throughput:.1f} req/s |",
                      "| how slow, server side | `hotpath:request_latency_ms:p50/p95/p99` | "
                      + " / ".join(f"{v:.1f}" if v is not None else "-" for v in q.values()) + " ms |"]
            for label, series in (("queue per endpoint request", "hotpath:endpoint_queue_ms_per_request:rate1m"),
                                  ("throughput", "hotpath:requests_per_second:rate1m"),
                                  ("failure ratio", "hotpath:failure_ratio:rate5m")):
                v = value(prometheus, f"{series}{m}").get(e.name)
                if v is not None:
                    lines.append(f"| {label} | `{series}` | {v:.3g} |")
            for step in e.steps:
                lines.append(f"| where the time goes: {step} | `hotpath:queue_ms_per_request` / `compute_ms_per_request` | "
                             f"queue {steps_queue.get(step, float('nan')):.1f} ms + compute "
                             f"{steps_compute.get(step, float('nan')):.1f} ms |")
            lines += ["| pending requests (max over 30 s) | `nv_inference_pending_request_count` | "
                      + ", ".join(f"{k} {v:.0f}" for k, v in sorted(pending.items())) + " |",
                      f"| CPU busy (max over 30 s) | `nv_cpu_utilization` | {max(cpu.values()):.0%} |", ""]
            print("\n".join(lines[-12:]), flush=True)
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"[snapshot] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
