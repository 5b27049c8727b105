"""The tenant gateway's door to the OpenAI-compatible API (hotpath.openai_api): a server of its own in the
same NGINX, on its own port, in front of the API processes of the replicas.

The tenant's token is the API key (`Authorization: Bearer <token>`, the same map as the Triton doors); the
same budget (requests/s, generated tokens/min), fair shares of in-flight calls and work, and body bound
hold (front_door.lua's `openai`). Every refusal is an OpenAI error object: 401 (token), 404 (a model or
route the API does not serve), 413 (body), 429 + Retry-After (budget, capacity, fair share, the tenant's open
requests: hotpath.gateway.client_bounds), 502 (no API process answered). `/v1/models` lists what the API
serves; a model the tenant's scopes do not grant (hotpath.gateway.tenants: its name or its Triton endpoint's)
is 403 with `{"error": {"type": "permission_error", "param": "model", "code": "permission_denied"}}`, for a
call and for GET /v1/models/<name> (the list itself is the API's, unfiltered). Server-sent events pass
unbuffered. Every call passed on carries the gateway's x-hotpath-tenant and x-hotpath-collection (the
tenant's name) and X-Hotpath-Cache-Namespace, replacing whatever a client sent under those names in any
letter case (NGINX drops a client's header that proxy_set_header names).

Conversation affinity (on unless `--openai-affinity off`, with two or more replicas): a chat conversation's
turns go to the replica that served its earlier ones (its vLLM prefix cache holds them), by consistent hashing
with bounded loads of the tenant and the conversation's first messages; every other call to the least-loaded
replica; a failed replica's calls pass to another one (affinity.lua says how). front_door.lua's openai() picks
an upstream group per call, `openai_api_<i>`: replica i, the others as NGINX `backup`s. Off: one `least_conn`
group, as before.
"""

from __future__ import annotations

import json
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.gateway.front_door import ADMITTED_VARIABLE, COLLECTION_VARIABLE, lua_call
from hotpath.nginx.directives import d
from hotpath.nginx.upstreams import FAIL_TIMEOUT_S, connect_timeout, upstream
from hotpath.runtime.tenancy import COLLECTION_HEADER, TENANT_HEADER
from hotpath.shared_state.cache_key import NAMESPACE_HEADER

UPSTREAM = "openai_api"
NAMESPACE_VARIABLE = "hotpath_cache_namespace"   # set by front_door.lua's openai() to the tenant's namespace
UPSTREAM_VARIABLE = "hotpath_openai_upstream"    # the upstream group a call goes to (affinity.lua sets it)
# Conversation affinity's load bound: no replica takes more than ceil(factor x the mean in flight, this call
# counted). 1.25: a replica may run a quarter above the mean before its conversations spill to the next one (a
# factor near 1 spills often, a large one hardly bounds).
AFFINITY_FACTOR = 1.25


def openai_config(repository: Path | None = None, aliases: dict[str, str] | None = None) -> dict:
    """front_door.json's "openai": the names the API serves, with their kind and default token budget."""
    from hotpath import paths
    from hotpath.openai_api.catalog import served_models
    from hotpath.specs.repository import Repository

    repository = Path(repository or paths.model_repository())
    configs = Repository(repository).configs()
    models = {}
    for name, model in served_models(repository, aliases).items():
        params = configs[model.endpoint].parameters
        default = params["default_max_tokens"].string_value if "default_max_tokens" in params else ""
        models[name] = {"kind": model.kind, "default_max_tokens": int(default) if default.isdigit() else 1,
                        "endpoint": model.endpoint}
    return {"models": models}


def affinity_config(upstreams: tuple[str, ...], factor: float = AFFINITY_FACTOR,
                    fail_timeout_s: int = FAIL_TIMEOUT_S) -> dict:
    """front_door.json's openai.affinity for these replicas (affinity.lua); {} without affinity (fewer than two)."""
    if len(upstreams) < 2:
        return {}
    if factor < 1:
        raise HotpathError(f"the affinity load factor must be >= 1 (got {factor})")
    return {"affinity": {"replicas": list(upstreams), "factor": factor, "fail_timeout_s": fail_timeout_s,
                         "upstream": UPSTREAM, "variable": UPSTREAM_VARIABLE}}


def upstream_groups(upstreams: tuple[str, ...], affinity: bool, fail_timeout_s: int = FAIL_TIMEOUT_S) -> list[dict]:
    """The least_conn group of every replica; with affinity one group per replica i, `openai_api_<i>`: replica i
    first, the others its backups (NGINX passes a call to a backup when i refuses, times out, or failed lately)."""
    groups = [upstream(UPSTREAM, upstreams, keepalive=64, fail_timeout_s=fail_timeout_s)]
    if not affinity or len(upstreams) < 2:
        return groups
    for i, primary in enumerate(upstreams, start=1):
        failure = ("max_fails=1", f"fail_timeout={fail_timeout_s}s")
        groups.append(d("upstream", f"{UPSTREAM}_{i}", block=[
            d("server", primary, *failure),
            *[d("server", s, "backup", *failure) for j, s in enumerate(upstreams, start=1) if j != i],
            d("keepalive", 64)]))
    return groups


def _error(name: str, status: int, message: str, code: str, *extra: dict) -> dict:
    body = {"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                      "param": None, "code": code}}
    if status == 401:
        body["error"]["type"] = "authentication_error"
    return d("location", name, block=[d("default_type", "application/json"), *extra,
                                       d("return", status, json.dumps(body))])


def server(address: str, upstreams: tuple[str, ...], tenant: str, max_body_bytes: int, unauthenticated: str,
           bounds: list[dict] = (), affinity: bool = False, fail_timeout_s: int = FAIL_TIMEOUT_S) -> list[dict]:
    """The upstreams and the server block listening on `address` (host:port); nothing when it is "". `bounds`:
    what a client may hold there (hotpath.gateway.client_bounds.public); `affinity`: conversation affinity
    (front_door.json carries affinity_config(upstreams) then)."""
    if not address:
        return []
    # the least_conn group unless front_door.lua's openai() names a replica's group (affinity)
    proxy = d("proxy_pass", f"http://${UPSTREAM_VARIABLE}")
    return [
        *upstream_groups(upstreams, affinity, fail_timeout_s),
        d("server", block=[
            d("listen", address),
            d("set", f"${UPSTREAM_VARIABLE}", UPSTREAM),
            d("proxy_http_version", "1.1"),
            d("proxy_set_header", "Connection", ""),
            connect_timeout("proxy"),
            *bounds,
            d("set", f"${ADMITTED_VARIABLE}", ""),
            d("set", f"${NAMESPACE_VARIABLE}", ""),
            d("if", tenant, "=", "", block=[d("return", 401)]),
            d("proxy_set_header", "Authorization", ""),   # the token stops here
            # the tenant's cache namespace for the API's answer cache; whatever the client sent is replaced
            d("proxy_set_header", NAMESPACE_HEADER, f"${NAMESPACE_VARIABLE}"),
            # who the call is for (hotpath.runtime.tenancy); the API passes them on to Triton
            d("set", f"${COLLECTION_VARIABLE}", tenant),
            d("proxy_set_header", TENANT_HEADER, tenant),
            d("proxy_set_header", COLLECTION_HEADER, f"${COLLECTION_VARIABLE}"),
            d("error_page", 401, "=", "@openai_401"),
            d("error_page", 413, "=", "@openai_413"),
            d("error_page", 502, 504, "=", "@openai_502"),
            d("location", "=", "/v1/embeddings", block=[d("access_by_lua", lua_call("openai", '"embedding"')), proxy]),
            d("location", "~", "^/v1/(chat/)?completions$",
              block=[d("access_by_lua", lua_call("openai", '"generation"')), d("proxy_buffering", "off"),
                     d("proxy_read_timeout", "300s"),
                     # the API's count of generated tokens (usage.lua): read, stripped, the rest given back
                     d("header_filter_by_lua", lua_call("usage_header")), d("body_filter_by_lua", lua_call("usage_body")),
                     proxy]),
            # vLLM's /tokenize and /detokenize: a generation model's tokenizer, under that model's scopes
            d("location", "~", "^/(de)?tokenize$", block=[d("access_by_lua", lua_call("openai", '"tokenize"')), proxy]),
            d("location", "~", "^/v1/models(?:/([^/]+))?$",
              block=[d("access_by_lua", lua_call("openai_model", "ngx.var[1]")), proxy]),
            d("location", "/", block=[d("return", 404)]),
            d("error_page", 404, "=", "@openai_404"),
            _error("@openai_401", 401, unauthenticated, "invalid_api_key", d("add_header", "WWW-Authenticate", "Bearer", "always")),
            _error("@openai_404", 404, "gateway: unknown route (POST /v1/embeddings, /v1/chat/completions, "
                                       "/v1/completions, /tokenize, /detokenize; GET /v1/models)", "not_found"),
            _error("@openai_413", 413, f"gateway: request body larger than {max_body_bytes} bytes",
                   "request_too_large"),
            _error("@openai_502", 502, "gateway: no OpenAI API process could complete the call", "unreachable"),
        ]),
    ]
