"""Where the fleet's Redis is: `HOTPATH_REDIS_URL` (redis://[:password@]host:port[/db][?timeout_ms=N]).

Unset: no Redis, every replica counts its own quotas and keeps no shared cache (one replica, as before).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

from hotpath import settings
from hotpath.errors import HotpathError

URL_ENV = settings.redis_url.name
DEFAULT_PORT = 6379
# Every Redis call of a request must be short: a slow Redis must not stall the requests it serves. A
# call to a loopback / same-zone Redis takes well under 1 ms; past this the call counts as failed.
DEFAULT_TIMEOUT_MS = 100


@dataclass(frozen=True)
class RedisTarget:
    host: str
    port: int = DEFAULT_PORT
    db: int = 0
    password: str = field(default="", repr=False)
    timeout_ms: int = DEFAULT_TIMEOUT_MS

    @property
    def url(self) -> str:
        """The URL without its password (safe to log)."""
        return f"redis://{self.host}:{self.port}/{self.db}"

    def client(self, asyncio: bool = False, **kwargs):
        """A redis-py client (hotpath's Python callers: tests), or its asyncio one (the OpenAI API)."""
        import redis
        import redis.asyncio

        timeout = self.timeout_ms / 1000
        return (redis.asyncio.Redis if asyncio else redis.Redis)(host=self.host, port=self.port, db=self.db, password=self.password or None,
                           socket_timeout=timeout, socket_connect_timeout=timeout, **kwargs)


def parse_url(url: str) -> RedisTarget:
    """A redis:// URL as a RedisTarget; a clear error for anything else (the password is never quoted)."""
    parts = urlsplit(url)
    if parts.scheme != "redis" or not parts.hostname:
        raise HotpathError(f"{URL_ENV}: expected redis://[:password@]host[:port][/db], not a {parts.scheme or 'bare'}"
                           " URL (TLS and unix sockets are not supported)")
    try:
        port = parts.port or DEFAULT_PORT
        db = int(parts.path.strip("/") or 0)
        query = parse_qs(parts.query)
        timeout_ms = int(query.pop("timeout_ms", [DEFAULT_TIMEOUT_MS])[0])
    except ValueError:
        raise HotpathError(f"{URL_ENV}: port, db and timeout_ms must be integers") from None
    if query or timeout_ms < 1 or db < 0:
        raise HotpathError(f"{URL_ENV}: unknown query {sorted(query)} or a timeout_ms < 1 / db < 0")
    return RedisTarget(parts.hostname, port, db, unquote(parts.password or ""), timeout_ms)


def from_env() -> RedisTarget | None:
    """The target `HOTPATH_REDIS_URL` names, or None when it is unset or empty."""
    url = settings.redis_url()
    return parse_url(url) if url else None
