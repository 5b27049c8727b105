"""The text-embedding pipeline in one process (tokenizer + ORT), shared by the alternatives."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from hotpath import paths
from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.runtime.ort_session import make_session
from hotpath.runtime.text import encode, load_tokenizer


class TextPipeline:
    """texts -> normalized embeddings with the repository's own ONNX model."""

    def __init__(self, threads: int | None = None, allow_spinning: bool = False):
        threads = threads or int(os.environ.get("HOTPATH_ORT_THREADS", 2))
        model = paths.model_repository() / "text_encoder" / "1" / "model.onnx"
        self.session = make_session(Path(model), threads, 1, allow_spinning)
        self.tokenizer = load_tokenizer(minilm_dir() / "tokenizer.json", 256)

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self.session.run(["embedding"], encode(self.tokenizer, texts))[0]
