"""Admission control at the tenant gateway: an open loop at 1x and 2x text_embedding's measured capacity
through NGINX (hotpath.gateway) in front of a local tritonserver; appends a dated section to
perf/reports/overload.md (earlier sections are kept).

    .venv/bin/python -m perf study overload_gateway [--duration 20] [--caps 11,8,6] [--allow-busy]

The first cap (default: hotpath.gateway.limits.admission_cap, sized from perf/slo.toml) runs at
1x and 2x; further caps at 2x only, to show the trade between admitted throughput and latency.
Refuses to start while /tmp/hotpath-measuring exists (another measurement is running).
"""

import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from hotpath import paths
from hotpath.client import text_input
from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import busiest, descendants, read_proc, require_quiet
from hotpath.sweeps.measure.open_loop import OpenLoopResult, run_open_loop
from hotpath.tuning.slo import load_slos
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "overload.md"
MEASURING = Path("/tmp/hotpath-measuring")
MODEL = "text_embedding"
UNIQUE = "gateway benchmark {} {}: a unique text so that the response cache never answers"


def _others_cores(before, after) -> float:
    """Cores used by processes outside this script's tree between two /proc samples (other agents' work)."""
    ours = descendants(before, os.getpid()) | descendants(after, os.getpid())
    return sum(p.cores for p in busiest(before, after, ours))


def _row(factor: float, cap: int, r: OpenLoopResult, nginx_refusal_s: list[float], target_ms: float,
         others: float) -> str:
    refused, p95 = r.of("UNAVAILABLE"), r.latency_ms("OK", 95)
    other_statuses = len(r.outcomes) - len(r.of("OK")) - len(refused)
    lag = sorted(o.lag_s for o in r.outcomes)[int(0.95 * (len(r.outcomes) - 1))] * 1e3
    nginx_ms = f"{max(nginx_refusal_s) * 1e3:.0f}" if nginx_refusal_s else "-"
    nginx_ms = "< 1" if nginx_ms == "0" else nginx_ms   # $request_time counts whole milliseconds
    return (f"| {r.rate:.0f} ({factor:g}x) | {cap} | {r.admitted_per_s:.0f} | {r.latency_ms('OK', 50):.1f} / "
            f"{p95:.1f} {'(within)' if p95 <= target_ms else '(over)'} | {len(refused)} "
            f"({100 * len(refused) / len(r.outcomes):.0f}%) | {r.latency_ms('UNAVAILABLE', 50):.1f} / "
            f"{r.latency_ms('UNAVAILABLE', 95):.1f} | {nginx_ms} | {other_statuses} | {lag:.1f} | {others:.2f} |")


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("overload_gateway", __doc__)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per open-loop run")
    parser.add_argument("--caps", default="", help="in-flight caps to try (default: the sized one)")
    args = parser.parse_args(argv)
    if MEASURING.exists():
        print(f"[overload] {MEASURING} exists: another measurement is running; try later", file=sys.stderr)
        return 75
    try:
        quiet = require_quiet(args.allow_busy)
    except HotpathError as exc:
        print(f"[overload] {exc}", file=sys.stderr)
        return 75
    load_before = os.getloadavg()
    slo = load_slos("cpu")[MODEL]
    caps = [int(c) for c in args.caps.split(",") if c] or [admission_cap("cpu")]
    token = new_token()
    headers = {"authorization": f"Bearer {token}"}
    repository = linked(next(e for e in load_endpoints("cpu") if e.name == MODEL).models)
    rows = []
    with LocalTriton(repository, ServerPorts(*free_ports(3)), log=lambda m: None) as triton:
        # The first executions of each batch shape are slow: warmed on Triton directly, not refused.
        run_open_loop(triton.grpc_url, MODEL, lambda i: [text_input("TEXT", [UNIQUE.format("warm", i)])], 300, 3)
        for cap in caps:
            grpc_port, http_port = free_ports(2)
            settings = TenantGatewaySettings(grpc_port, http_port, (triton.grpc_url,), (triton.http_url,),
                                             (Tenant("bench", token, 100_000, 100_000),), cap, max_body_bytes())
            with TenantGateway(settings) as gateway:
                for factor in ((1, 2) if cap == caps[0] else (2,)):
                    logged, before = len(gateway.log()), read_proc()
                    rate = round(factor * slo.capacity_per_s)
                    r = run_open_loop(gateway.grpc_url, MODEL,
                                      lambda i, tag=f"{cap}x{factor}": [text_input("TEXT", [UNIQUE.format(tag, i)])],
                                      rate, args.duration, headers=headers)
                    others = _others_cores(before, read_proc())
                    nginx = [e.seconds for e in gateway.log(logged, len(r.outcomes)) if e.grpc_status == "14"]
                    rows.append(_row(factor, cap, r, nginx, slo.p95_ms, others))
                    print(f"[overload] cap {cap}, {factor}x: {r.summary()}", flush=True)
    load_after = os.getloadavg()
    section = "\n".join([
        "",
        f"## Gateway admission control ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"`.venv/bin/python -m perf study overload_gateway --duration {args.duration:g}"
        f"{' --caps ' + args.caps if args.caps else ''}`: a tritonserver serving {MODEL} alone (tuned config) "
        f"behind the tenant gateway (NGINX 1.22, `hotpath.gateway`; one tenant whose rate limit never bites); "
        f"`hotpath.sweeps.measure.open_loop` sends unique texts on a fixed schedule for {args.duration:g} s per row, after a "
        f"3 s warm-up on Triton directly. Capacity {slo.capacity_per_s:g}/s within p95 {slo.p95_ms:g} ms "
        f"(`perf/slo.toml`); cap = in-flight ModelInfer calls NGINX admits (`limit_conn`; sized: "
        f"{admission_cap('cpu')}, `hotpath.gateway.limits.admission_cap`). Client, NGINX and server share the "
        f"2 cores. Host: {quiet.summary()}; load "
        f"average (1/5/15 min) {' / '.join(f'{x:.2f}' for x in load_before)} before, "
        f"{' / '.join(f'{x:.2f}' for x in load_after)} after.",
        "",
        "| offered /s | cap | admitted /s | admitted p50 / p95 ms (vs target) | refused UNAVAILABLE | refusal p50 / "
        "p95 ms (client) | refusal max ms (NGINX `$request_time`) | other statuses | client send lag p95 ms | "
        "cores used by other processes meanwhile (of 2) |",
        "|---|---:|---:|---|---:|---|---:|---:|---:|---:|",
        *rows,
        "",
    ])
    REPORT.write_text(REPORT.read_text().rstrip("\n") + "\n" + section)
    print(f"[overload] appended to {REPORT.relative_to(paths.ROOT)}")
    return 0
