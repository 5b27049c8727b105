"""Slow and idle clients at every public door: a normal client's latency without and with 1,000 half-sent
requests and 1,000 idle connections held open on the door it calls; writes perf/reports/slow_clients.md.

    .venv/bin/python -m perf study slow_clients [--calls 300] [--half-sent 1000] [--idle 1000] [--allow-busy]

A local tritonserver serving text_embedding, the OpenAI API beside it, and the tenant gateway in front
with its default bounds (hotpath.gateway.client_bounds, hotpath.settings). Doors: the gateway's gRPC,
HTTP and OpenAI doors, and the API alone. The half-sent requests are inference calls (head and half the
body) from attacker tenants, 64 each (each tenant's bound on open requests), so that all of them are held;
idle connections send nothing (HTTP/2: the client preface). The normal client calls one door at a time,
sequentially, unique texts (the response cache never answers): HTTP doors on a new connection per call
(each must be accepted beside the held ones), gRPC on one channel.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

from tritonclient.grpc import service_pb2

from hotpath import paths, settings
from hotpath.client import connect, text_input
from hotpath.errors import HotpathError
from hotpath.gateway.client_bounds import tenant_bound
from hotpath.gateway.config import GRPC_INFER, TenantGatewaySettings
from hotpath.gateway.limits import max_body_bytes
from hotpath.gateway.openai_door import openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.nginx.directives import WORKER_CONNECTIONS
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.measure.host_load import require_quiet
from perf.lab.studies import runner
from tests.slow_clients import HalfSent, hold

REPORT = paths.ROOT / "perf" / "reports" / "slow_clients.md"
MODEL = "text_embedding"
TEXT = "slow clients study {} {}: a unique text so that the response cache never answers"
RATE = 100_000   # requests/s no tenant here reaches: the rate limit never bites
RELEASE_WAIT_S = 90


@dataclass
class Door:
    name: str
    port: int
    call: Callable[[str], None]     # one normal call with this text; raises when it fails
    half_sent: Callable[[int], HalfSent]
    http2: bool = False


@dataclass
class Row:
    door: str
    without: list[float]
    with_held: list[float]
    failed: int
    opened: dict = field(default_factory=dict)   # counts right after opening
    end: dict = field(default_factory=dict)      # counts when the last call ended
    window_s: float = 0.0
    released_s: float | None = None


def _post(port: int, path: str, body: dict, token: str | None) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
        conn.request("POST", path, json.dumps(body), headers)
        response = conn.getresponse()
        text = response.read()
        if response.status != 200:
            raise HotpathError(f"{path}: {response.status} {text[:200]!r}")
    finally:
        conn.close()


def _kserve(text: str) -> dict:
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}


def _infer_message() -> bytes:
    r = service_pb2.ModelInferRequest(model_name=MODEL)
    r.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(b"half sent")
    return r.SerializeToString()


def _doors(gateway: TenantGateway, api: OpenAIServer, token: str, attackers: list[str]) -> list[Door]:
    s, grpc_client = gateway.settings, connect(gateway.grpc_url, token)

    def attacker(i: int) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {attackers[i % len(attackers)]}"),)

    openai_body = json.dumps({"model": MODEL, "input": "half sent"}).encode()
    kserve_body = json.dumps(_kserve("half sent")).encode()
    return [
        Door("gateway gRPC", s.grpc_port, lambda t: grpc_client.infer(MODEL, [text_input("TEXT", [t])]),
             lambda i: HalfSent(GRPC_INFER, _infer_message(), attacker(i), http2=True), http2=True),
        Door("gateway HTTP", s.http_port, lambda t: _post(s.http_port, f"/v2/models/{MODEL}/infer", _kserve(t), token),
             lambda i: HalfSent(f"/v2/models/{MODEL}/infer", kserve_body, attacker(i))),
        Door("gateway OpenAI", s.openai_port,
             lambda t: _post(s.openai_port, "/v1/embeddings", {"model": MODEL, "input": t}, token),
             lambda i: HalfSent("/v1/embeddings", openai_body, attacker(i))),
        Door("OpenAI API alone", api.port, lambda t: _post(api.port, "/v1/embeddings", {"model": MODEL, "input": t}, None),
             lambda i: HalfSent("/v1/embeddings", openai_body)),
    ]


def _calls(door: Door, tag: str, n: int) -> tuple[list[float], int]:
    """Latencies (ms) of the calls that succeeded, and how many failed."""
    out, failed = [], 0
    for i in range(n):
        start = time.perf_counter()
        try:
            door.call(TEXT.format(tag, i))
        except Exception as exc:   # noqa: BLE001 - a failed call is a figure of the study
            failed += 1
            print(f"[slow_clients] {door.name}: {exc}", file=sys.stderr)
            continue
        out.append((time.perf_counter() - start) * 1e3)
    return out, failed


def _measure(door: Door, calls: int, half_sent: int, idle: int) -> Row:
    _calls(door, f"warm {door.name}", 30)
    without, failed = _calls(door, f"without {door.name}", calls)
    with hold("127.0.0.1", door.port, half_sent, idle, door.half_sent, door.http2) as held:
        opened, start = held.counts(), time.monotonic()
        with_held, failed_held = _calls(door, f"with {door.name}", calls)
        row = Row(door.name, without, with_held, failed + failed_held, opened, held.counts(),
                  time.monotonic() - start)
        row.released_s = held.wait_released(RELEASE_WAIT_S)
        if row.released_s is not None:
            row.released_s += row.window_s
    print(f"[slow_clients] {door.name}: p95 {_p(without, 95):.1f} ms without, {_p(with_held, 95):.1f} ms with "
          f"{opened['half_sent']} half-sent + {opened['idle']} idle held; {row.failed} failed", flush=True)
    return row


def _p(values: list[float], q: int) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)]


def _cpu() -> tuple[str, str]:
    info = {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info.get("model name", platform.processor()), info.get("flags", "")


def _report(args, rows: list[Row], quiet: str, bound: int, attackers: int) -> str:
    model, flags = _cpu()
    lines = [
        "# Slow and idle clients at the public doors",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC by `.venv/bin/python -m perf study slow_clients "
        f"--calls {args.calls} --half-sent {args.half_sent} --idle {args.idle}{' --allow-busy' if args.allow_busy else ''}` "
        "(perf/lab/studies/slow_clients.py; the held connections come from tests/slow_clients.py).",
        "",
        f"A local tritonserver serving {MODEL}, the OpenAI API beside it and the tenant gateway (NGINX "
        f"1.22, one worker, worker_connections {WORKER_CONNECTIONS}) in front, with their default bounds: "
        f"header timeout {settings.client_header_timeout_s()} s, body timeout {settings.client_body_timeout_s()} s, "
        f"keepalive {settings.keepalive_timeout_s()} s (`hotpath.settings`), {bound} open requests per tenant "
        f"(`hotpath.gateway.client_bounds`), the API alone at most {settings.openai_max_connections()} connections. "
        f"On each door in turn: the normal client's {args.calls} sequential calls without, then with, "
        f"{args.half_sent} half-sent inference requests (head and half the body; at the gateway from {attackers} "
        f"attacker tenants, {bound} each) and {args.idle} idle connections (nothing sent; HTTP/2: the preface) "
        "held open. HTTP doors: a new connection per normal call; gRPC: one channel. Client, servers and the "
        "held connections share the host's cores.",
        "",
        f"Host: {model}, {os.cpu_count()} logical CPUs; {quiet}.",
        "",
        "| door | normal p50 / p95 ms without | normal p50 / p95 ms with them held | normal calls failed | "
        "held when opened (half-sent / idle) | still held after the last call | window s | all cut after s |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for r in rows:
        released = f"{r.released_s:.1f}" if r.released_s is not None else f"> {RELEASE_WAIT_S}"
        lines.append(f"| {r.door} | {_p(r.without, 50):.1f} / {_p(r.without, 95):.1f} | "
                     f"{_p(r.with_held, 50):.1f} / {_p(r.with_held, 95):.1f} | {r.failed} | "
                     f"{r.opened['half_sent']} / {r.opened['idle']} | {r.end['half_sent']} / {r.end['idle']} | "
                     f"{r.window_s:.1f} | {released} |")
    lines += [
        "",
        "\"Held\": the server has neither answered nor closed the connection. \"All cut after\": from the first "
        "normal call under the hold until the server held none of them (idle ones go after the header timeout, "
        "half-sent ones after the body timeout: NGINX closes, the API answers 408). Means of the two phases: "
        + "; ".join(f"{r.door} {statistics.fmean(r.without):.1f} -> {statistics.fmean(r.with_held):.1f} ms"
                    for r in rows if r.without and r.with_held) + ".",
        "",
        f"CPU flags (/proc/cpuinfo): `{flags}`",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("slow_clients", __doc__)
    parser.add_argument("--calls", type=int, default=300, help="normal calls per phase and door")
    parser.add_argument("--half-sent", type=int, default=1000)
    parser.add_argument("--idle", type=int, default=1000)
    args = parser.parse_args(argv)
    try:
        quiet = require_quiet(args.allow_busy)
    except HotpathError as exc:
        print(f"[slow_clients] {exc}", file=sys.stderr)
        return 75
    token = new_token()
    gateway_settings = dict(max_in_flight=8, max_body_bytes=max_body_bytes())
    bound = tenant_bound(0, gateway_settings["max_in_flight"])
    attackers = [new_token() for _ in range(math.ceil(args.half_sent / bound))]
    tenants = (Tenant("normal", token, RATE, RATE), *(Tenant(f"attacker{i}", t, RATE, RATE)
                                                      for i, t in enumerate(attackers)))
    repository = linked(next(e for e in load_endpoints("cpu") if e.name == MODEL).models)
    with LocalTriton(repository, ServerPorts(*free_ports(3)), log=lambda m: None) as triton, \
            OpenAIServer(triton.grpc_url, free_ports(1)[0], repository) as api:
        grpc_port, http_port, openai_port = free_ports(3)
        s = TenantGatewaySettings(grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), tenants,
                                  openai_port=openai_port, openai_upstreams=(f"{api.host}:{api.port}",),
                                  openai=openai_config(repository), **gateway_settings)
        with TenantGateway(s) as gateway:
            rows = [_measure(door, args.calls, args.half_sent, args.idle)
                    for door in _doors(gateway, api, token, attackers)]
    REPORT.write_text(_report(args, rows, quiet.summary(), bound, len(attackers)))
    print(f"[slow_clients] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
