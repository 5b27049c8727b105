"""Replica failover on one machine: 3 tritonservers behind NGINX (least_conn, gRPC), one SIGKILLed under load,
through the tenant gateway (the front door clients use) and through the bare replica balancer.

    .venv/bin/python -m perf study failover [--allow-busy] [--fronts "tenant gateway,replica balancer"]
    # writes perf/reports/failover.md

Each front runs twice: with the client's gRPC retries of idempotent calls (failover.retrying_channel_args) and
without, to show which requests a dying replica takes down when nothing retries them.
"""

import os
from datetime import datetime, timezone

from hotpath import paths
from hotpath.gateway.limits import admission_cap
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import require_quiet
from perf.lab.studies import failover_load as failover
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "failover.md"
CLIENTS, DURATION_S, KILL_AFTER_S = 4, 20.0, 8.0


def _row(front: str, client_retries: bool, r: failover.Failover) -> str:
    before = r.latency_ms(r.kill_at - 3, r.kill_at)
    around = r.latency_ms(r.kill_at - 0.5, r.kill_at + 1)
    after = r.latency_ms(r.kill_at + 2, r.kill_at + DURATION_S)
    other = len(r.failed) - len(r.broken)
    shares = [sorted(r.served_share(after).values(), reverse=True) for after in (False, True)]
    return (f"| {front} | {'on' if client_retries else 'off'} | {len(r.calls)} | {len(r.gateway_errors)} | "
            f"{len(r.retried)} | {len(r.broken)} | {other} | {r.disrupted_ms:.0f} | "
            f"{len(r.tries_after_marked_down)} | {before[0]:.1f} / {before[1]:.1f} | "
            f"{around[0]:.1f} / {around[1]:.1f} | {after[0]:.1f} / {after[1]:.1f} | {shares[0]} -> {shares[1]} |")


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("failover", __doc__)
    parser.add_argument("--fronts", default=",".join(failover.FRONTS), help="comma-separated, of " +
                        ", ".join(failover.FRONTS))
    args = parser.parse_args(argv)
    fronts = [f.strip() for f in args.fronts.split(",")]
    quiet = require_quiet(args.allow_busy)
    load_before = os.getloadavg()
    text = next(e for e in load_endpoints("cpu") if e.name == "text_embedding")
    repository = linked(text.models)
    rows = []
    for front in fronts:
        for client_retries in (True, False):
            with LocalReplicas(3, repository, ort_threads=1) as replicas:
                config, headers = failover.front(front, replicas)
                with LocalNginx(config) as nginx:
                    r = failover.run(replicas, nginx, "text_embedding", "TEXT", CLIENTS, DURATION_S, KILL_AFTER_S,
                                     client_retries=client_retries, headers=headers)
            rows.append(_row(front, client_retries, r))
            print(rows[-1], flush=True)
    load_after = os.getloadavg()
    command = "perf/lab/studies/failover.py" + ("" if fronts == list(failover.FRONTS) else f' --fronts "{args.fronts}"') + \
        (" --allow-busy" if args.allow_busy else "")
    REPORT.write_text("\n".join([
        "# Replica failover on one machine",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `.venv/bin/python {command}`. Three local "
        f"tritonservers (text_embedding, 1 ORT thread each) behind NGINX 1.22 (`least_conn`, gRPC, "
        f"`max_fails=1 fail_timeout=10s`, idempotent calls passed on: `hotpath.nginx.upstreams`), either the "
        f"tenant gateway (`hotpath.gateway`: token, rate limit, admission cap {3 * admission_cap('cpu')} in flight, sized as "
        f"`python -m hotpath.gateway serve` sizes it) or the bare replica balancer (`hotpath.scaleout.balancer`); "
        f"{CLIENTS} closed-loop clients send unique texts for {DURATION_S:g} s; the first replica gets SIGKILL "
        f"(with its Python stubs) after {KILL_AFTER_S:g} s. Machine: {quiet.summary()}; load average (1/5/15 min) "
        f"{' / '.join(f'{x:.2f}' for x in load_before)} before, {' / '.join(f'{x:.2f}' for x in load_after)} after.",
        "",
        "| front | client retries (gRPC retry policy on ModelInfer) | calls | broken mid-call at the front "
        "(UNAVAILABLE) | passed on by NGINX before sending | failed for the client: broken by the kill | "
        "failed for another reason | last broken call after the kill (ms) | calls sent to the dead replica "
        "after NGINX saw it fail | latency 3 s before: median / max (ms) | -0.5 s..+1 s | +2 s to the end | "
        "inference requests per replica before -> after the kill |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "What fails: only the calls in flight on the replica at the moment it dies. NGINX streams gRPC request "
        "bodies to the replica unbuffered, so it cannot replay a call it already sent; it answers those with "
        "gRPC UNAVAILABLE (a trailers-only response from its `error_page`), marks the replica down for "
        "`fail_timeout` and passes calls it has not sent yet to another one. Inference is idempotent, so the "
        "client's gRPC retry policy (`perf.lab.studies.failover_load.retrying_channel_args`: ModelInfer, "
        "UNAVAILABLE, up to 3 attempts, 10-200 ms backoff) replays them: with it no call fails, the broken "
        "ones arrive one backoff later. Without it each broken call is an error for its client.",
    ]) + "\n")
    print(f"[failover] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
