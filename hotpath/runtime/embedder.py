"""text_embedding's embedding, built once from a model's parameters: the model's tokenizer.json + the
pooled encoder graph on a SplitRunner. Every Python model that must return text_embedding's vectors
(sentence_embedder, retrieval) builds it here, from the same typed parameters
(hotpath.runtime.parameters.EmbedderParameters), so they cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from hotpath.runtime.core_gate import CoreGate
from hotpath.runtime.parameters import EmbedderParameters
from hotpath.runtime.split_run import SplitRunner
from hotpath.runtime.text import encode

EXPORT_DIR = "export"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Embedder:
    """texts -> normalized embeddings [n, dim]: one tokenizer call, one encoder call (split by length
    across single-thread sessions for a batch, every thread on one text: hotpath.runtime.split_run).

    `folder`: the model's version directory (its tokenizer file; the graph in export/model.onnx unless `graph`
    names another). `params`: the model's EmbedderParameters (or a subclass), or its config parameters as
    strings (the embedder's keys are read, others left alone). `gate`: the served instance's CoreGate."""

    def __init__(self, folder: Path, params: EmbedderParameters | Mapping[str, str], graph: Path | None = None,
                 gate: CoreGate | None = None):
        if not isinstance(params, EmbedderParameters):
            params = EmbedderParameters.parse(params, strict=False)
        self.params = params
        self.tokenizer = params.load_tokenizer(folder)
        self.runner = SplitRunner(
            graph or Path(folder) / EXPORT_DIR / "model.onnx", threads=params.intra_op_thread_count,
            split_from=params.split_from, wide_threads=params.one_text_thread_count or None, gate=gate,
            **params.spin_settings())

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        feeds = encode(self.tokenizer, texts)
        return self.runner.run({n: feeds[n] for n in INPUTS})
