"""text_embedding's embedding, built once from a model's config: the model's tokenizer.json + the
pooled encoder graph on a SplitRunner. Every Python model that must return text_embedding's vectors
(sentence_embedder, retrieval) builds it here, from the same parameters, so they cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from hotpath.runtime.ort_session import spin_settings
from hotpath.runtime.split_run import SplitRunner
from hotpath.runtime.text import encode, load_tokenizer

EXPORT_DIR = "export"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Embedder:
    """texts -> normalized embeddings [n, dim]: one tokenizer call, one encoder call (split by length
    across single-thread sessions for a batch, every thread on one text: hotpath.runtime.split_run)."""

    def __init__(self, folder: Path, params: dict[str, str]):
        self.tokenizer = load_tokenizer(folder / params.get("tokenizer_file", "tokenizer.json"),
                                        max_length=int(params["max_length"]),
                                        pad_to_multiple_of=int(params.get("pad_to_multiple_of", 0)) or None)
        self.runner = SplitRunner(
            folder / EXPORT_DIR / "model.onnx", threads=int(params.get("intra_op_thread_count", 1)),
            split_from=int(params.get("split_from", 2)),
            wide_threads=int(params.get("one_text_thread_count", 0)) or None, **spin_settings(params))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        feeds = encode(self.tokenizer, texts)
        return self.runner.run({n: feeds[n] for n in INPUTS})
