"""Fair shares at the tenant gateway: a small tenant's latency while another saturates the replica with
max-size batches; appends a dated section to perf/reports/fairness.md (earlier sections are kept).

    .venv/bin/python -m perf study fairness [--duration 15] [--rate 20] [--busy-workers 8] [--instances N] [--allow-busy]

One tritonserver serving text_embedding; the small tenant sends one short unique text at `--rate`/s
(open loop) for `--duration` s: alone, then while the busy tenant (a process of its own) keeps
`--busy-workers` calls of 32 short texts (the endpoint's max batch) in flight through the gateway,
pausing 50 ms after a refusal, then the same busy load sent to Triton directly (no gateway: what the
small tenant meets without fair shares). `--instances N` reloads sentence_embedder with N instances of
one ORT thread each (the spec ships 2, and one text on 2 threads while the other idles): a batch holds one
instance, not both cores.
"""

import multiprocessing
import os
import sys
import threading
import time
from datetime import datetime, timezone

from hotpath import paths
from hotpath.client import ClientError, EmbeddingClient, RetryPolicy, text_input
from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import require_quiet
from hotpath.sweeps.measure.open_loop import OpenLoopResult, run_open_loop
from hotpath.sweeps.measure.reconfigure import reconfigured
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "fairness.md"
MODEL = "text_embedding"
BATCH = 32   # text_embedding's max_batch_size
STEP = "sentence_embedder"
REFUSED_PAUSE_S = 0.05   # a refused busy call waits this long (a client's backoff floor) before the next
TEXT = "fairness study {} {}: a unique text so that the response cache never answers"


def _busy(url: str, token: str | None, workers: int, stop, counts) -> None:
    """The busy tenant, in a process of its own (its threads would take the GIL from the measuring loop):
    `workers` threads each keep one max-size batch in flight; a refusal waits its retry hint's floor."""
    def run(worker: int) -> None:
        with EmbeddingClient(url, token=token, retry=RetryPolicy(attempts=1)) as client:
            i = 0
            while not stop.is_set():
                try:
                    client.embed([TEXT.format(f"busy {worker} {i}", j) for j in range(BATCH)])
                    with counts.get_lock():
                        counts[0] += 1
                except ClientError as exc:
                    with counts.get_lock():
                        counts[1 if exc.status == "UNAVAILABLE" else 2] += 1
                    time.sleep(REFUSED_PAUSE_S)
                i += 1
    threads = [threading.Thread(target=run, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


class BusyTenant:
    """Runs _busy in a child process for the duration of a `with` block; served/refused/other counts."""

    def __init__(self, url: str, token: str | None, workers: int):
        ctx = multiprocessing.get_context("spawn")
        self.stop, self.counts = ctx.Event(), ctx.Array("l", 3)
        self.process = ctx.Process(target=_busy, args=(url, token, workers, self.stop, self.counts), daemon=True)

    def __enter__(self) -> "BusyTenant":
        self.process.start()
        time.sleep(2.0)   # the process starts and the batches fill the server
        self.before = list(self.counts)
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.elapsed = time.perf_counter() - self.started
        self.served, self.refused, self.other = (a - b for a, b in zip(list(self.counts), self.before))
        self.stop.set()
        self.process.join(60)
        if self.process.is_alive():
            self.process.kill()


def _instances(count: int):
    def change(config):
        del config.instance_group[1:]
        config.instance_group[0].count = count
        config.parameters["intra_op_thread_count"].string_value = "1"
        return config
    return change


def _row(name: str, r: OpenLoopResult, busy: BusyTenant | None) -> str:
    refused = len(r.outcomes) - len(r.of("OK"))
    busy_cell = "-" if busy is None else (f"{busy.served * BATCH / busy.elapsed:.0f} texts/s, "
                                          f"{busy.refused} refused, {busy.other} other")
    return (f"| {name} | {len(r.outcomes)} | {refused} | {r.latency_ms('OK', 50):.1f} | {r.latency_ms('OK', 95):.1f} "
            f"| {busy_cell} |")


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("fairness", __doc__)
    parser.add_argument("--duration", type=float, default=15.0, help="seconds per open-loop run")
    parser.add_argument("--rate", type=float, default=20.0, help="the small tenant's requests/s")
    parser.add_argument("--busy-workers", type=int, default=8, help="max-size batches the busy tenant keeps in flight")
    parser.add_argument("--instances", type=int, default=0, help="sentence_embedder instances of 1 thread (0: spec)")
    args = parser.parse_args(argv)
    try:
        quiet = require_quiet(args.allow_busy)
    except HotpathError as exc:
        print(f"[fairness] {exc}", file=sys.stderr)
        return 75
    tokens = {"small": new_token(), "busy": new_token()}
    tenants = tuple(Tenant(name, token, 100_000, 100_000) for name, token in tokens.items())
    repository = linked(next(e for e in load_endpoints("cpu") if e.name == MODEL).models)
    rows, p95 = [], {}
    with LocalTriton(repository, ServerPorts(*free_ports(3)), log=lambda m: None, model_control="explicit") as triton, \
            reconfigured(triton.grpc_url, {STEP: _instances(args.instances)} if args.instances else {}):
        run_open_loop(triton.grpc_url, MODEL, lambda i: [text_input("TEXT", [TEXT.format("warm", i)])], 100, 3)
        grpc_port, http_port = free_ports(2)
        settings = TenantGatewaySettings(grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), tenants,
                                         admission_cap("cpu"), max_body_bytes())
        with TenantGateway(settings) as gateway:
            small = {"authorization": f"Bearer {tokens['small']}"}

            def measure(tag: str) -> OpenLoopResult:
                r = run_open_loop(gateway.grpc_url, MODEL, lambda i: [text_input("TEXT", [TEXT.format(tag, i)])],
                                  args.rate, args.duration, headers=small)
                print(f"[fairness] {tag}: {r.summary()}", flush=True)
                return r

            alone = measure("alone")
            rows.append(_row("small tenant alone", alone, None))
            p95["alone"] = alone.latency_ms("OK", 95)
            with BusyTenant(gateway.grpc_url, tokens["busy"], args.busy_workers) as busy:
                shared = measure("with busy tenant, gateway")
            rows.append(_row("beside the busy tenant, both through the gateway", shared, busy))
            p95["gateway"] = shared.latency_ms("OK", 95)
            with BusyTenant(triton.grpc_url, None, args.busy_workers) as busy:
                unshared = measure("with busy tenant on Triton directly")
            rows.append(_row("beside the busy tenant sent to Triton directly (no fair share)", unshared, busy))
            p95["direct"] = unshared.latency_ms("OK", 95)
    section = "\n".join([
        "",
        f"## Fair shares ({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)",
        "",
        f"`.venv/bin/python -m perf study fairness --duration {args.duration:g} --rate {args.rate:g} --busy-workers "
        f"{args.busy_workers}{f' --instances {args.instances}' if args.instances else ''}`: a tritonserver "
        f"serving {MODEL} ({STEP}: "
        f"{f'{args.instances} instances of 1 ORT thread' if args.instances else 'the spec: 2 instances of 1 ORT thread, one text on 2 while the other idles'}) behind the tenant gateway (cap "
        f"{settings.in_flight_cap} calls, {settings.work_cap} texts in flight; two tenants of weight 1, rate limits "
        f"that never bite). The small tenant sends one short text at {args.rate:g}/s; the busy tenant keeps "
        f"{args.busy_workers} calls of {BATCH} texts in flight from a process of its own, pausing "
        f"{REFUSED_PAUSE_S * 1e3:.0f} ms after a refusal. Host: {quiet.summary()}; {os.cpu_count()} cores "
        "shared by client, NGINX and server.",
        "",
        "| small tenant | requests | refused | p50 ms | p95 ms | busy tenant |",
        "|---|---:|---:|---:|---:|---|",
        *rows,
        "",
        f"p95 beside the busy tenant / alone: {p95['gateway'] / p95['alone']:.2f}x through the gateway, "
        f"{p95['direct'] / p95['alone']:.2f}x without it.",
        "",
    ])
    old = REPORT.read_text().rstrip("\n") + "\n" if REPORT.exists() else "# Fair shares at the tenant gateway\n"
    REPORT.write_text(old + section)
    print(f"[fairness] appended to {REPORT.relative_to(paths.ROOT)}")
    return 0
