"""Each endpoint's whole pipeline in one process, with the repository's own ONNX files.

The floor, the FastAPI apps and the PyTriton apps all run these, so every alternative computes
exactly what the endpoint computes. A pipeline maps a list of inputs to the endpoint's output
tensors (by the endpoint's output names), one row per input.
"""

from __future__ import annotations

import numpy as np

from hotpath import paths
from hotpath.runtime.ort_session import make_session


def _session(model: str, threads: int, spinning: bool):
    return make_session(paths.model_repository() / model / "1" / "model.onnx", threads, 1, spinning)


class TextPipeline:
    """texts -> normalized embeddings: fast tokenizer + the text_encoder ONNX file."""

    def __init__(self, threads: int = 2, allow_spinning: bool = False):
        from hotpath.exporters.sentence_encoder import minilm_dir
        from hotpath.runtime.text import load_tokenizer

        self.session = _session("text_encoder", threads, allow_spinning)
        self.tokenizer = load_tokenizer(minilm_dir() / "tokenizer.json", 256)

    @staticmethod
    def decode(values: np.ndarray) -> list[str]:
        """A BYTES tensor as it arrives over the wire -> the pipeline's inputs."""
        from hotpath.runtime.text import decode_utf8

        return decode_utf8(values)

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        from hotpath.runtime.text import encode

        return {"EMBEDDING": self.session.run(["embedding"], encode(self.tokenizer, texts))[0]}


class ImagePipeline:
    """Encoded images -> top-5 labels, scores, class ids: hotpath's own preprocess + the classifier ONNX file."""

    def __init__(self, threads: int = 2, allow_spinning: bool = False):
        self.session = _session("image_classifier", threads, allow_spinning)
        self.outputs = [o.name for o in self.session.get_outputs()]

    @staticmethod
    def decode(values: np.ndarray) -> list[bytes]:
        return [bytes(v) for v in values.reshape(-1)]

    def __call__(self, images: list[bytes]) -> dict[str, np.ndarray]:
        from hotpath.runtime.images import preprocess  # the endpoint's image_preprocess step runs this too

        pixels = np.stack([preprocess(data) for data in images])
        return dict(zip(self.outputs, self.session.run(None, {"PIXELS": pixels})))
