"""The replica balancer: an NGINX config (hotpath.nginx) passing gRPC calls to local replicas, nothing else.

The bare failover setup that perf/lab/studies/failover.py measures beside the tenant gateway, which adds tenants
and limits in front of the same upstream policy (hotpath.nginx.upstreams).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hotpath.nginx.access_log import LOG_FIELDS
from hotpath.nginx.directives import d, grpc_error, main_context
from hotpath.nginx.upstreams import FAIL_TIMEOUT_S, IDEMPOTENT, connect_timeout, retry_idempotent, upstream

GATEWAY_MESSAGE = "no replica could complete the call"   # grpc-message of the balancer's own errors


@dataclass(frozen=True)
class ReplicaBalancer:
    grpc_port: int
    upstreams: tuple[str, ...]          # host:port of each replica's gRPC endpoint
    retry: bool = True                  # retry idempotent calls on another replica
    fail_timeout_s: int = FAIL_TIMEOUT_S   # a failed replica is skipped this long before it is tried again
    log_fields = LOG_FIELDS
    unreachable_message = GATEWAY_MESSAGE

    @property
    def listen_ports(self) -> list[int]:
        return [self.grpc_port]

    def private_files(self) -> dict[str, str]:
        return {}

    def directives(self, workdir: Path) -> list[dict]:
        """The whole nginx.conf as crossplane directives."""
        retry = retry_idempotent("grpc", len(self.upstreams)) if self.retry else [d("grpc_next_upstream", "off")]
        return main_context(workdir, [
            d("client_body_buffer_size", "8m"),   # request bodies stay in memory
            d("client_max_body_size", "16m"),
            upstream("triton_grpc", self.upstreams, keepalive=32, fail_timeout_s=self.fail_timeout_s),
            d("server", block=[
                d("listen", f"127.0.0.1:{self.grpc_port}", "http2"),
                connect_timeout("grpc"),
                # NGINX's own errors (no replica reachable, one died mid-call) as gRPC UNAVAILABLE.
                d("error_page", 502, 503, 504, "=", "@unavailable"),
                d("location", "~", f"^/inference\\.GRPCInferenceService/({'|'.join(IDEMPOTENT)})$", block=[
                    d("grpc_pass", "grpc://triton_grpc"), *retry]),
                d("location", "/", block=[d("grpc_pass", "grpc://triton_grpc"),
                                           d("grpc_next_upstream", "error", "timeout")]),
                grpc_error("@unavailable", 14, GATEWAY_MESSAGE),
            ]),
        ])
