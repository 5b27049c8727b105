"""A bounded cache of KV entries for prompt prefixes, keyed by blocks of tokens (as vLLM's prefix caching).

A sequence's tokens are cut into blocks of `block` tokens; block i is keyed by a hash chain (its
parent's key and its own tokens), so a key names the whole prefix up to the block's end and a
follow-up chat turn (the same conversation plus a new message) finds every block of the turns
before it. The KV entries of a position depend only on the tokens up to it, so a cached block is
valid for any sequence with the same prefix. Lookups compare the stored tokens too: a hash
collision is a miss, never a wrong answer.

Blocks are copied into a sequence's KV slot (the pool is dense per slot, not paged), so no sequence
holds a reference to a block once it is copied. What counts instead is the chain: a block whose
children are cached is never evicted before them (a child is unreachable without its parent).
Eviction takes the least recently used leaf.
"""

from __future__ import annotations

import collections

import numpy as np

from hotpath.runtime.generation.kv_pool import KVPool


class PrefixCache:
    """Up to `blocks` blocks of `block` tokens of every layer's keys and values."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, block: int, blocks: int):
        if block < 1 or blocks < 1:
            raise ValueError(f"prefix cache needs block >= 1 and blocks >= 1, got {block} x {blocks}")
        self.block, self.blocks = block, blocks
        self.keys = [np.zeros((blocks, kv_heads, head_dim, block), np.float32) for _ in range(layers)]
        self.values = [np.zeros((blocks, kv_heads, block, head_dim), np.float32) for _ in range(layers)]
        self._index: dict[int, int] = {}                     # chain key -> block id
        self._tokens: list[tuple[int, ...] | None] = [None] * blocks
        self._parent: list[int] = [-1] * blocks            # parent block id (-1: the first block)
        self._key: list[int] = [0] * blocks
        self._children = [0] * blocks
        self._lru: collections.OrderedDict[int, None] = collections.OrderedDict()  # block ids, oldest first
        self._free = list(range(blocks - 1, -1, -1))
        self.evictions = 0

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys + self.values)

    @property
    def used(self) -> int:
        return self.blocks - len(self._free)

    def _chain(self, tokens: list[int], limit: int):
        """(key, block tokens) of each full block within tokens[:limit]."""
        key = 0
        for start in range(0, min(limit, len(tokens)) - self.block + 1, self.block):
            chunk = tuple(tokens[start:start + self.block])
            key = hash((key, chunk))
            yield key, chunk

    def match(self, tokens: list[int], limit: int) -> list[int]:
        """Block ids of the longest cached prefix of tokens[:limit] (whole blocks), marked recently used."""
        found = []
        for key, chunk in self._chain(tokens, limit):
            bid = self._index.get(key)
            if bid is None or self._tokens[bid] != chunk or self._parent[bid] != (found[-1] if found else -1):
                break
            found.append(bid)
        for bid in found:
            self._lru.move_to_end(bid)
        return found

    def load(self, ids: list[int], pool: KVPool, row: int) -> int:
        """Copy blocks `ids` (a chain from position 0) into `row` of the pool; returns positions written."""
        n = len(ids) * self.block
        if not n:
            return 0
        index = np.asarray(ids)
        for ck, cv, k, v in zip(self.keys, self.values, pool.keys, pool.values):
            heads, dim = ck.shape[1], ck.shape[2]
            k[row, :, :, :n] = ck[index].transpose(1, 2, 0, 3).reshape(heads, dim, n)
            v[row, :, :n] = cv[index].transpose(1, 0, 2, 3).reshape(heads, n, dim)
        return n

    def store(self, tokens: list[int], pool: KVPool, row: int, length: int) -> int:
        """Cache the full blocks of tokens[:length], whose KV entries are positions [0, length) of `row`.
        Blocks already cached are only marked used; returns how many blocks were added."""
        parent, added = -1, 0
        for i, (key, chunk) in enumerate(self._chain(tokens, length)):
            bid = self._index.get(key)
            if bid is not None and self._tokens[bid] == chunk and self._parent[bid] == parent:
                self._lru.move_to_end(bid)
                parent = bid
                continue
            if bid is not None:   # a hash collision with another prefix: that block gives way
                self._drop(bid)
            bid = self._allocate(protect=parent)
            if bid is None:
                return added
            start = i * self.block
            for ck, cv, k, v in zip(self.keys, self.values, pool.keys, pool.values):
                ck[bid] = k[row, :, :, start:start + self.block]
                cv[bid] = v[row, :, start:start + self.block]
            self._index[key], self._tokens[bid], self._parent[bid], self._key[bid] = bid, chunk, parent, key
            if parent >= 0:
                self._children[parent] += 1
            self._lru[bid] = None
            parent, added = bid, added + 1
        return added

    def _allocate(self, protect: int) -> int | None:
        if self._free:
            return self._free.pop()
        victim = next((b for b in self._lru if self._children[b] == 0 and b != protect), None)
        if victim is None:
            return None
        self._drop(victim)
        self.evictions += 1
        return self._free.pop()

    def _drop(self, bid: int) -> None:
        """Remove a block and (so no orphan stays reachable by its key) every cached descendant."""
        stack = [bid]
        while stack:
            b = stack.pop()
            stack += [c for c in self._lru if self._parent[c] == b]
            if self._parent[b] >= 0:
                self._children[self._parent[b]] -= 1
            del self._index[self._key[b]]
            del self._lru[b]
            self._tokens[b], self._parent[b], self._children[b] = None, -1, 0
            self._free.append(b)
