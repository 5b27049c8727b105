"""The tenant gateway's nginx.conf, built as crossplane directives (hotpath.nginx runs it).

Two servers on loopback in front of the same upstreams: gRPC (h2c) and HTTP/1.1. Each answers its
own refusals in its protocol: gRPC with a trailers-only response carrying `grpc-status` (a client
sees the status, not an HTTP error), HTTP with Triton's JSON error body.

| check (NGINX phase order) | directive | gRPC status | HTTP |
|---|---|---|---|
| tenant token | `map $http_authorization` + `if` (server rewrite) | 16 UNAUTHENTICATED | 401 |
| API a tenant may call | allow-listed locations, `return 403` in `/` (rewrite) | 7 PERMISSION_DENIED | 403 |
| tenant's rate | `limit_req` per rate class, `nodelay` (preaccess) | 8 RESOURCE_EXHAUSTED | 429 |
| open streams | `limit_conn` on one key (preaccess) | 14 UNAVAILABLE | 503 |
| body size | `client_max_body_size` (access, as the body is read) | 3 INVALID_ARGUMENT | 413 |
| public endpoint (no internal step model) | front_door.lua (access) | 5 NOT_FOUND | 404 |
| HTTP body: JSON nesting, KServe v2 shape, the model's inputs | front_door.lua (access) | - | 400 |
| tenant's fair share of in-flight calls and items | front_door.lua (access) | 14 UNAVAILABLE | 503 |

Tenants may call inference, streams (gRPC ModelStreamInfer, HTTP generate and generate_stream),
health, metadata and model config; repository, shared-memory, trace, logging and statistics APIs
are answered by the gateway (they need Triton's admin key, which belongs to operators).

Upstreams get the failover policy of hotpath.nginx.upstreams (measured in perf/reports/failover.md):
a replica that fails is skipped, and inference and read-only calls go to another one.

Inference calls are admitted by front_door.lua (hotpath.gateway.front_door): at most `max_in_flight`
calls and `max_work` items per replica, each tenant held to its weighted share while others are active.
Streams have their own cap (limit_conn counts a call from its header until its response ends; under
HTTP/2 each concurrent stream counts as a connection): a stream lasts seconds, and would hold a slot
sized for a ~20 ms call. A gRPC stream counts once, however many requests it carries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from hotpath.gateway.front_door import (
    CONFIG_FILE,
    SHARED_DICT,
    PublicModel,
    cjson_cpath,
    front_door_json,
    init_lua,
    lua_call,
    module_paths,
    public_models,
    work_cap,
)
from hotpath.gateway.tenants import Tenant
from hotpath.nginx.access_log import GRPC_HEADER_FIELD, TENANT_FIELD
from hotpath.nginx.access_log import LOG_FIELDS as NGINX_LOG_FIELDS
from hotpath.nginx.directives import d, grpc_error, main_context, render
from hotpath.nginx.upstreams import FAIL_TIMEOUT_S, connect_timeout, retry_idempotent, upstream

# Refusal messages: the client sees them as the gRPC status message or the HTTP error text.
UNAUTHENTICATED = "gateway: missing or unknown tenant token; send the header authorization: Bearer <token>"
RATE_LIMITED = "gateway: tenant request rate limit exceeded; slow down"
OVERLOADED = "gateway: server at capacity ({cap} inference calls in flight); retry later"
TOO_LARGE = "gateway: request body larger than {limit} bytes"
UNREACHABLE = "gateway: no server could complete the call"
STREAMS_FULL = "gateway: server at capacity ({cap} streams open); retry later"
ADMIN_ONLY = "gateway: admin APIs are not exposed to tenants"

TENANT = "$" + TENANT_FIELD   # the tenant of the call's token, "" when there is none
# The gateway's own gRPC answers carry their status in a header, the server's in a trailer.
LOG_FIELDS = (*NGINX_LOG_FIELDS[:-1], TENANT_FIELD, GRPC_HEADER_FIELD, NGINX_LOG_FIELDS[-1])
# What a tenant may call; anything else is ADMIN_ONLY.
GRPC_SERVICE = "/inference.GRPCInferenceService/"
GRPC_INFER = GRPC_SERVICE + "ModelInfer"
GRPC_STREAM = GRPC_SERVICE + "ModelStreamInfer"
GRPC_OPEN = ("ServerLive", "ServerReady", "ServerMetadata")
GRPC_HEALTH = "/grpc.health.v1.Health/Check"
GRPC_NAMED = ("ModelReady", "ModelMetadata", "ModelConfig")   # their request's field 1 names the model
MODEL = r"^/v2/models/(?!stats$)([^/]+)(?:/versions/[^/]+)?"   # "stats" is the statistics API, not a model
HTTP_INFER = MODEL + "/infer$"
HTTP_STREAM = MODEL + "/generate(?:_stream)?$"
HTTP_SERVER = r"^/v2(/health/(live|ready))?$"
HTTP_MODEL = MODEL + "(?:/ready|/config)?$"
TOKEN_MAP = "tenants.map"   # next to nginx.conf, mode 0600: the only file that holds tokens


@dataclass(frozen=True)
class TenantGatewaySettings:
    grpc_port: int
    http_port: int
    grpc_upstreams: tuple[str, ...]      # host:port per replica, same order as http_upstreams
    http_upstreams: tuple[str, ...]
    tenants: tuple[Tenant, ...] = field(repr=False)
    max_in_flight: int = 8               # inference calls per replica (hotpath.gateway.limits.admission_cap)
    max_body_bytes: int = 9 << 20        # hotpath.gateway.limits.max_body_bytes
    max_streams: int = 16                # open streams per replica (hotpath.gateway.limits.stream_cap)
    fail_timeout_s: int = FAIL_TIMEOUT_S   # a failed replica is skipped this long before it is tried again
    models: tuple[PublicModel, ...] = field(default_factory=public_models, repr=False)   # what tenants may call
    max_work: int = 0                    # items in flight per replica; 0: front_door.work_cap(models)

    log_fields = LOG_FIELDS
    unreachable_message = UNREACHABLE

    @property
    def listen_ports(self) -> list[int]:
        return [self.grpc_port, self.http_port]

    def private_files(self) -> dict[str, str]:
        return {TOKEN_MAP: render(token_map(self.tenants)),
                CONFIG_FILE: front_door_json(self.models, {t.name: t.weight for t in self.tenants}, self.in_flight_cap,
                                             self.work_cap, OVERLOADED.format(cap=self.in_flight_cap), TENANT_FIELD)}

    def directives(self, workdir: Path) -> list[dict]:
        return config(self, workdir)

    @property
    def in_flight_cap(self) -> int:
        return self.max_in_flight * len(self.grpc_upstreams)

    @property
    def work_cap(self) -> int:
        return (self.max_work or work_cap(self.models)) * len(self.grpc_upstreams)

    @property
    def streams_cap(self) -> int:
        return self.max_streams * len(self.grpc_upstreams)


def token_map(tenants: tuple[Tenant, ...]) -> list[dict]:
    """The map entries `"Bearer <token>" tenant;` for TOKEN_MAP (the scheme compares case-insensitively)."""
    return [d(f"Bearer {t.token}", t.name) for t in tenants]


def rate_classes(tenants: tuple[Tenant, ...]) -> list[tuple[int, int, list[str]]]:
    """(requests/s, burst, tenant names) per distinct limit: one limit_req zone each (a zone has one rate)."""
    classes: dict[tuple[int, int], list[str]] = {}
    for t in tenants:
        classes.setdefault((t.requests_per_s, t.burst), []).append(t.name)
    return [(rate, burst, names) for (rate, burst), names in classes.items()]


HTTP_EXTRA = {"@unauthenticated": (d("add_header", "WWW-Authenticate", "Bearer", "always"),)}


def _http_error(name: str, status: int, message: str, *extra: dict) -> dict:
    return d("location", name, block=[d("default_type", "application/json"), *extra,
                                       d("return", status, json.dumps({"error": message}))])


def _error_pages(overloaded: str = "@overloaded") -> list[dict]:
    """Status -> named location; a location with its own `overloaded` answer repeats them all (NGINX
    inherits error_page from the server only into locations that set none)."""
    return [d("error_page", 429, "=", "@rate_limited"),
            d("error_page", 413, "=", "@too_large"),
            d("error_page", 503, "=", overloaded),
            d("error_page", 502, 504, "=", "@unreachable")]


def _checks(s: TenantGatewaySettings, zones: list[dict], protocol: str) -> list[dict]:
    """What both servers do before passing a call on: token, rate limits, error pages."""
    return [
        d("if", TENANT, "=", "", block=[d("return", 401)]),
        *zones,
        d(f"{protocol}_set_header", "Authorization", ""),   # the token stops here
        d("error_page", 401, "=", "@unauthenticated"),
        d("error_page", 403, "=", "@admin_only"),
        *_error_pages(),
    ]


def config(s: TenantGatewaySettings, workdir: Path) -> list[dict]:
    """The whole nginx.conf; tokens stay in `workdir / TOKEN_MAP`, which it includes."""
    classes = rate_classes(s.tenants)
    rate_maps, zones = [], []
    for i, (rate, burst, names) in enumerate(classes):
        # A zone's key is the tenant for its own tenants and "" (not counted) for everyone else.
        rate_maps += [d("map", TENANT, f"$hotpath_rate_{i}", block=[d("default", ""), *[d(n, n) for n in names]]),
                      d("limit_req_zone", f"$hotpath_rate_{i}", f"zone=rate_{i}:1m", f"rate={rate}r/s")]
        zones.append(d("limit_req", f"zone=rate_{i}", f"burst={burst}", "nodelay"))
    streams = [d("limit_conn", "streams", s.streams_cap), *_error_pages("@streams_full")]
    # Each refusal's named location: (name, gRPC status, HTTP status, message), for both servers.
    refusals = [("@unauthenticated", 16, 401, UNAUTHENTICATED),
                ("@admin_only", 7, 403, ADMIN_ONLY),
                ("@rate_limited", 8, 429, RATE_LIMITED),
                ("@too_large", 3, 413, TOO_LARGE.format(limit=s.max_body_bytes)),
                ("@overloaded", 14, 503, OVERLOADED.format(cap=s.in_flight_cap)),
                ("@streams_full", 14, 503, STREAMS_FULL.format(cap=s.streams_cap)),
                ("@unreachable", 14, 502, UNREACHABLE)]
    grpc_pass = d("grpc_pass", "grpc://triton_grpc")
    proxy_pass = d("proxy_pass", "http://triton_http")
    grpc_retry = retry_idempotent("grpc", len(s.grpc_upstreams))
    http_retry = retry_idempotent("proxy", len(s.http_upstreams))
    return main_context(workdir, [
        d("map_hash_bucket_size", 256),   # a key is "Bearer " + a token of up to 128 characters
        d("map", "$http_authorization", TENANT, block=[d("default", ""), d("include", workdir / TOKEN_MAP)]),
        *rate_maps,
        d("limit_req_status", 429),
        # One fixed key: every stream counts against one cap.
        d("limit_conn_zone", "upstream", "zone=streams:1m"),
        d("lua_package_cpath", cjson_cpath()),
        d("lua_shared_dict", SHARED_DICT, "1m"),
        d("init_by_lua", init_lua(workdir)),
        d("log_by_lua", lua_call("release")),
        d("limit_conn_status", 503),
        # Refusals are expected under load and are in the access log; the error log keeps real errors.
        d("limit_req_log_level", "info"),
        d("limit_conn_log_level", "info"),
        d("client_max_body_size", s.max_body_bytes),
        d("client_body_buffer_size", "1m"),
        upstream("triton_grpc", s.grpc_upstreams, keepalive=64, fail_timeout_s=s.fail_timeout_s),
        upstream("triton_http", s.http_upstreams, keepalive=64, fail_timeout_s=s.fail_timeout_s),
        d("server", block=[
            d("listen", f"127.0.0.1:{s.grpc_port}", "http2"),
            connect_timeout("grpc"),
            *_checks(s, zones, "grpc"),
            d("location", "=", GRPC_INFER, block=[d("access_by_lua", lua_call("grpc_infer")), grpc_pass, *grpc_retry]),
            d("location", "=", GRPC_STREAM, block=[*streams, grpc_pass]),
            d("location", "~", f"^{re.escape(GRPC_SERVICE)}({'|'.join(GRPC_NAMED)})$",
              block=[d("access_by_lua", lua_call("grpc_model")), grpc_pass, *grpc_retry]),
            d("location", "~", f"^{re.escape(GRPC_SERVICE)}({'|'.join(GRPC_OPEN)})$", block=[grpc_pass, *grpc_retry]),
            d("location", "=", GRPC_HEALTH, block=[grpc_pass, *grpc_retry]),
            d("location", "/", block=[d("return", 403)]),
            *[grpc_error(name, grpc_status, message) for name, grpc_status, _, message in refusals],
        ]),
        d("server", block=[
            d("listen", f"127.0.0.1:{s.http_port}"),
            d("proxy_http_version", "1.1"),
            d("proxy_set_header", "Connection", ""),   # keep upstream connections alive
            connect_timeout("proxy"),
            *_checks(s, zones, "proxy"),
            d("location", "~", HTTP_INFER, block=[d("access_by_lua", lua_call("http_infer", "ngx.var[1]")),
                                                  proxy_pass, *http_retry]),
            # generate_stream is server-sent events: each token goes on as it comes.
            d("location", "~", HTTP_STREAM, block=[*streams, d("access_by_lua", lua_call("http_generate", "ngx.var[1]")),
                                                   d("proxy_buffering", "off"), proxy_pass]),
            d("location", "~", HTTP_SERVER, block=[proxy_pass, *http_retry]),
            d("location", "~", HTTP_MODEL, block=[d("access_by_lua", lua_call("http_model", "ngx.var[1]")),
                                                  proxy_pass, *http_retry]),
            d("location", "/", block=[d("return", 403)]),
            *[_http_error(name, http_status, message, *HTTP_EXTRA.get(name, ()))
              for name, _, http_status, message in refusals],
        ]),
    ], LOG_FIELDS, modules=tuple(module_paths()))
