"""Kill one replica under a bounded closed-loop load through an NGINX front (the tenant gateway or the bare
replica balancer); see what failed and where traffic went. Used by tests/integration/test_scaleout.py and
perf/lab/studies/failover.py.

NGINX retries a call on another replica only while it has sent nothing of it: its gRPC proxy streams
request bodies unbuffered, so a call already on the replica that dies comes back UNAVAILABLE (502).
Inference is idempotent, so the client retries it: gRPC's own retry policy, set on the channel.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field

import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath.client import client_error, text_input
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes, stream_cap
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.nginx.access_log import LogEntry
from hotpath.nginx.local_nginx import LocalNginx, NginxConfig
from hotpath.scaleout.balancer import ReplicaBalancer
from hotpath.scaleout.replicas import LocalReplicas
from hotpath.server.ports import free_ports

# The front door clients are sent through (docs/operations.md), and the bare balancer under it.
FRONTS = ("tenant gateway", "replica balancer")


def retrying_channel_args(attempts: int = 3) -> list[tuple[str, object]]:
    """gRPC channel options that retry ModelInfer on UNAVAILABLE (transparently, with a short backoff)."""
    policy = {"methodConfig": [{
        "name": [{"service": "inference.GRPCInferenceService", "method": "ModelInfer"}],
        "retryPolicy": {"maxAttempts": attempts, "initialBackoff": "0.01s", "maxBackoff": "0.2s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(policy)),
            ("grpc.max_send_message_length", 64 * 1024 * 1024), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]


def front(kind: str, replicas: LocalReplicas) -> tuple[NginxConfig, dict[str, str]]:
    """The NGINX config of `kind` (FRONTS) over `replicas`, on free ports, and the headers a client sends
    through it: the gateway as `python -m hotpath.gateway serve` sizes it, with one tenant whose rate
    limit never bites."""
    grpc_port, http_port = free_ports(2)
    if kind == "replica balancer":
        return ReplicaBalancer(grpc_port, tuple(replicas.grpc_urls)), {}
    if kind != "tenant gateway":
        raise ValueError(f"front {kind!r}: one of {FRONTS}")
    token = new_token()
    settings = TenantGatewaySettings(grpc_port, http_port, tuple(replicas.grpc_urls), tuple(replicas.http_urls),
                                     (Tenant("failover", token, 100_000, 100_000),), admission_cap("cpu"),
                                     max_body_bytes(), stream_cap())
    return settings, {"authorization": f"Bearer {token}"}


@dataclass
class Call:
    start: float
    end: float
    error: str = ""      # "status: message" of a failed call, "" when it succeeded

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1e3


@dataclass
class Failover:
    killed: str                       # gRPC address of the killed replica
    kill_at: float                    # just before the SIGKILL
    dead_at: float                    # once the killed replica was reaped: its sockets are closed
    calls: list[Call]
    unreachable_message: str          # grpc-message of the front's own UNAVAILABLE (a replica died mid-call)
    fail_timeout_s: float             # how long the front skips a replica that failed
    hops: list[LogEntry] = field(default_factory=list)

    @property
    def failed(self) -> list[Call]:
        return [c for c in self.calls if c.error]

    @property
    def broken(self) -> list[Call]:
        """Calls that failed for the client because the replica died (retries exhausted or off), not
        refused or shed for load."""
        return [c for c in self.failed if self.unreachable_message in c.error]

    @property
    def in_flight_at_kill(self) -> list[Call]:
        return [c for c in self.calls if c.start < self.kill_at < c.end]

    @property
    def retried(self) -> list[LogEntry]:
        """Calls NGINX passed on to another replica (it had sent nothing to the first)."""
        return [h for h in self.hops if len(h.upstreams) > 1]

    @property
    def gateway_errors(self) -> list[LogEntry]:
        """Calls the front answered with an error: each met a dying replica mid-call."""
        return [h for h in self.infer_hops if h.status != 200]

    @property
    def infer_hops(self) -> list[LogEntry]:
        return [h for h in self.hops if h.uri.endswith("/ModelInfer")]

    def served_share(self, after: bool) -> dict[str, int]:
        """Inference requests answered per replica: finished before the kill, or (`after`) started once
        the killed replica was gone (a call it had already taken may still finish after the signal)."""
        out: dict[str, int] = {}
        for h in self.infer_hops:
            if (h.started >= self.dead_at if after else h.at < self.kill_at) and h.status == 200:
                out[h.served_by] = out.get(h.served_by, 0) + 1
        return out

    @property
    def tries_on_killed(self) -> list[LogEntry]:
        """Calls the front sent to the dead replica after the kill (each then failed or was passed on)."""
        return [h for h in self.hops if self.killed in h.upstreams and h.at >= self.kill_at]

    @property
    def marked_down_at(self) -> float:
        """When the front had seen the dead replica fail (an upper bound: the log line of the first call
        that met it dead); 0 when none did."""
        failures = [h.at for h in self.tries_on_killed if h.status != 200 or h.served_by != self.killed]
        return min(failures) if failures else 0.0

    @property
    def tries_after_marked_down(self) -> list[LogEntry]:
        """Calls that reached the front after it had marked the replica down, within its fail_timeout,
        and were still sent there: none, if the front skips a failed replica."""
        down = self.marked_down_at
        return [h for h in self.tries_on_killed
                if down and down + 0.0005 < h.started < down + self.fail_timeout_s]

    @property
    def disrupted_ms(self) -> float:
        """From the kill to the last call that the dead replica broke (0 when none did)."""
        broken = [h.at for h in self.gateway_errors] + [c.end for c in self.failed]
        return (max(broken) - self.kill_at) * 1e3 if broken else 0.0

    def latency_ms(self, start: float, end: float) -> tuple[float, float]:
        """Median and max latency of calls that started in [start, end)."""
        window = [c.ms for c in self.calls if start <= c.start < end and not c.error]
        return (statistics.median(window), max(window)) if window else (0.0, 0.0)


def _wait_until_served(url: str, model: str, input_name: str, headers: dict | None, timeout_s: float = 30.0) -> None:
    """Block until a request through the front succeeds: a refused connection before NGINX listens
    (seen once in CI) is a start-up race, not a failover result."""
    deadline = time.monotonic() + timeout_s
    with grpcclient.InferenceServerClient(url) as client:
        while True:
            try:
                client.infer(model, [text_input(input_name, ["failover warm-up"])], headers=headers, client_timeout=10)
                return
            except InferenceServerException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def run(replicas: LocalReplicas, front: LocalNginx, model: str, input_name: str, clients: int = 4,
        duration_s: float = 10.0, kill_after_s: float = 4.0, kill_index: int = 0,
        client_retries: bool = True, headers: dict | None = None) -> Failover:
    """`clients` closed loops of unique texts through `front` (with `headers`, e.g. a tenant token);
    replica `kill_index` gets SIGKILL after `kill_after_s`."""
    _wait_until_served(front.grpc_url, model, input_name, headers)
    logged = len(front.log())
    calls: list[Call] = []
    lock = threading.Lock()
    t0 = time.time()
    stop = t0 + duration_s

    def loop():
        client = grpcclient.InferenceServerClient(
            front.grpc_url, channel_args=retrying_channel_args() if client_retries else None)
        while time.time() < stop:
            start = time.time()
            text = f"failover probe {uuid.uuid4()}"
            for _attempt in range(3):
                try:
                    client.infer(model, [text_input(input_name, [text])], headers=headers, client_timeout=30)
                    error = ""
                    break
                except InferenceServerException as exc:
                    error = f"{exc.status() or 'UNKNOWN'}: {exc.message()}"
                    # The channel's policy retries UNAVAILABLE; a stream a proxy reset (the replica died mid-call)
                    # is retried here, as hotpath.client does (client_error: retryable).
                    if not (client_retries and client_error(model, exc).retryable and "RST_STREAM" in error):
                        break
            with lock:
                calls.append(Call(start, time.time(), error))
        client.close()

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(kill_after_s)
    kill_at = time.time()
    replicas.kill(kill_index)
    dead_at = time.time()
    for t in threads:
        t.join()
    config = front.settings
    result = Failover(replicas.grpc_urls[kill_index], kill_at, dead_at, sorted(calls, key=lambda c: c.start),
                      config.unreachable_message, config.fail_timeout_s)
    result.hops = front.log(logged, count=len(calls))   # every call has a line (a retried one more)
    return result
