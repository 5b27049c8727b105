"""Replica failover on one machine: 3 tritonservers behind NGINX (least_conn, gRPC), one SIGKILLed under load.

    .venv/bin/python perf/failover.py [--allow-busy]   # writes perf/reports/failover.md

Run twice: with retries of idempotent calls (the gateway's setting) and without, to show which
requests a dying replica takes down when nothing retries them.
"""

import argparse
import sys
from collections import Counter
from datetime import datetime, timezone

from hotpath import paths
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.perf.quiet import allow_busy_default, require_quiet
from hotpath.scaleout import failover
from hotpath.scaleout.nginx import GatewaySettings, LocalNginx
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked

REPORT = paths.ROOT / "perf" / "reports" / "failover.md"
CLIENTS, DURATION_S, KILL_AFTER_S = 4, 20.0, 8.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--allow-busy", action="store_true", default=allow_busy_default())
    args = parser.parse_args()
    quiet = require_quiet(args.allow_busy)
    text = next(e for e in load_endpoints("cpu") if e.name == "text_embedding")
    repository = linked(text.models)
    rows = []
    for retry in (True, False):
        with LocalReplicas(3, repository, ort_threads=1) as replicas, \
                LocalNginx(GatewaySettings(free_ports(1)[0], tuple(replicas.grpc_urls), retry)) as gateway:
            r = failover.run(replicas, gateway, "text_embedding", "TEXT", CLIENTS, DURATION_S, KILL_AFTER_S)
        before = r.latency_ms(r.kill_at - 3, r.kill_at)
        around = r.latency_ms(r.kill_at - 0.5, r.kill_at + 1)
        after = r.latency_ms(r.kill_at + 2, r.kill_at + 20)
        errors = Counter(c.error for c in r.failed)
        rows.append(f"| {'on' if retry else 'off'} | {len(r.calls)} | {len(r.in_flight_at_kill)} | "
                    f"{len(r.failed)} ({', '.join(f'{k} x{v}' for k, v in errors.items()) or '-'}) | {len(r.retried)} | "
                    f"{r.last_try_on_killed_ms:.0f} | {before[0]:.1f} / {before[1]:.1f} | {around[0]:.1f} / {around[1]:.1f} | "
                    f"{after[0]:.1f} / {after[1]:.1f} | {r.served_share(False)} -> {r.served_share(True)} |")
        print(rows[-1], flush=True)
    REPORT.write_text("\n".join([
        "# Replica failover on one machine",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; `.venv/bin/python perf/failover.py`. Three local "
        f"tritonservers (text_embedding, 1 ORT thread each) behind NGINX 1.22 (`least_conn`, gRPC, "
        f"`max_fails=1 fail_timeout=10s`); {CLIENTS} closed-loop clients send unique texts for {DURATION_S:g} s; "
        f"the first replica gets SIGKILL (with its Python stubs) after {KILL_AFTER_S:g} s. Machine: {quiet.summary()}.",
        "",
        "| retries of idempotent calls | calls | in flight at the kill | failed | retried by NGINX | "
        "last try on the dead replica after the kill (ms) | latency before: median / max (ms) | "
        "-0.5 s..+1 s around the kill | from +2 s | inference requests per replica before -> after |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "With retries NGINX replays a call that met the dead replica (connection refused or reset) on "
        "another one: the client sees a slower answer, never an error. Without them every call in flight "
        "on the dying replica, and the next one NGINX sends there before it marks the replica down, fails "
        "with UNAVAILABLE (HTTP 502 from the gateway). Either way the replica is skipped for "
        "`fail_timeout` after its first failure, so traffic moves within one request per connection.",
    ]) + "\n")
    print(f"[failover] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
