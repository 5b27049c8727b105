"""The KV cache pool: preallocated per-layer arrays, one row (slot) per sequence in flight.

Occupied slots are always rows 0..n-1, so the batch a decode step reads is a contiguous prefix of
every array and goes to ONNX Runtime without a copy. When a sequence leaves, the engine moves the
last row into the hole (`move`), copying only that sequence's valid positions.
Keys are stored transposed ([kv_heads, head_dim, positions]) as the decoder graph reads them.

The graph reads (and attends over) every position of the arrays it is given, valid or masked, so
the arrays are views of `view` positions per row, not of the full `capacity`: `view` follows the
longest sequence in flight in power-of-two steps from MIN_VIEW (a 100-token stream reads 128
positions per layer instead of 512: SmolLM2's 30 layers read 5.9 MB instead of 23.6 MB per stream
and decode step, ~140 MB less at 8 streams). The views are the leading part of one preallocated
buffer per array, so they stay C-contiguous; `fit` changes the view and moves the rows in use into
the new layout (a copy of the valid part, once per power of two a sequence grows past). Positions beyond a sequence's length hold stale
but finite values (the buffers start zeroed and only ever hold cache entries), which the graph masks.

The buffers hold `budget` positions per layer (default slots x capacity), shared by the rows in use:
a view of V positions has room for budget // V rows (at most `slots`). Few long sequences or many
short ones fit the same memory; `fits` says whether a batch does (the engine waits or preempts
when it would not).
"""

from __future__ import annotations

import itertools

import numpy as np

MIN_VIEW = 64
_LAYOUTS = itertools.count(1)   # layout ids are unique across pools: a decoder's cached binding never
                                # matches a later pool that happens to reuse a freed one's id()


class KVPool:
    """`slots` sequences of up to `capacity` tokens each: the bound on tokens in flight."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, slots: int, capacity: int, min_view: int = MIN_VIEW,
                 budget: int | None = None):
        if slots < 1 or capacity < 2:
            raise ValueError(f"KV pool needs slots >= 1 and capacity >= 2, got {slots} x {capacity}")
        budget = slots * capacity if budget is None else budget
        if budget < capacity:
            raise ValueError(f"KV pool budget {budget} must hold one sequence of the {capacity}-token capacity")
        self.slots, self.capacity, self.kv_heads, self.head_dim = slots, capacity, kv_heads, head_dim
        self.budget = min(budget, slots * capacity)
        self.min_view = max(2, min(min_view, capacity))
        size = self.budget * kv_heads * head_dim
        self._key_store = [np.zeros(size, np.float32) for _ in range(layers)]
        self._value_store = [np.zeros(size, np.float32) for _ in range(layers)]
        self.layout = 0        # changes whenever the views change (the decoder caches bindings per layout)
        self.relayouts = 0
        self._set_view(self.min_view)

    def room(self, view: int) -> int:
        """Rows a view of `view` positions has room for."""
        return min(self.slots, self.budget // view)

    def fits(self, rows: int, needed: int) -> bool:
        """Whether `rows` sequences, the longest needing `needed` positions, fit the budget."""
        return rows <= self.room(self.bucket(max(needed, 1)))

    def _set_view(self, view: int) -> None:
        rows = self.room(view)
        n = rows * self.kv_heads * self.head_dim * view
        shape_k = (rows, self.kv_heads, self.head_dim, view)
        shape_v = (rows, self.kv_heads, view, self.head_dim)
        self.keys = [s[:n].reshape(shape_k) for s in self._key_store]
        self.values = [s[:n].reshape(shape_v) for s in self._value_store]
        self.view = view
        self.layout = next(_LAYOUTS)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self._key_store + self._value_store)

    def bucket(self, length: int) -> int:
        """The smallest view (MIN_VIEW x 2^k, at most `capacity`) that holds `length` positions."""
        if length > self.capacity:
            raise ValueError(f"{length} positions do not fit the pool's {self.capacity}")
        view = self.min_view
        while view < length:
            view *= 2
        return min(view, self.capacity)

    def fit(self, needed: int, rows: int, used: int) -> bool:
        """Make positions [0, needed) addressable for rows [0, rows), whose first `used` positions are
        valid: widen the view when needed exceeds it, narrow it when a quarter of it would do.
        Returns True when the layout changed."""
        target = self.bucket(max(needed, 1))
        if target > self.view:
            new = target
        elif target * 4 <= self.view:
            new = max(target * 2, self.min_view)
        else:
            return False
        if rows > self.room(new):
            raise ValueError(f"{rows} rows of {new} positions exceed the pool's budget of {self.budget}")
        keep = min(used, self.view, new)
        saved = [(k[:rows, :, :, :keep].copy(), v[:rows, :, :keep].copy()) for k, v in zip(self.keys, self.values)]
        self._set_view(new)
        for (k, v), (sk, sv) in zip(zip(self.keys, self.values), saved):
            k[:rows, :, :, :keep] = sk
            v[:rows, :, :keep] = sv
        self.relayouts += 1
        return True

    def rows(self, start: int, stop: int) -> list[np.ndarray]:
        """Views of rows [start, stop) in the decoder's input order (key_0, value_0, key_1, ...)."""
        out = []
        for k, v in zip(self.keys, self.values):
            out += [k[start:stop], v[start:stop]]
        return out

    def gather(self, rows: list[int], length: int) -> list[np.ndarray]:
        """Copies of the first `length` positions of `rows`, in the decoder's input order (for
        prefill groups whose rows are not contiguous; cheap while their cached length is short)."""
        index = np.asarray(rows)
        out = []
        for k, v in zip(self.keys, self.values):
            out += [k[index, :, :, :length], v[index, :, :length]]
        return out

    def write(self, row: int, position: int, new: list[np.ndarray], source_row: int = 0) -> None:
        """Store a step's new entries (decoder outputs, [B, ...]) of `source_row` at `position` of `row`."""
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            key, value = new[2 * layer][source_row], new[2 * layer + 1][source_row]
            steps = value.shape[-2]
            k[row, :, :, position:position + steps] = key
            v[row, :, position:position + steps] = value

    def write_rows(self, rows: int, positions: np.ndarray, new: list[np.ndarray], active: np.ndarray) -> None:
        """Store one decode step's entries for rows 0..rows-1 where `active`, each at its own position."""
        if rows == 1:
            if active[0]:  # one stream: basic indexing, no fancy-index machinery per array
                p = int(positions[0])
                for layer, (k, v) in enumerate(zip(self.keys, self.values)):
                    k[0, :, :, p] = new[2 * layer][0, :, :, 0]
                    v[0, :, p] = new[2 * layer + 1][0, :, 0]
            return
        index = np.nonzero(active[:rows])[0]
        pos = positions[index]
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            # Fancy indexing on (row, position) pairs writes every sequence's entry in one call
            # (measured faster than per-row slices and than np.put on precomputed flat offsets).
            k[index, :, :, pos] = new[2 * layer][index, :, :, 0]
            v[index, :, pos] = new[2 * layer + 1][index, :, 0]

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first `length` positions of row `source` into row `target` (compaction)."""
        for k, v in zip(self.keys, self.values):
            k[target, :, :, :length] = k[source, :, :, :length]
            v[target, :, :length] = v[source, :, :length]
