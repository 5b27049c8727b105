"""The KV cache pool: preallocated per-layer arrays, one row (slot) per sequence in flight.

Occupied slots are always rows 0..n-1, so the batch a decode step reads is a contiguous prefix of
every array and goes to ONNX Runtime without a copy. When a sequence leaves, the engine moves the
last row into the hole (`move`), copying only that sequence's valid positions.
Keys are stored transposed ([kv_heads, head_dim, capacity]) as the decoder graph reads them.
"""

from __future__ import annotations

import numpy as np


class KVPool:
    """`slots` sequences of up to `capacity` tokens each: the bound on tokens in flight."""

    def __init__(self, layers: int, kv_heads: int, head_dim: int, slots: int, capacity: int):
        if slots < 1 or capacity < 2:
            raise ValueError(f"KV pool needs slots >= 1 and capacity >= 2, got {slots} x {capacity}")
        self.slots, self.capacity = slots, capacity
        self.keys = [np.zeros((slots, kv_heads, head_dim, capacity), np.float32) for _ in range(layers)]
        self.values = [np.zeros((slots, kv_heads, capacity, head_dim), np.float32) for _ in range(layers)]

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.keys + self.values)

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
        index = np.nonzero(active[:rows])[0]
        pos = positions[index]
        for layer, (k, v) in enumerate(zip(self.keys, self.values)):
            # Fancy indexing on (row, position) pairs writes every sequence's entry in one call.
            k[index, :, :, pos] = new[2 * layer][index, :, :, 0]
            v[index, :, pos] = new[2 * layer + 1][index, :, 0]

    def move(self, source: int, target: int, length: int) -> None:
        """Copy the first `length` positions of row `source` into row `target` (compaction)."""
        for k, v in zip(self.keys, self.values):
            k[target, :, :, :length] = k[source, :, :, :length]
            v[target, :, :length] = v[source, :, :length]
