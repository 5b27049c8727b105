"""What the gateway's Lua checks (front_door.lua) know: the public endpoints' tensors, the caps, the tenants' weights.

The public surface is read from the repository the replicas serve: the models a client calls (no
ensemble's step), with each input's KServe datatype and whether it may be left out, and each output's
name. Internal step models (tokenizer, text_encoder, ...) are not in it, so the gateway answers
NOT_FOUND for them before Triton sees the call.
"""

from __future__ import annotations

import glob
import hashlib
import json
import secrets
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.errors import HotpathError
from hotpath.gateway.tenants import Tenant
from hotpath.runtime.tenancy import COLLECTION_HEADER, SHARED, TENANT_HEADER
from hotpath.shared_state.cache_key import (
    DEFAULT_TTL_S,
    MAX_ANSWER_BYTES,
    PREFIX,
    STORE_VERSION_PREFIX,
    STORE_WRITE_INPUT,
)
from hotpath.shared_state.quota import GCRA_SCRIPT  # run in Redis by EVALSHA (redis_link.lua)
from hotpath.shared_state.target import RedisTarget
from hotpath.specs.repository import Repository

# The parameters a tenant may send, where, with the JSON type Triton's parser expects: a wrong type is a
# 500 from it. Refused because no public endpoint needs them and they reach past the request: shared
# memory (another client's region), `classification` (on a BYTES output it kills tritonserver 2.51 with
# SIGFPE). Other request parameters ("*": scalars) pass on to the models.
PARAMETER_KINDS = {"bool": "true or false", "count": "an integer >= 0", "id": "a string or an integer >= 0",
                   "scalar": "a string, an integer or a boolean"}
PARAMETERS = {
    "request": {"*": "scalar", "sequence_id": "id", "sequence_start": "bool", "sequence_end": "bool", "priority": "count",
                "timeout": "count", "binary_data_output": "bool", "triton_enable_empty_final_response": "bool"},
    "input": {"binary_data_size": "count"},
    "output": {"binary_data": "bool"},
}
# x-hotpath-* (any case): the gateway's own headers (hotpath.runtime.tenancy), forwarded by tritonserver as
# request parameters: a tenant sending one as a parameter would speak for another tenant or collection.
REFUSED_PREFIX = "x-hotpath-"


class _Refused(tuple):
    """REFUSED_PARAMETERS: `key in` it is true for its names and for any key starting with REFUSED_PREFIX
    in any letter case (hotpath.gateway.streams asks so); as JSON it is the list of names."""

    def __contains__(self, key) -> bool:
        return tuple.__contains__(self, key) or (isinstance(key, str) and key.lower().startswith(REFUSED_PREFIX))


REFUSED_PARAMETERS = _Refused(("shared_memory_region", "shared_memory_offset", "shared_memory_byte_size",
                               "classification"))

LUA_SOURCE = Path(__file__).with_name("front_door.lua")
LUA_MODULE = "hotpath_front_door"        # its name in package.loaded (set in the master by init_by_lua)
# The modules front_door.lua requires, loaded first: the fleet's Redis (budgets) and the exact cache.
LUA_DEPENDENCIES = (("hotpath_redis_link", Path(__file__).with_name("redis_link.lua")),
                    ("hotpath_exact_cache", Path(__file__).with_name("exact_cache.lua")))
REDIS_LUA = "/usr/share/lua/5.1/nginx/redis.lua"   # Debian's lua-nginx-redis (lua-resty-redis)
REDIS_RETRY_S = 1        # after a failed Redis call it is skipped this long (no request waits out a timeout)
REDIS_POOL = (64, 30000)   # keepalive connections per worker, idle ms
SHARED_DICT = "hotpath_admission"         # in-flight calls and work per tenant, shared by the workers
CONFIG_FILE = "front_door.json"           # beside nginx.conf
CHARGE_SOCKET = "charge.sock"             # beside nginx.conf: the stream admission asks /charge there
ADMITTED_VARIABLE = "hotpath_admitted"   # "tenant work" of an admitted call, released in the log phase
# The collection a call reads and writes (hotpath.runtime.tenancy): the tenant's name, set for every call in
# the server's rewrite phase; front_door.lua sets SHARED for a store call by a tenant with "admin" on it.
COLLECTION_VARIABLE = "hotpath_collection"
# hotpath.openai_api.answer_cache.NO_CACHE_NAMESPACE (not imported: the gateway's image has no numpy): the
# namespace sent to the API for a tenant whose cache_namespace is "", under which nothing is cached
NO_CACHE_NAMESPACE = "."
STREAM_TENANT_HEADER = "x-hotpath-tenant"   # set by NGINX on streams it passes to the stream admission
# text_generation's spec: the input whose JSON max_tokens bounds the tokens a request generates (Triton's
# vLLM-backend sampling_parameters), and the parameter giving its default; a generation request is charged
# that many tokens against its tenant's tokens per minute.
MAX_TOKENS_INPUT = "sampling_parameters"
DEFAULT_MAX_TOKENS_PARAMETER = "default_max_tokens"
# Triton 2.51's JSON parser segfaults on bodies nested ~100,000 deep (docs/runtime_notes.md); a
# KServe request needs a handful of levels (body, inputs, tensor, nested data of rank <= 8).
MAX_JSON_DEPTH = 32
# Debian's packages: libnginx-mod-http-lua (and the NDK it needs) and lua-cjson, found at config time.
NGINX_MODULES = ("ndk_http_module.so", "ngx_http_lua_module.so")
NGINX_MODULE_DIRS = ("/usr/lib/nginx/modules", "/usr/share/nginx/modules")
CJSON_GLOB = "/usr/lib/*/lua/5.1/cjson.so"


@dataclass(frozen=True)
class PublicModel:
    name: str
    inputs: dict[str, tuple[str, bool]]   # name -> (KServe datatype, optional)
    outputs: tuple[str, ...]
    max_batch_size: int                    # 0: not batched (the first dimension is not a batch)
    decoupled: bool
    default_max_tokens: int = 0            # a generation endpoint's tokens when MAX_TOKENS is not given
    cacheable: bool = False                # deterministic answers: the spec enables response_cache, or a store's reads
    store: bool = False                    # writes change its answers: it has the STORE_WRITE_INPUT

    def describe(self) -> dict:
        return {"inputs": {n: {"datatype": t, "optional": o} for n, (t, o) in self.inputs.items()},
                "outputs": {n: True for n in self.outputs}, "batched": self.max_batch_size > 0,
                "decoupled": self.decoupled, "max_tokens_input": MAX_TOKENS_INPUT,
                "default_max_tokens": self.default_max_tokens or 1, "cacheable": self.cacheable,
                "store": self.store}


def kserve_datatype(data_type: int) -> str:
    """TYPE_STRING -> BYTES, TYPE_FP32 -> FP32, ...: the names of the KServe v2 protocol."""
    name = mc.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def public_models(repository: Repository | None = None) -> tuple[PublicModel, ...]:
    """The endpoints a client may call, from the repository's configs."""
    repository = repository or Repository()
    configs = repository.configs()
    return tuple(_public(e.name, configs[e.name]) for e in repository.endpoints())


def _public(name: str, config: mc.ModelConfig) -> PublicModel:
    default = config.parameters[DEFAULT_MAX_TOKENS_PARAMETER].string_value \
        if DEFAULT_MAX_TOKENS_PARAMETER in config.parameters else "0"
    inputs = {t.name: (kserve_datatype(t.data_type), t.optional) for t in config.input}
    store = STORE_WRITE_INPUT in inputs
    return PublicModel(name, inputs, tuple(t.name for t in config.output), config.max_batch_size,
                       config.model_transaction_policy.decoupled, int(default),
                       config.response_cache.enable or store, store)


def work_cap(models: tuple[PublicModel, ...]) -> int:
    """Items in flight per replica: two of the largest batch any public endpoint takes, so one tenant
    alone can have a full batch executing and the next one queued, and two tenants one each."""
    return 2 * max([m.max_batch_size for m in models] + [1])


def callable_names(tenant: Tenant, models: tuple[PublicModel, ...], openai: dict | None = None) -> dict:
    """What `tenant` may call, by name: {"calls": {endpoint: "call" | a store's level}, "openai": {model: True}}.
    Without scopes: every endpoint, a store "write". An OpenAI model is granted by its name or by its Triton
    endpoint's (hotpath.gateway.openai_door.openai_config gives each one's endpoint)."""
    scopes = tenant.scopes
    calls = {}
    for m in models:
        if scopes is None:
            calls[m.name] = "write" if m.store else "call"
        elif m.store:
            if scopes.store_level(m.name):
                calls[m.name] = scopes.store_level(m.name)
        elif scopes.grants(m.name):
            calls[m.name] = "call"
    served = (openai or {}).get("models", {})
    names = {n: True for n, s in served.items()
             if scopes is None or scopes.grants(n) or bool(s.get("endpoint")) and scopes.grants(s["endpoint"])}
    return {"calls": calls, "openai": names}


def scope_warnings(tenants: tuple[Tenant, ...], models: tuple[PublicModel, ...], openai: dict | None = None) -> list[str]:
    """What the gateway logs at start about the tenants' scopes: tenants without any (every endpoint, every
    store written), names that no public endpoint or OpenAI model has, stores named as endpoints."""
    out = []
    unscoped = [t.name for t in tenants if t.scopes is None]
    if unscoped:
        out.append(f"tenant(s) {', '.join(unscoped)} have no [tenants.<name>.scopes]: they may call every endpoint "
                   "and write their collection of every store")
    stores = {m.name for m in models if m.store}
    known = {m.name for m in models} | set((openai or {}).get("models", {}))
    for t in tenants:
        if t.scopes is None:
            continue
        for name in t.scopes.endpoints:
            if name in stores:
                out.append(f"tenants.{t.name}.scopes.endpoints: '{name}' is a store, callable only through "
                           f"scopes.stores")
            elif name != "*" and name not in known:
                out.append(f"tenants.{t.name}.scopes.endpoints: '{name}' is not served here "
                           f"(known: {', '.join(sorted(known))})")
        for name, _ in t.scopes.stores:
            if name not in stores:
                out.append(f"tenants.{t.name}.scopes.stores: '{name}' is not a store endpoint served here "
                           f"(stores: {', '.join(sorted(stores)) or 'none'})")
    return out


def front_door_json(models: tuple[PublicModel, ...], tenants: tuple[Tenant, ...], max_calls: int, max_work: int,
                    overloaded: str, tenant_variable: str, charge_key: str, redis: RedisTarget | None = None,
                    cache: dict | None = None, openai: dict | None = None) -> str:
    """front_door.lua's config. `redis`: the fleet's Redis (budgets, and with `cache` the exact cache:
    {"build": repository_build(), "ttl_s": ...})."""
    shared = {}
    if redis is not None:
        if not Path(REDIS_LUA).is_file():
            raise HotpathError(f"{REDIS_LUA} not found: scripts/setup.sh installs Debian's lua-nginx-redis")
        script = GCRA_SCRIPT.read_text()
        shared["redis"] = {"host": redis.host, "port": redis.port, "db": redis.db, "password": redis.password,
                           "timeout_ms": redis.timeout_ms, "retry_s": REDIS_RETRY_S, "pool_size": REDIS_POOL[0],
                           "idle_ms": REDIS_POOL[1], "gcra_script": script,
                           "gcra_sha": hashlib.sha1(script.encode()).hexdigest()}
        if cache is not None:
            shared["cache"] = {"prefix": PREFIX, "store_prefix": STORE_VERSION_PREFIX, "max_bytes": MAX_ANSWER_BYTES,
                               "ttl_s": DEFAULT_TTL_S, "shared_collection": SHARED, **cache}
    if openai is not None:   # the OpenAI door's names (hotpath.gateway.openai_door)
        shared["openai"] = openai
    return json.dumps({
        **shared,
        "models": {m.name: m.describe() for m in models},
        "public_list": ", ".join(m.name for m in models),
        "weights": {t.name: t.weight for t in tenants},
        "tenants": {t.name: {"requests_per_s": t.requests_per_s, "burst": t.burst, "tokens_per_min": t.tokens_per_min,
                             "redis_failure": t.redis_failure, "cache_namespace": t.namespace,
                             **_scoped(t, models, openai)}
                    for t in tenants},
        "parameters": PARAMETERS, "parameter_kinds": PARAMETER_KINDS, "refused_parameters": REFUSED_PARAMETERS,
        "max_calls": max_calls, "max_work": max_work, "store_input": STORE_WRITE_INPUT,
        "max_json_depth": MAX_JSON_DEPTH, "shared_dict": SHARED_DICT,
        "overloaded": overloaded, "tenant_variable": tenant_variable, "admitted_variable": ADMITTED_VARIABLE,
        "collection_variable": COLLECTION_VARIABLE, "shared_collection": SHARED,
        "tenant_header": TENANT_HEADER, "collection_header": COLLECTION_HEADER,
        "no_cache_namespace": NO_CACHE_NAMESPACE,
        "charge_key": charge_key or secrets.token_hex(16),   # no key given: nobody can charge
    }, sort_keys=True)


def _scoped(tenant: Tenant, models: tuple[PublicModel, ...], openai: dict | None) -> dict:
    names = callable_names(tenant, models, openai)
    # a NOT_FOUND names what this tenant may call, not every public endpoint
    return {**names, "public_list": ", ".join(sorted(names["calls"])) or "none"}


def module_paths() -> list[str]:
    """The NGINX modules the checks need, as load_module arguments; a clear error when not installed."""
    out = []
    for name in NGINX_MODULES:
        found = [f"{d}/{name}" for d in NGINX_MODULE_DIRS if Path(d, name).is_file()]
        if not found:
            raise HotpathError(f"NGINX module {name} not found in {NGINX_MODULE_DIRS}: scripts/setup.sh installs "
                               "Debian's libnginx-mod-http-lua")
        out.append(found[0])
    return out


def cjson_cpath() -> str:
    found = sorted(glob.glob(CJSON_GLOB))
    if not found:
        raise HotpathError(f"lua-cjson not found ({CJSON_GLOB}): scripts/setup.sh installs Debian's lua-cjson")
    return str(Path(found[0]).parent / "?.so") + ";;"


def lua_call(function: str, *args: str) -> str:
    """Lua source calling the checks' `function` (arguments are Lua expressions)."""
    return f'require("{LUA_MODULE}").{function}({", ".join(args)})'


def init_lua(workdir: Path) -> str:
    """Runs in the master before the workers start: the module is loaded from the package as the master's
    user reads it (workers run unprivileged, under any umask) and read its config."""
    return ("".join(f'package.loaded["{name}"] = dofile("{path}"); ' for name, path in LUA_DEPENDENCIES)
            + f'package.loaded["{LUA_MODULE}"] = dofile("{LUA_SOURCE}"); '
            + lua_call("init", f'"{workdir / CONFIG_FILE}"'))
