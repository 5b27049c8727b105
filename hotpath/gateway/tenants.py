"""Tenants of the gateway and their tokens, read from a TOML file that is never logged.

    [defaults]                 # optional: limits of tenants that set none
    requests_per_s = 100
    burst = 50

    [tenants.acme]
    token = "<64 hex digits: python -m hotpath.gateway token>"
    requests_per_s = 200       # optional, overrides [defaults]
    burst = 100
    weight = 2                 # optional: its share of the server under contention, against the others'
    tokens_per_min = 30000     # optional: tokens it may ask text generation for per minute (max tokens asked)
    redis_failure = "open"     # optional: its quotas while the fleet's Redis cannot answer: "open" (this
                               # replica's own count, as without Redis) or "closed" (refused, UNAVAILABLE)
    cache_namespace = "acme"   # optional, default its name: tenants with one namespace share cached answers;
                               # "" caches nothing for it. Tenants that share a namespace trust each
                               # other: a hit's speed tells one what the other asked. Never for stores.

    [tenants.acme.scopes]      # optional: what it may call (without it: every endpoint, stores "write")
    endpoints = ["text_embedding", "hotpath-embed"]   # Triton endpoints and OpenAI model names; "*": every one
    stores = { retrieval = "write" }   # per store endpoint: "read" (searches), "write" (its own collection),
                                       # "admin" (writes the shared corpus: its collection is "shared")

A store endpoint is callable only through `stores`, whatever `endpoints` says. Anything not granted is
refused PERMISSION_DENIED (gRPC 7, HTTP 403); an OpenAI model is granted by its name or by its Triton
endpoint's. A tenant without `scopes` keeps the behaviour from before scopes, and the gateway warns at start.

With Redis (HOTPATH_REDIS_URL) the quotas are the fleet's: every gateway replica draws on one budget.

Tokens are secrets: errors name the tenant, never the token, and `Tenant`'s repr leaves it out.
"""

from __future__ import annotations

import re
import secrets
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.runtime.tenancy import RESERVED as TENANCY_RESERVED

DEFAULT_REQUESTS_PER_S = 100
DEFAULT_BURST = 50
DEFAULT_WEIGHT = 1
DEFAULT_TOKENS_PER_MIN = 30000   # ~5 minutes of one CPU replica's generation (~100 tokens/s at c=8)
KEYS = ("requests_per_s", "burst", "weight", "tokens_per_min")
TEXT_KEYS = ("redis_failure", "cache_namespace")
REDIS_FAILURE = ("open", "closed")
DEFAULT_REDIS_FAILURE = "open"
NAMESPACE_PATTERN = re.compile(r"[a-z0-9_-]{0,64}")
# NGINX's map compares strings case-insensitively, so a token's letters are lower-case only: what
# the gateway accepts is exactly what the file says. 32 to 128 characters.
TOKEN_PATTERN = re.compile(r"[a-z0-9_-]{32,128}")
NAME_PATTERN = re.compile(r"[a-z0-9_-]{1,64}")
# special words of NGINX's map; "local" and "shared" are collections (hotpath.runtime.tenancy)
RESERVED_NAMES = {"default", "include", "hostnames", "volatile", *TENANCY_RESERVED}
ALL = "*"                                 # scopes.endpoints: every endpoint and OpenAI model (stores excepted)
STORE_LEVELS = ("read", "write", "admin")   # each grants what the one before does, and more
SCOPE_KEYS = ("endpoints", "stores")


@dataclass(frozen=True)
class Scopes:
    """What a tenant may call: endpoints (Triton endpoints and OpenAI model names, ALL for every one) and
    per store endpoint its level (STORE_LEVELS)."""

    endpoints: tuple[str, ...] = ()
    stores: tuple[tuple[str, str], ...] = ()

    def store_level(self, store: str) -> str | None:
        return dict(self.stores).get(store)

    def grants(self, name: str) -> bool:
        """A non-store endpoint or OpenAI model name is granted."""
        return ALL in self.endpoints or name in self.endpoints


@dataclass(frozen=True)
class Tenant:
    name: str
    token: str = field(repr=False)
    requests_per_s: int = DEFAULT_REQUESTS_PER_S
    burst: int = DEFAULT_BURST
    weight: int = DEFAULT_WEIGHT   # share of in-flight calls and work while tenants contend (front_door.lua)
    tokens_per_min: int = DEFAULT_TOKENS_PER_MIN   # generation: max tokens asked, per minute
    redis_failure: str = DEFAULT_REDIS_FAILURE     # quotas while Redis cannot answer: "open" or "closed"
    cache_namespace: str | None = None             # None: the tenant's name; "": nothing cached
    scopes: Scopes | None = None                   # None: every endpoint, stores "write" (no scopes table)

    @property
    def namespace(self) -> str:
        return self.name if self.cache_namespace is None else self.cache_namespace


def new_token() -> str:
    """A fresh random token (256 bits, hex)."""
    return secrets.token_hex(32)


def _count(value, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise HotpathError(f"{what} must be an integer >= {minimum}, not {value!r}")
    return value


def _text(entry: dict, defaults: dict, key: str, where: str):
    value = entry.get(key, defaults.get(key))
    if value is None:
        return None
    ok = value in REDIS_FAILURE if key == "redis_failure" else \
        isinstance(value, str) and NAMESPACE_PATTERN.fullmatch(value)
    if not ok:
        rule = f"one of {list(REDIS_FAILURE)}" if key == "redis_failure" else "0-64 characters of a-z, 0-9, _ and -"
        raise HotpathError(f"{where}.{key} must be {rule}, not {value!r}")
    return value


def _scopes(value, where: str) -> Scopes:
    where = f"{where}.scopes"
    if not isinstance(value, dict):
        raise HotpathError(f"{where} must be a table with {' and/or '.join(SCOPE_KEYS)}")
    unknown = sorted(set(value) - set(SCOPE_KEYS))
    if unknown:
        raise HotpathError(f"{where}: unknown key(s) {unknown} (known: {', '.join(SCOPE_KEYS)})")
    endpoints = value.get("endpoints", [])
    if not isinstance(endpoints, list) or not all(isinstance(e, str) and e for e in endpoints):
        raise HotpathError(f"{where}.endpoints must be a list of endpoint or model names (\"{ALL}\": every one), "
                           f"not {endpoints!r}")
    stores = value.get("stores", {})
    if not isinstance(stores, dict):
        raise HotpathError(f"{where}.stores must be a table of store endpoint = level, not {stores!r}")
    for store, level in stores.items():
        if level not in STORE_LEVELS:
            raise HotpathError(f"{where}.stores.{store} must be one of {list(STORE_LEVELS)}, not {level!r}")
    return Scopes(tuple(dict.fromkeys(endpoints)), tuple(sorted(stores.items())))


def parse_tenants(data: dict, source: str) -> tuple[Tenant, ...]:
    """Tenants from the parsed TOML; every problem names `source` and the tenant, never a token."""
    defaults = data.get("defaults", {})
    unknown = (set(data) - {"defaults", "tenants"}) | (set(defaults) - set(KEYS) - {"redis_failure"})
    if unknown:
        raise HotpathError(f"{source}: unknown key(s) {sorted(unknown)}")
    rate = _count(defaults.get("requests_per_s", DEFAULT_REQUESTS_PER_S), f"{source}: defaults.requests_per_s", 1)
    burst = _count(defaults.get("burst", DEFAULT_BURST), f"{source}: defaults.burst", 0)
    weight = _count(defaults.get("weight", DEFAULT_WEIGHT), f"{source}: defaults.weight", 1)
    tokens = _count(defaults.get("tokens_per_min", DEFAULT_TOKENS_PER_MIN), f"{source}: defaults.tokens_per_min", 1)
    tenants, owners = [], {}
    for name, entry in (data.get("tenants") or {}).items():
        where = f"{source}: tenants.{name}"
        if not NAME_PATTERN.fullmatch(name) or name in RESERVED_NAMES:
            raise HotpathError(f"{where}: a tenant name is 1-64 characters of a-z, 0-9, _ and -, and not one of "
                               f"{sorted(RESERVED_NAMES)}")
        if not isinstance(entry, dict) or set(entry) - {"token", "scopes", *KEYS, *TEXT_KEYS}:
            raise HotpathError(f"{where}: expected a table with token, {', '.join(KEYS + TEXT_KEYS)}, scopes"
                               + (f" (unknown: {sorted(set(entry) - {'token', 'scopes', *KEYS, *TEXT_KEYS})})"
                                  if isinstance(entry, dict) else ""))
        token = entry.get("token")
        if not isinstance(token, str) or not TOKEN_PATTERN.fullmatch(token):
            raise HotpathError(f"{where}: token missing or malformed (32-128 characters of a-z, 0-9, _ and -; "
                               "`python -m hotpath.gateway token` makes one)")
        if token in owners:
            raise HotpathError(f"{where}: same token as tenants.{owners[token]}")
        owners[token] = name
        tenants.append(Tenant(name, token, _count(entry.get("requests_per_s", rate), f"{where}.requests_per_s", 1),
                              _count(entry.get("burst", burst), f"{where}.burst", 0),
                              _count(entry.get("weight", weight), f"{where}.weight", 1),
                              _count(entry.get("tokens_per_min", tokens), f"{where}.tokens_per_min", 1),
                              _text(entry, defaults, "redis_failure", where) or DEFAULT_REDIS_FAILURE,
                              _text(entry, {}, "cache_namespace", where),
                              _scopes(entry["scopes"], where) if "scopes" in entry else None))
    if not tenants:
        raise HotpathError(f"{source}: no [tenants.<name>] table: the gateway would refuse every call")
    return tuple(tenants)


def load_tenants(path: Path) -> tuple[Tenant, ...]:
    """The tenants of a TOML file (see the module docstring)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise HotpathError(f"{path}: no tenants file") from None
    except tomllib.TOMLDecodeError as exc:  # its message quotes no value, only the position
        raise HotpathError(f"{path}: not valid TOML ({exc})") from None
    return parse_tenants(data, str(path))
