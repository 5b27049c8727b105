"""The failover policy both configs give their upstreams, as measured in perf/reports/failover.md.

A replica that fails once is skipped for `fail_timeout` (`max_fails=1`). Stateless inference and
read-only calls may run twice: they are passed to another replica on a connection error, a timeout,
or a 502/503, even when the request already reached one (NGINX never retries a POST, which every gRPC
call is, without `non_idempotent`). Repository, shared-memory, trace and streaming calls change state
or last long and keep NGINX's default (`error timeout`: only before anything was sent).
"""

from __future__ import annotations

from hotpath.nginx.directives import d

# gRPC methods that may run twice.
IDEMPOTENT = ("ModelInfer", "ModelReady", "ServerReady", "ServerLive", "ModelMetadata", "ModelConfig",
              "ServerMetadata", "ModelStatistics")
FAIL_TIMEOUT_S = 10
CONNECT_TIMEOUT = "1s"   # loopback or a LAN: a replica that does not accept within 1 s is down


def upstream(name: str, servers: tuple[str, ...], keepalive: int, fail_timeout_s: int = FAIL_TIMEOUT_S) -> dict:
    """Least-connection balancing over `servers` (host:port), each skipped for `fail_timeout_s` after a failure."""
    return d("upstream", name, block=[
        d("least_conn"), *[d("server", s, "max_fails=1", f"fail_timeout={fail_timeout_s}s") for s in servers],
        d("keepalive", keepalive)])


def connect_timeout(protocol: str) -> dict:
    """`protocol` is the module's prefix: "grpc" or "proxy"."""
    return d(f"{protocol}_connect_timeout", CONNECT_TIMEOUT)


def retry_idempotent(protocol: str, replicas: int) -> list[dict]:
    """For a location of idempotent calls: try each replica once before answering an error."""
    return [d(f"{protocol}_next_upstream", "error", "timeout", "http_502", "http_503", "non_idempotent"),
            d(f"{protocol}_next_upstream_tries", replicas)]
