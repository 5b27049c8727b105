"""The exported decoder step (ONNX) run against rows of a KVPool, with no copy of the cache."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotpath.runtime.generation.kv_pool import KVPool
from hotpath.runtime.generation.prefix_cache import PrefixCache
from hotpath.runtime.ort_session import make_session


@dataclass(frozen=True)
class ModelInfo:
    """What generation.json (written by the exporter) says about the model."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    eos_token_ids: tuple[int, ...]
    chat_template: str
    bos_token: str = ""
    eos_token: str = ""

    @classmethod
    def load(cls, path: Path | str) -> "ModelInfo":
        data = json.loads(Path(path).read_text())
        data["eos_token_ids"] = tuple(data["eos_token_ids"])
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data})


class Decoder:
    """`run(ids, lengths, pool, start)`: logits [B, V] and new KV entries for pool rows start..start+B.

    A decode step allocates nothing and copies nothing but its token ids and lengths: outputs are
    written by ONNX Runtime straight into buffers the decoder owns (returned as views, valid until
    the next call), and a step against the pool reuses the IOBinding of the last step with the same
    shape (the cache is bound by pointer once per pool layout, ids and lengths are copied into bound
    buffers). Prefill calls on gathered rows (`run_cache`) bind afresh. Threads: `intra_op_threads`; `allow_spinning` keeps ORT's workers busy-waiting
    between ops (hotpath.runtime.ort_session: off by default on shared hosts).
    """

    MAX_BINDINGS = 64

    def __init__(self, model_path: Path | str, info: ModelInfo, intra_op_threads: int = 0,
                 allow_spinning: bool = False):
        self.info = info
        self.session = make_session(model_path, intra_op_threads=intra_op_threads, inter_op_threads=1,
                                    allow_spinning=allow_spinning)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        expected = 2 + 2 * info.layers
        if len(self.input_names) != expected:
            raise ValueError(f"{model_path}: graph has {len(self.input_names)} inputs, generation.json implies {expected}")
        self._buffers: dict[str, np.ndarray] = {}
        self._bindings: dict[tuple, tuple] = {}
        self.rebinds = 0

    def new_pool(self, slots: int, capacity: int, budget: int | None = None) -> KVPool:
        return KVPool(self.info.layers, self.info.kv_heads, self.info.head_dim, slots, capacity, budget=budget)

    def new_prefix_cache(self, block: int, tokens: int) -> PrefixCache:
        return PrefixCache(self.info.layers, self.info.kv_heads, self.info.head_dim, block, tokens // block)

    def run(self, input_ids: np.ndarray, lengths: np.ndarray, pool: KVPool, start: int
            ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step for pool rows [start, start + len(input_ids)); the pool itself is not written."""
        batch, steps = input_ids.shape
        key = (id(pool), pool.layout, start, batch, steps)
        entry = self._bindings.get(key)
        if entry is None:
            # A leading-rows slice of a C-contiguous pool view is contiguous: bound by pointer, no copy.
            entry = self._bind(batch, steps, pool.rows(start, start + batch))
            self._remember(key, entry, pool)
        binding, ids, lens, logits, new = entry
        ids[...] = input_ids
        lens[...] = lengths
        self.session.run_with_iobinding(binding)
        return logits, new

    def run_cache(self, input_ids: np.ndarray, lengths: np.ndarray, cache: list[np.ndarray]
                  ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step against contiguous cache arrays (key_0, value_0, ...): logits [B, V], new entries."""
        batch, steps = input_ids.shape
        binding, ids, lens, logits, new = self._bind(batch, steps, cache)
        ids[...] = input_ids
        lens[...] = lengths
        self.session.run_with_iobinding(binding)
        return logits, new

    def _remember(self, key: tuple, entry: tuple, pool: KVPool) -> None:
        # Only the current pool layout's bindings are kept: older layouts (and other pools) point at
        # views that may no longer exist. Layout ids never repeat (kv_pool._LAYOUTS).
        stale = [k for k in self._bindings if k[1] != key[1]]
        for k in stale:
            del self._bindings[k]
        if len(self._bindings) >= self.MAX_BINDINGS:
            self._bindings.clear()
        self._bindings[key] = entry

    def _buffer(self, name: str, shape: tuple[int, ...], dtype=np.float32) -> np.ndarray:
        """A C-contiguous view of `shape` at the start of the decoder's own buffer for `name`."""
        size = int(np.prod(shape))
        buf = self._buffers.get(name)
        if buf is None or buf.size < size or buf.dtype != dtype:
            buf = self._buffers[name] = np.empty(max(size, 1), dtype)
            self._bindings.clear()  # they point at the old buffer
        return buf[:size].reshape(shape)

    def _bind(self, batch: int, steps: int, cache: list[np.ndarray]) -> tuple:
        self.rebinds += 1
        binding = self.session.io_binding()
        ids = np.empty((batch, steps), np.int64)   # owned by the binding's entry: stable pointers
        lens = np.empty(batch, np.int64)
        for name, array in zip(self.input_names, [ids, lens, *cache]):
            if array.dtype != np.int64 and array.dtype != np.float32:
                raise ValueError(f"decoder input {name} has dtype {array.dtype}")
            if not array.flags.c_contiguous:
                raise ValueError(f"decoder input {name} must be C-contiguous")
            binding.bind_input(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
        kv, d = self.info.kv_heads, self.info.head_dim
        outputs = []
        for name in self.output_names:
            if name == "logits":
                shape = (batch, self.info.vocab_size)
            elif "key" in name:
                shape = (batch, kv, d, steps)
            else:
                shape = (batch, kv, steps, d)
            # Outputs are shared by every binding (views of one buffer per name): a result is only
            # read before the next call, so they never need to coexist.
            out = self._buffer(name, shape)
            binding.bind_output(name, "cpu", 0, out.dtype, list(out.shape), out.ctypes.data)
            outputs.append(out)
        return binding, ids, lens, outputs[0], outputs[1:]
