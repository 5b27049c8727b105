"""Kill one replica under a bounded closed-loop load through the gateway; see what failed and how fast
traffic moved. Used by tests/integration/test_scaleout.py and perf/failover.py.

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

from hotpath.client import text_input
from hotpath.scaleout.nginx import GATEWAY_MESSAGE, Hop, LocalNginx, parse_access_log
from hotpath.scaleout.replicas import LocalReplicas


def retrying_channel_args(attempts: int = 3) -> list[tuple[str, object]]:
    """gRPC channel options that retry ModelInfer on UNAVAILABLE (transparently, with a short backoff)."""
    policy = {"methodConfig": [{
        "name": [{"service": "inference.GRPCInferenceService", "method": "ModelInfer"}],
        "retryPolicy": {"maxAttempts": attempts, "initialBackoff": "0.01s", "maxBackoff": "0.2s",
                        "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]}
    return [("grpc.enable_retries", 1), ("grpc.service_config", json.dumps(policy)),
            ("grpc.max_send_message_length", 64 * 1024 * 1024), ("grpc.max_receive_message_length", 64 * 1024 * 1024)]


@dataclass
class Call:
    start: float
    end: float
    error: str = ""      # "status: message" of a failed call, "" when it succeeded

    @property
    def ms(self) -> float:
        return (self.end - self.start) * 1e3

    @property
    def broken_by_gateway(self) -> bool:
        """Failed because its replica died under it (the gateway's own UNAVAILABLE), not shed by a queue."""
        return GATEWAY_MESSAGE in self.error


@dataclass
class Failover:
    killed: str                       # gRPC address of the killed replica
    kill_at: float
    calls: list[Call]
    hops: list[Hop] = field(default_factory=list)

    @property
    def failed(self) -> list[Call]:
        return [c for c in self.calls if c.error]

    @property
    def broken(self) -> list[Call]:
        """Calls that failed for the client because the replica died (retries exhausted or off)."""
        return [c for c in self.failed if c.broken_by_gateway]

    @property
    def in_flight_at_kill(self) -> list[Call]:
        return [c for c in self.calls if c.start < self.kill_at < c.end]

    @property
    def retried(self) -> list[Hop]:
        """Calls NGINX passed on to another replica (it had sent nothing to the first)."""
        return [h for h in self.hops if len(h.upstreams) > 1]

    @property
    def gateway_errors(self) -> list[Hop]:
        """Calls the gateway answered with an error: each met a dying replica mid-call."""
        return [h for h in self.infer_hops if h.status != 200]

    @property
    def infer_hops(self) -> list[Hop]:
        return [h for h in self.hops if h.uri.endswith("/ModelInfer")]

    def served_share(self, after: bool) -> dict[str, int]:
        """Inference requests answered per replica before (or after) the kill."""
        out: dict[str, int] = {}
        for h in self.infer_hops:
            if (h.at >= self.kill_at) == after and h.status == 200:
                out[h.served_by] = out.get(h.served_by, 0) + 1
        return out

    @property
    def tries_on_killed(self) -> list[Hop]:
        """Calls the gateway sent to the dead replica after the kill (each then failed or was passed on)."""
        return [h for h in self.hops if self.killed in h.upstreams and h.at >= self.kill_at]

    @property
    def disrupted_ms(self) -> float:
        """From the kill to the last call that the dead replica broke (0 when none did)."""
        broken = [h.at for h in self.gateway_errors] + [c.end for c in self.failed]
        return (max(broken) - self.kill_at) * 1e3 if broken else 0.0

    def latency_ms(self, start: float, end: float) -> tuple[float, float]:
        """Median and max latency of calls that started in [start, end)."""
        window = [c.ms for c in self.calls if start <= c.start < end and not c.error]
        return (statistics.median(window), max(window)) if window else (0.0, 0.0)


def _wait_until_served(url: str, model: str, input_name: str, timeout_s: float = 30.0) -> None:
    """Block until a request through the gateway succeeds: a refused connection before NGINX listens
    (seen once in CI) is a start-up race, not a failover result."""
    deadline = time.monotonic() + timeout_s
    with grpcclient.InferenceServerClient(url) as client:
        while True:
            try:
                client.infer(model, [text_input(input_name, ["failover warm-up"])], client_timeout=10)
                return
            except InferenceServerException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


def run(replicas: LocalReplicas, gateway: LocalNginx, model: str, input_name: str, clients: int = 4,
        duration_s: float = 10.0, kill_after_s: float = 4.0, kill_index: int = 0,
        client_retries: bool = True) -> Failover:
    """`clients` closed loops of unique texts through the gateway; replica `kill_index` gets SIGKILL."""
    _wait_until_served(gateway.grpc_url, model, input_name)
    calls: list[Call] = []
    lock = threading.Lock()
    t0 = time.time()
    stop = t0 + duration_s

    def loop():
        client = grpcclient.InferenceServerClient(
            gateway.grpc_url, channel_args=retrying_channel_args() if client_retries else None)
        while time.time() < stop:
            start = time.time()
            try:
                client.infer(model, [text_input(input_name, [f"failover probe {uuid.uuid4()}"])], client_timeout=30)
                error = ""
            except InferenceServerException as exc:
                error = f"{exc.status() or 'UNKNOWN'}: {exc.message()}"
            with lock:
                calls.append(Call(start, time.time(), error))
        client.close()

    threads = [threading.Thread(target=loop) for _ in range(clients)]
    for t in threads:
        t.start()
    time.sleep(kill_after_s)
    kill_at = time.time()
    replicas.kill(kill_index)
    for t in threads:
        t.join()
    time.sleep(0.2)   # the access log line of the last request
    result = Failover(replicas.grpc_urls[kill_index], kill_at, sorted(calls, key=lambda c: c.start))
    result.hops = parse_access_log(gateway.access_log.read_text())
    return result
