"""Each endpoint's whole pipeline in one process, with the repository's own ONNX files.

The floor, the FastAPI apps and the PyTriton apps all run these, so every alternative computes
exactly what the endpoint computes: the same graph file the endpoint serves, so whatever precision a
spec chose (FP32 by default, INT8 opt-in) every alternative runs it too, and a precision win is never
counted as server speed. A pipeline maps a list of inputs to the endpoint's output tensors (by the
endpoint's output names), one row per input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hotpath import paths
from hotpath.runtime.ort_session import make_session
from hotpath.specs.fingerprint import read_stamp

# The graph each pipeline loads, relative to the model repository: the file the endpoint's step serves.
SENTENCE_EMBEDDER_GRAPH = "sentence_embedder/1/export/model.onnx"   # text_embedding
TEXT_ENCODER_GRAPH = "text_encoder/1/model.onnx"                    # text_embedding_exact
IMAGE_CLASSIFIER_GRAPH = "image_classifier/1/model.onnx"            # image_classification
RETRIEVAL_GRAPH = "retrieval/1/export/model.onnx"                    # retrieval (its corpus and index beside it)


def graph_precision(graph: str) -> str:
    """The precision `make engines` recorded for a served graph ("fp32", "int8"; "unknown" unbuilt)."""
    stamp = read_stamp((paths.model_repository() / graph).parent) or {}
    return str(stamp.get("metrics", {}).get("precision", "unknown"))


def _session(graph: str, threads: int, spinning: bool):
    return make_session(paths.model_repository() / graph, threads, 1, spinning)


class TextPipeline:
    """texts -> normalized embeddings: the endpoint's tokenizer.json + its pooled encoder graph."""

    def __init__(self, threads: int = 2, allow_spinning: bool = False, graph: str = SENTENCE_EMBEDDER_GRAPH):
        from hotpath.exporters.sentence_encoder import minilm_tokenizer

        self.graph = graph
        self.session = _session(graph, threads, allow_spinning)
        self.tokenizer = minilm_tokenizer()

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

    def __init__(self, threads: int = 2, allow_spinning: bool = False, graph: str = IMAGE_CLASSIFIER_GRAPH):
        self.graph = graph
        self.session = _session(graph, threads, allow_spinning)
        self.outputs = [o.name for o in self.session.get_outputs()]

    @staticmethod
    def decode(values: np.ndarray) -> list[bytes]:
        return [bytes(v) for v in values.reshape(-1)]

    def __call__(self, images: list[bytes]) -> dict[str, np.ndarray]:
        from hotpath.runtime.images import preprocess  # the endpoint's image_preprocess step runs this too

        pixels = np.stack([preprocess(data) for data in images])
        return dict(zip(self.outputs, self.session.run(None, {"PIXELS": pixels})))



class RetrievalPipeline:
    """Query texts -> top-k ids, scores and documents: the retrieval model's own encoder graph, then the
    index built beside it (faiss HNSW) searched in this process, with no write history (an empty data dir)."""

    def __init__(self, threads: int = 2, allow_spinning: bool = False, graph: str = RETRIEVAL_GRAPH):
        import tempfile

        from hotpath.runtime.retrieval.hnsw_store import HnswStore
        from hotpath.specs.repository import read_config

        self.graph = graph
        base = (paths.model_repository() / graph).parent
        self.encoder = TextPipeline(threads, allow_spinning, graph=graph)
        params = {k: v.string_value for k, v in read_config(base.parent.parent).parameters.items()}
        self.k = int(params.get("default_k", 10))
        self._data = tempfile.TemporaryDirectory(prefix="hotpath-retrieval-alt-")
        self.store = HnswStore(base, Path(self._data.name), ef_search=int(params.get("ef_search", 64)))

    decode = staticmethod(TextPipeline.decode)

    def __call__(self, texts: list[str]) -> dict[str, np.ndarray]:
        hits = self.store.search(self.encoder(texts)["EMBEDDING"], self.k)
        return {"IDS": np.array(hits.ids, dtype=np.object_), "SCORES": hits.scores,
                "DOCUMENTS": np.array(hits.documents, dtype=np.object_)}
