"""The fleet's per-tenant budgets for Python services (the OpenAI API): the same GCRA script in Redis and
the same keys as the gateway's NGINX Lua (hotpath/gateway/gcra.redis.lua, redis_link.lua), so a tenant
has one budget whichever door its calls come through."""

from __future__ import annotations

import math
from pathlib import Path

GCRA_SCRIPT = Path(__file__).parent.parent / "gateway" / "gcra.redis.lua"


def rate_key(tenant: str) -> str:
    return f"hotpath:rate:{tenant}"


def tokens_key(tenant: str) -> str:
    return f"hotpath:tokens:{tenant}"


class SharedBudget:
    """`take(key, rate_per_s, burst, cost)` -> (admitted, seconds to wait); raises redis.RedisError when Redis
    cannot answer (the caller applies the tenant's redis_failure policy)."""

    def __init__(self, client):
        self.script = client.register_script(GCRA_SCRIPT.read_text())   # EVALSHA, EVAL on NOSCRIPT

    def take(self, key: str, rate_per_s: float, burst: int, cost: int = 1) -> tuple[bool, int | None]:
        if cost > burst + 1:
            return False, None   # never fits, at any wait
        allowed, wait_us = self.script(keys=[key], args=[f"{1e6 / rate_per_s:.3f}", burst, cost])
        return (True, 0) if allowed == 1 else (False, max(1, math.ceil(wait_us / 1e6)))
