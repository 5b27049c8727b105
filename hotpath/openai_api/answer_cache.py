"""The OpenAI API's answers in the fleet's Redis (`HOTPATH_REDIS_URL`), shared by every API replica.

- **Exact**: a deterministic call (every embeddings call; a completion that is greedy, temperature 0, or
  seeded, with one choice and no log-probabilities) is answered from Redis when the same request was answered before, by any replica. The key is
  hotpath.shared_state.cache_key's: the tenant's cache namespace, the served model, the repository build
  and the request's canonical JSON without what only shapes the reply (`stream`, `stream_options`), so a
  streamed and a whole request share one answer. Embeddings keep the response bytes (a hit is byte for
  byte the first answer); completions keep what the model produced (text, finish reason, token counts),
  rendered for the caller with an id of its own.
- **Semantic** (chat, opt-in per request or per tenant): a new conversation is answered with a cached
  answer when its last user message embeds (hotpath's text_embedding) within `threshold` cosine of a
  cached one under the same model, parameters and everything before that message (system prompt, earlier
  turns). The default threshold is measured: perf/reports/semantic_cache.md. Entries live in Redis
  (Debian's Redis 7 has no vector search) as one list per context, newest first, at most MAX_ENTRIES;
  the replica scans a context's list with numpy (a few hundred vectors).

Only successes are stored, each for the TTL. Redis down or slow: every call a miss, nothing stored, the
failure counted (hotpath_openai_cache_total{result="error"}); a Redis that comes back is used again.
"""

from __future__ import annotations

import hashlib
import logging
import struct

import numpy as np
import orjson

from hotpath.shared_state.cache_key import DEFAULT_TTL_S, MAX_ANSWER_BYTES, cache_key

log = logging.getLogger("hotpath.openai_api")

SEMANTIC_PREFIX = "hotpath:semantic:"
# perf/reports/semantic_cache.md: the lowest threshold whose false-hit rate on near-miss pairs is under
# 1%. Below it MiniLM serves prompts that ask for another answer (swapped entities sit at cosine ~0.995),
# so at this default the semantic cache only joins spellings of one prompt (case, spacing, NFKC forms).
DEFAULT_SEMANTIC_THRESHOLD = 0.999
MAX_ENTRIES = 256                 # per context: a scan stays well under a millisecond
# The namespace the tenant gateway sends for a tenant whose cache_namespace is "" (nothing cached): no header
# at all would read as the API's own namespace ("api"), shared by every such tenant. Outside the namespaces'
# characters (hotpath.gateway.tenants), so no tenant's; nothing is read or stored under it.
NO_CACHE_NAMESPACE = "."
SEMANTIC_HEADER = "x-hotpath-semantic-cache"     # "on": this request may be answered semantically
PRESENTATION = ("stream", "stream_options")      # fields that shape the reply, not the answer


def canonical(body: dict, drop: tuple[str, ...] = PRESENTATION) -> bytes:
    """The request as sorted JSON without the fields in `drop`: one spelling per answer."""
    return orjson.dumps({k: v for k, v in body.items() if k not in drop}, option=orjson.OPT_SORT_KEYS)


def deterministic(body) -> bool:
    """A completion whose answer is a function of its request and that the cache replays exactly: greedy
    (temperature 0) or seeded, one choice, no log-probabilities (the cache keeps a choice's text, finish
    reason and token counts only; n > 1 or logprobs are generated every time)."""
    return ((body.temperature == 0 or body.seed is not None) and body.choices == 1
            and body.top_logprobs_wanted is None)


class AnswerCache:
    """Exact and semantic answers in Redis through a redis.asyncio client; Redis errors are misses."""

    def __init__(self, client, build: str, ttl_s: int = DEFAULT_TTL_S,
                 threshold: float = DEFAULT_SEMANTIC_THRESHOLD, counter=None):
        self.client, self.build, self.ttl_s, self.threshold = client, build, ttl_s, threshold
        self.counter = counter     # prometheus Counter labelled (kind, result), or None
        self._failing = False

    def _count(self, kind: str, result: str) -> None:
        if self.counter is not None:
            self.counter.labels(kind, result).inc()

    def _failed(self, kind: str, exc: Exception) -> None:
        self._count(kind, "error")
        if not self._failing:   # once per outage, not per request
            log.warning(f"answer cache: Redis failed ({type(exc).__name__}: {exc}); answering uncached")
        self._failing = True

    def _ok(self) -> None:
        if self._failing:
            log.warning("answer cache: Redis answers again")
        self._failing = False

    async def get(self, namespace: str, endpoint: str, request: bytes) -> bytes | None:
        import redis

        if namespace == NO_CACHE_NAMESPACE:
            return None
        try:
            value = await self.client.get(cache_key(namespace, endpoint, self.build, request))
        except (redis.RedisError, OSError) as exc:
            self._failed("exact", exc)
            return None
        self._ok()
        self._count("exact", "hit" if value is not None else "miss")
        return value

    async def put(self, namespace: str, endpoint: str, request: bytes, answer: bytes) -> None:
        """Store a success (never call it with an error) for the TTL."""
        import redis

        if len(answer) > MAX_ANSWER_BYTES or namespace == NO_CACHE_NAMESPACE:
            return
        try:
            await self.client.set(cache_key(namespace, endpoint, self.build, request), answer, ex=self.ttl_s)
        except (redis.RedisError, OSError) as exc:
            self._failed("exact", exc)
            return
        self._count("exact", "store")

    def _list(self, namespace: str, endpoint: str, context: bytes) -> str:
        return f"{SEMANTIC_PREFIX}{namespace}:{endpoint}:{self.build}:{hashlib.sha256(context).hexdigest()}"

    async def similar(self, namespace: str, endpoint: str, context: bytes,
                      vector: np.ndarray) -> tuple[bytes, float] | None:
        """The answer of the closest cached prompt in `context` if its cosine is >= threshold, and the cosine."""
        import redis

        if namespace == NO_CACHE_NAMESPACE:
            return None
        try:
            entries = await self.client.lrange(self._list(namespace, endpoint, context), 0, MAX_ENTRIES - 1)
        except (redis.RedisError, OSError) as exc:
            self._failed("semantic", exc)
            return None
        self._ok()
        best, answer = -1.0, None
        if entries:
            dim = vector.shape[0]
            usable = [e for e in entries if len(e) > 4 * dim + 4 and struct.unpack_from("<I", e)[0] == dim]
            if usable:
                matrix = np.frombuffer(b"".join(e[4:4 + 4 * dim] for e in usable), dtype="<f4").reshape(-1, dim)
                scores = matrix @ vector.astype("<f4")
                i = int(np.argmax(scores))
                best, answer = float(scores[i]), usable[i][4 + 4 * dim:]
        if answer is None or best < self.threshold:
            self._count("semantic", "miss")
            return None
        self._count("semantic", "hit")
        return answer, best

    async def remember(self, namespace: str, endpoint: str, context: bytes, vector: np.ndarray, answer: bytes) -> None:
        """Add a prompt's vector and its (successful) answer to its context's list, newest first."""
        import redis

        if len(answer) > MAX_ANSWER_BYTES or namespace == NO_CACHE_NAMESPACE:
            return
        key = self._list(namespace, endpoint, context)
        entry = struct.pack("<I", vector.shape[0]) + vector.astype("<f4").tobytes() + answer
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                await pipe.lpush(key, entry).ltrim(key, 0, MAX_ENTRIES - 1).expire(key, self.ttl_s).execute()
        except (redis.RedisError, OSError) as exc:
            self._failed("semantic", exc)
            return
        self._count("semantic", "store")
