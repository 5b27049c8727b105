"""The tenant gateway's nginx.conf, built as crossplane directives (hotpath.nginx runs it).

Two servers on loopback in front of the same upstreams: gRPC (h2c) and HTTP/1.1. Each answers its
own refusals in its protocol: gRPC with a trailers-only response carrying `grpc-status` (a client
sees the status, not an HTTP error), HTTP with Triton's JSON error body.

| check (NGINX phase order) | directive | gRPC status | HTTP |
|---|---|---|---|
| tenant token | `map $http_authorization` + `if` (server rewrite) | 16 UNAUTHENTICATED | 401 |
| API a tenant may call | allow-listed locations, `return 403` in `/` (rewrite) | 7 PERMISSION_DENIED | 403 |
| open streams | `limit_conn` on one key (preaccess) | 14 UNAVAILABLE | 503 |
| tenant's open requests (hotpath.gateway.client_bounds) | `limit_conn` on the tenant (preaccess) | 8 RESOURCE_EXHAUSTED | 429 |
| body size | `client_max_body_size` (access, as the body is read) | 3 INVALID_ARGUMENT | 413 |
| public endpoint (no internal step model) | front_door.lua (access) | 5 NOT_FOUND | 404 |
| the tenant's scopes grant the model (a store: its level grants a write) | front_door.lua (access) | 7 PERMISSION_DENIED | 403 |
| HTTP body: JSON nesting, KServe v2 shape, the model's inputs | front_door.lua (access) | - | 400 |
| tenant's requests/s and generated tokens/min (GCRA) | front_door.lua (access) | 8 RESOURCE_EXHAUSTED | 429 |
| tenant's fair share of in-flight calls and items | front_door.lua (access) | 14 UNAVAILABLE | 503 |

Every inference request counts against its tenant's rate, each message of a gRPC stream included: NGINX
passes streams to the stream admission (hotpath.gateway.streams), which reads each message and asks
front_door.lua over a unix socket beside nginx.conf (`/charge`) before passing it on, so both doors
draw on one budget per tenant.

Tenants may call inference, streams (gRPC ModelStreamInfer, HTTP generate and generate_stream),
health, metadata and model config; repository, shared-memory, trace, logging and statistics APIs
are answered by the gateway (they need Triton's admin key, which belongs to operators).

Every call passed upstream (Triton gRPC and HTTP, the stream admission, the OpenAI API) carries the
gateway's `x-hotpath-tenant` (the tenant's name) and `x-hotpath-collection` (the tenant's name; "shared" for a
store call by a tenant with "admin" on that store), set by grpc_set_header / proxy_set_header, which drop a
client's header of the same name in any letter case (hotpath.runtime.tenancy). Body parameters named
x-hotpath-* are refused (front_door.REFUSED_PARAMETERS).

Upstreams get the failover policy of hotpath.nginx.upstreams (measured in perf/reports/failover.md):
a replica that fails is skipped, and inference and read-only calls go to another one.

Inference calls are admitted by front_door.lua (hotpath.gateway.front_door): at most `max_in_flight`
calls and `max_work` items per replica, each tenant held to its weighted share while others are active.
Streams have their own cap (limit_conn counts a call from its header until its response ends; under
HTTP/2 each concurrent stream counts as a connection): a stream lasts seconds, and would hold a slot
sized for a call of milliseconds. A gRPC stream counts once, however many requests it carries.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from hotpath.gateway import client_bounds, openai_door
from hotpath.gateway.front_door import (
    ADMITTED_VARIABLE,
    CHARGE_SOCKET,
    COLLECTION_VARIABLE,
    CONFIG_FILE,
    SHARED_DICT,
    STREAM_TENANT_HEADER,
    PublicModel,
    cjson_cpath,
    front_door_json,
    init_lua,
    lua_call,
    module_paths,
    public_models,
    scope_warnings,
    work_cap,
)
from hotpath.gateway.tenants import Tenant
from hotpath.nginx.access_log import GRPC_HEADER_FIELD, TENANT_FIELD
from hotpath.nginx.access_log import LOG_FIELDS as NGINX_LOG_FIELDS
from hotpath.nginx.directives import d, grpc_error, main_context, render
from hotpath.nginx.upstreams import FAIL_TIMEOUT_S, connect_timeout, retry_idempotent, upstream
from hotpath.runtime.tenancy import COLLECTION_HEADER, TENANT_HEADER
from hotpath.shared_state.cache_key import DEFAULT_TTL_S, NAMESPACE_HEADER
from hotpath.shared_state.target import RedisTarget

# Refusal messages: the client sees them as the gRPC status message or the HTTP error text.
UNAUTHENTICATED = "gateway: missing or unknown tenant token; send the header authorization: Bearer <token>"
RATE_LIMITED = "gateway: tenant request rate limit exceeded"   # front_door.lua adds the limit and a retry hint
OVERLOADED = "gateway: server at capacity ({cap} inference calls in flight); retry later"
TOO_LARGE = "gateway: request body larger than {limit} bytes"
UNREACHABLE = "gateway: no server could complete the call"
STREAMS_FULL = "gateway: server at capacity ({cap} streams open); retry later"
NO_STREAMS = "gateway: streams are not served here (no stream admission)"
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
    stream_port: int = 0                 # the stream admission's loopback port; 0: streams are refused
    charge_key: str = field(default="", repr=False)   # what the stream admission shows /charge
    redis: RedisTarget | None = None     # the fleet's Redis: shared budgets (and the exact cache); None: per replica
    cache_build: str = ""                # hotpath.shared_state.cache_key.repository_build(); "": no exact cache
    cache_ttl_s: int = DEFAULT_TTL_S
    status_port: int = 0                 # loopback /metrics and /health of the gateway itself; 0: none
    openai_port: int = 0                 # the door to the OpenAI-compatible API (hotpath.gateway.openai_door); 0: none
    openai_upstreams: tuple[str, ...] = ()   # host:port of each replica's API process
    openai: dict = field(default_factory=dict, repr=False)   # openai_door.openai_config(): the names it serves
    listen_address: str = "127.0.0.1"   # every listener's; a container's entrypoint gives 0.0.0.0
    max_tenant_requests: int = 0         # one tenant's open requests; 0: hotpath.gateway.client_bounds.tenant_bound
    openai_affinity: bool = True         # a chat conversation stays on its replica (hotpath.gateway.openai_door)
    openai_affinity_factor: float = openai_door.AFFINITY_FACTOR   # no replica above factor x the mean in flight

    log_fields = LOG_FIELDS
    unreachable_message = UNREACHABLE

    def address(self, port: int) -> str:
        """`listen`'s argument for one of the gateway's ports ("" when the port is 0: no such listener)."""
        return f"{self.listen_address}:{port}" if port else ""

    @property
    def listen_ports(self) -> list[int]:
        return [self.grpc_port, self.http_port] + [p for p in (self.status_port, self.openai_port) if p]

    @property
    def caches(self) -> bool:
        return self.redis is not None and bool(self.cache_build)

    def private_files(self) -> dict[str, str]:
        cache = {"build": self.cache_build, "ttl_s": self.cache_ttl_s} if self.caches else None
        return {TOKEN_MAP: render(token_map(self.tenants)),
                CONFIG_FILE: front_door_json(self.models, self.tenants, self.in_flight_cap, self.work_cap,
                                             OVERLOADED.format(cap=self.in_flight_cap), TENANT_FIELD, self.charge_key,
                                             self.redis, cache, self.openai_door_config())}

    def openai_door_config(self) -> dict | None:
        """front_door.json's "openai": the names the API serves, and conversation affinity's replicas when on."""
        if not self.openai_port:
            return None
        if not self.openai_affinity:
            return self.openai
        return {**self.openai, **openai_door.affinity_config(self.openai_upstreams, self.openai_affinity_factor,
                                                             self.fail_timeout_s)}

    def directives(self, workdir: Path) -> list[dict]:
        return config(self, workdir)

    def warnings(self) -> list[str]:
        """What to log at start about the tenants' scopes (front_door.scope_warnings)."""
        return scope_warnings(self.tenants, self.models, self.openai if self.openai_port else None)

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


HTTP_EXTRA = {"@unauthenticated": (d("add_header", "WWW-Authenticate", "Bearer", "always"),)}


def _http_error(name: str, status: int, message: str, *extra: dict) -> dict:
    return d("location", name, block=[d("default_type", "application/json"), *extra,
                                       d("return", status, json.dumps({"error": message}))])


def _error_pages(overloaded: str = "@overloaded") -> list[dict]:
    """Status -> named location; a location with its own `overloaded` answer repeats them all (NGINX
    inherits error_page from the server only into locations that set none)."""
    return [d("error_page", 413, "=", "@too_large"),
            d("error_page", 503, "=", overloaded),
            d("error_page", 502, 504, "=", "@unreachable")]


def _checks(protocol: str) -> list[dict]:
    """What both servers do before passing a call on: the token, error pages."""
    return [
        d("set", f"${ADMITTED_VARIABLE}", ""),   # declared for front_door.lua's admission record
        d("if", TENANT, "=", "", block=[d("return", 401)]),
        d(f"{protocol}_set_header", "Authorization", ""),   # the token stops here
        # who the call is for (hotpath.runtime.tenancy), replacing a client's header of the same name
        d("set", f"${COLLECTION_VARIABLE}", TENANT),   # front_door.lua sets "shared" for a store's admin
        d(f"{protocol}_set_header", TENANT_HEADER, TENANT),
        d(f"{protocol}_set_header", COLLECTION_HEADER, f"${COLLECTION_VARIABLE}"),
        d(f"{protocol}_set_header", NAMESPACE_HEADER, ""),   # the OpenAI door's: no client sets it anywhere
        d("error_page", 401, "=", "@unauthenticated"),
        d("error_page", 403, "=", "@admin_only"),
        *_error_pages(),
    ]


def config(s: TenantGatewaySettings, workdir: Path) -> list[dict]:
    """The whole nginx.conf; tokens stay in `workdir / TOKEN_MAP`, which it includes."""
    streams = [d("limit_conn", "streams", s.streams_cap), *client_bounds.streams(), *_error_pages("@streams_full")]
    bound = client_bounds.tenant_bound(s.max_tenant_requests, s.in_flight_cap)
    # Each refusal's named location: (name, gRPC status, HTTP status, message), for both servers.
    refusals = [("@unauthenticated", 16, 401, UNAUTHENTICATED),
                ("@admin_only", 7, 403, ADMIN_ONLY),
                ("@no_streams", 14, 503, NO_STREAMS),
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
        # One fixed key: every stream counts against one cap.
        d("limit_conn_zone", "upstream", "zone=streams:1m"),
        client_bounds.zone(TENANT),
        d("lua_package_cpath", cjson_cpath()),
        d("lua_shared_dict", SHARED_DICT, "1m"),
        d("init_by_lua", init_lua(workdir)),
        d("log_by_lua", lua_call("release") + (f"; {lua_call('cache_store')}" if s.caches else "")),
        d("limit_conn_status", 503),
        # Refusals are expected under load and are in the access log; the error log keeps real errors.
        d("limit_conn_log_level", "info"),
        d("client_max_body_size", s.max_body_bytes),
        d("client_body_buffer_size", "1m"),
        d("client_body_in_single_buffer", "on"),   # front_door.lua reads it whole; a retry re-sends it
        upstream("triton_grpc", s.grpc_upstreams, keepalive=64, fail_timeout_s=s.fail_timeout_s),
        upstream("triton_http", s.http_upstreams, keepalive=64, fail_timeout_s=s.fail_timeout_s),
        d("server", block=[
            d("listen", s.address(s.grpc_port), "http2"),
            connect_timeout("grpc"),
            *client_bounds.public("grpc", bound),
            *_checks("grpc"),
            d("location", "=", GRPC_INFER, block=[d("access_by_lua", lua_call("grpc_infer")), grpc_pass, *grpc_retry]),
            d("location", "=", GRPC_STREAM, block=_stream_location(s, streams)),
            d("location", "~", f"^{re.escape(GRPC_SERVICE)}({'|'.join(GRPC_NAMED)})$",
              block=[d("access_by_lua", lua_call("grpc_model")), grpc_pass, *grpc_retry]),
            d("location", "~", f"^{re.escape(GRPC_SERVICE)}({'|'.join(GRPC_OPEN)})$",
              block=[count("grpc"), grpc_pass, *grpc_retry]),
            d("location", "=", GRPC_HEALTH, block=[count("grpc"), grpc_pass, *grpc_retry]),
            d("location", "/", block=[d("return", 403)]),
            *[grpc_error(name, grpc_status, message) for name, grpc_status, _, message in refusals],
        ]),
        d("server", block=[
            d("listen", s.address(s.http_port)),
            d("proxy_http_version", "1.1"),
            d("proxy_set_header", "Connection", ""),   # keep upstream connections alive
            connect_timeout("proxy"),
            *client_bounds.public("http", bound),
            *_checks("proxy"),
            d("location", "~", HTTP_INFER, block=[d("access_by_lua", lua_call("http_infer", "ngx.var[1]")),
                                                  *_cache_filters(s), proxy_pass, *http_retry]),
            # generate_stream is server-sent events: each token goes on as it comes.
            d("location", "~", HTTP_STREAM, block=[*streams, d("access_by_lua", lua_call("http_generate", "ngx.var[1]")),
                                                   d("proxy_buffering", "off"), proxy_pass]),
            d("location", "~", HTTP_SERVER, block=[count("http"), proxy_pass, *http_retry]),
            d("location", "~", HTTP_MODEL, block=[d("access_by_lua", lua_call("http_model", "ngx.var[1]")),
                                                  proxy_pass, *http_retry]),
            d("location", "/", block=[d("return", 403)]),
            *[_http_error(name, http_status, message, *HTTP_EXTRA.get(name, ()))
              for name, _, http_status, message in refusals],
        ]),
        # The stream admission's questions, on a unix socket only local processes reach (and with the key).
        d("server", block=[
            d("listen", f"unix:{workdir / CHARGE_SOCKET}"),
            d("access_log", "off"),
            d("set", f"${ADMITTED_VARIABLE}", ""),   # read by the http-level log_by_lua
            d("location", "=", "/charge", block=[d("content_by_lua", lua_call("charge"))]),
            d("location", "/", block=[d("return", 404)]),
        ]),
        *_status_server(s),
        *openai_door.server(s.address(s.openai_port), s.openai_upstreams, TENANT, s.max_body_bytes, UNAUTHENTICATED,
                            client_bounds.public("openai", bound), s.openai_affinity, s.fail_timeout_s),
    ], LOG_FIELDS, modules=tuple(module_paths()))


def _cache_filters(s: TenantGatewaySettings) -> list[dict]:
    """The exact cache keeps a copy of a 200 answer (exact_cache.lua) to store it in the log phase."""
    if not s.caches:
        return []
    return [d("header_filter_by_lua", lua_call("cache_header")), d("body_filter_by_lua", lua_call("cache_body"))]


def _status_server(s: TenantGatewaySettings) -> list[dict]:
    """The gateway's own Prometheus metrics (Redis link, exact cache) and health, no token: for probes and
    Prometheus, never published (docs/deployment.md)."""
    if not s.status_port:
        return []
    return [d("server", block=[
        d("listen", s.address(s.status_port)),
        d("access_log", "off"),
        d("set", f"${ADMITTED_VARIABLE}", ""),
        d("location", "=", "/metrics", block=[d("content_by_lua", lua_call("metrics"))]),
        d("location", "=", "/health", block=[d("content_by_lua", lua_call("health"))]),
        d("location", "/", block=[d("return", 404)]),
    ])]


def count(protocol: str) -> dict:
    """Counts a call that names no model against its tenant's request rate."""
    return d("access_by_lua", lua_call("count", f'"{protocol}"'))


def _stream_location(s: TenantGatewaySettings, streams: list[dict]) -> list[dict]:
    """gRPC streams go to the stream admission, which reads every message, with the caller's tenant."""
    if not s.stream_port:
        return [d("return", 503), d("error_page", 503, "=", "@no_streams")]
    return [*streams, *client_bounds.grpc_stream(),
            d("grpc_set_header", "Authorization", ""),   # a location's own headers replace the server's
            d("grpc_set_header", STREAM_TENANT_HEADER, TENANT),
            d("grpc_set_header", COLLECTION_HEADER, f"${COLLECTION_VARIABLE}"),
            d("grpc_set_header", NAMESPACE_HEADER, ""),
            d("grpc_pass", f"grpc://127.0.0.1:{s.stream_port}")]
