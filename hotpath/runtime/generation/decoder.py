"""The exported decoder step (ONNX) run against rows of a KVPool, with no copy of the cache."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotpath.runtime.generation.kv_pool import KVPool
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
    """`run(ids, lengths, pool, start)`: logits [B, V] and new KV entries for pool rows start..start+B."""

    def __init__(self, model_path: Path | str, info: ModelInfo, intra_op_threads: int = 0):
        self.info = info
        self.session = make_session(model_path, intra_op_threads=intra_op_threads, inter_op_threads=1)
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]
        expected = 2 + 2 * info.layers
        if len(self.input_names) != expected:
            raise ValueError(f"{model_path}: graph has {len(self.input_names)} inputs, generation.json implies {expected}")

    def new_pool(self, slots: int, capacity: int) -> KVPool:
        return KVPool(self.info.layers, self.info.kv_heads, self.info.head_dim, slots, capacity)

    def run(self, input_ids: np.ndarray, lengths: np.ndarray, pool: KVPool, start: int
            ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step for pool rows [start, start + len(input_ids)); the pool itself is not written."""
        # A leading-rows slice of a C-contiguous pool array is contiguous: bound by pointer, no copy.
        return self.run_cache(input_ids, lengths, pool.rows(start, start + len(input_ids)))

    def run_cache(self, input_ids: np.ndarray, lengths: np.ndarray, cache: list[np.ndarray]
                  ) -> tuple[np.ndarray, list[np.ndarray]]:
        """One step against contiguous cache arrays (key_0, value_0, ...): logits [B, V], new entries."""
        binding = self.session.io_binding()
        feeds = [np.ascontiguousarray(input_ids, np.int64), np.ascontiguousarray(lengths, np.int64), *cache]
        for name, array in zip(self.input_names, feeds):
            if not array.flags.c_contiguous:
                raise ValueError(f"decoder input {name} must be C-contiguous")
            binding.bind_input(name, "cpu", 0, array.dtype, list(array.shape), array.ctypes.data)
        for name in self.output_names:
            binding.bind_output(name, "cpu")
        self.session.run_with_iobinding(binding)
        outputs = binding.copy_outputs_to_cpu()
        return outputs[0], outputs[1:]
