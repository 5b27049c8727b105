"""What one client may hold at the gateway's public doors (gRPC, HTTP, OpenAI): read timeouts, an idle
bound, and a bound on each tenant's open requests. perf/reports/slow_clients.md measures them.

| a client holds | bound (NGINX) | then |
|---|---|---|
| a connection that sends no whole request head (HTTP/2: before its first stream) | client_header_timeout | closed |
| a request body that stops arriving | client_body_timeout, between two reads | closed, logged 408 |
| an answer it stops reading | send_timeout | closed |
| an idle connection between requests (HTTP/2: between streams) | keepalive_timeout, keepalive_requests | closed |
| one tenant's requests open at once (body arriving, waiting, answered) | limit_conn on the tenant | 429 / RESOURCE_EXHAUSTED |

NGINX 1.22 (Debian 12) has no http2_idle_timeout / http2_recv_timeout: since 1.19.7 HTTP/2 connections
take keepalive_timeout and client_header_timeout as HTTP/1.1 does (its changelog); a body read timeout
answers nothing, NGINX closes (HTTP/2: resets the stream). The values are hotpath.settings' (one per
knob for every public listener, the OpenAI API alone included).

A request counts against the replicas' in-flight cap only once its body is whole (front_door.lua admits
after reading it), so a half-sent body holds a connection and its tenant's bound, never a replica's slot.
NGINX times each read, not the whole body: a client that trickles a byte per interval keeps its request
until the body is whole or 408, and its tenant's bound is what limits how many it holds.

The tenant bound is the tenant's own limit, like its request rate (429 / RESOURCE_EXHAUSTED, retry after
1 s), not the server's overload (503 / UNAVAILABLE). Stream locations keep their own cap (`limit_conn
streams`, which replaces the server's limit_conn there), under 16 per replica: far below the bound.
"""

from __future__ import annotations

import json

from hotpath import settings
from hotpath.nginx.directives import d, grpc_error

ZONE = "tenant_requests"
BUSY_STATUS = 429
BUSY_PAGE = "@tenant_busy"
BUSY = "gateway: this tenant has {bound} requests open, its bound; retry when one ends"
KEEPALIVE_REQUESTS = 1000   # NGINX's default since 1.19.10, said explicitly: a connection's memory is freed that often
# tritonclient's streams keep their send side open between messages; NGINX resets a gRPC stream whose client
# and server both stay silent this long (its default before these bounds).
GRPC_STREAM_BODY_TIMEOUT_S = 60


def tenant_bound(max_tenant_requests: int, in_flight_cap: int) -> int:
    """Requests one tenant may have open at once: the setting, else 4x the in-flight cap (at least 64), so a
    tenant alone can fill the cap and have as many again arriving and waiting for an answer."""
    return max_tenant_requests or max(64, 4 * in_flight_cap)


def zone(tenant_variable: str) -> dict:
    """The http-level zone counting each tenant's open requests (a request with no tenant is refused 401 first)."""
    return d("limit_conn_zone", tenant_variable, f"zone={ZONE}:1m")


def public(protocol: str, bound: int) -> list[dict]:
    """A public server's bounds, with its tenant-bound answer in the door's shape ("grpc", "http", "openai")."""
    return [*timeouts(), d("reset_timedout_connection", "on"),   # a timed-out socket's memory goes at once
            d("limit_conn", ZONE, bound), d("limit_conn_status", BUSY_STATUS),
            d("error_page", BUSY_STATUS, "=", BUSY_PAGE), _busy(protocol, BUSY.format(bound=bound))]


def timeouts() -> list[dict]:
    body = f"{settings.client_body_timeout_s()}s"
    return [d("client_header_timeout", f"{settings.client_header_timeout_s()}s"),
            d("client_body_timeout", body), d("send_timeout", body),
            d("keepalive_timeout", f"{settings.keepalive_timeout_s()}s"),
            d("keepalive_requests", KEEPALIVE_REQUESTS)]


def streams() -> list[dict]:
    """For a location with its own `limit_conn streams`: its refusals stay 503 (the server's status is 429)."""
    return [d("limit_conn_status", 503)]


def grpc_stream() -> list[dict]:
    return [d("client_body_timeout", f"{GRPC_STREAM_BODY_TIMEOUT_S}s")]


def _busy(protocol: str, message: str) -> dict:
    if protocol == "grpc":
        return grpc_error(BUSY_PAGE, 8, message)   # RESOURCE_EXHAUSTED: hotpath.client retries it
    error = {"error": message} if protocol == "http" else {"error": {
        "message": message, "type": "rate_limit_error", "param": None, "code": "too_many_open_requests"}}
    return d("location", BUSY_PAGE, block=[d("default_type", "application/json"),
                                            d("add_header", "Retry-After", 1, "always"),
                                            d("return", BUSY_STATUS, json.dumps(error))])
