"""gRPC client for hotpath endpoints (tritonclient.grpc underneath).

One client keeps one gRPC channel open and sends many items per request (up to the endpoint's
max_batch_size) rather than one request per item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath.errors import HotpathError


class ClientError(HotpathError):
    """The server rejected a request or could not be reached."""


def text_input(name: str, texts: Sequence[str | bytes]) -> grpcclient.InferInput:
    """A BYTES input of shape [len(texts), 1]."""
    data = np.array([t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in texts],
                    dtype=np.object_).reshape(-1, 1)
    tensor = grpcclient.InferInput(name, list(data.shape), "BYTES")
    tensor.set_data_from_numpy(data)
    return tensor


class EndpointClient:
    """One gRPC channel to one endpoint; subclasses know its tensors."""

    model = ""
    input_name = ""
    output_names: tuple[str, ...] = ()

    def __init__(self, url: str = "localhost:8001", model: str | None = None, timeout_s: float | None = 30.0):
        self.url = url
        self.model = model or self.model
        self.timeout_s = timeout_s
        self._client = grpcclient.InferenceServerClient(url)
        self._max_batch: int | None = None

    @property
    def max_batch_size(self) -> int:
        if self._max_batch is None:
            try:
                config = self._client.get_model_config(self.model, as_json=True)["config"]
            except InferenceServerException as exc:
                raise ClientError(f"{self.model} at {self.url}: {exc.message()}") from None
            self._max_batch = int(config.get("max_batch_size", 0)) or 1
        return self._max_batch

    def infer_raw(self, inputs: list[grpcclient.InferInput]) -> grpcclient.InferResult:
        """One request with prepared inputs; raises ClientError carrying the server's message."""
        try:
            return self._client.infer(self.model, inputs,
                                      outputs=[grpcclient.InferRequestedOutput(n) for n in self.output_names],
                                      client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise ClientError(f"{self.model} at {self.url}: {exc.message()}") from None

    def _infer_bytes(self, items: Sequence[str | bytes]) -> list[dict[str, np.ndarray]]:
        """Send `items` in chunks of max_batch_size; one dict of outputs per chunk."""
        if not items:
            raise ValueError(f"{self.model}: needs at least one input")
        size = self.max_batch_size
        results = []
        for i in range(0, len(items), size):
            result = self.infer_raw([text_input(self.input_name, items[i:i + size])])
            results.append({n: result.as_numpy(n) for n in self.output_names})
        return results

    def close(self) -> None:
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EmbeddingClient(EndpointClient):
    """Text -> normalized embedding: `EmbeddingClient(url).embed(["a", "b"])`."""

    model = "text_embedding"
    input_name = "TEXT"
    output_names = ("EMBEDDING",)

    def embed(self, texts: Sequence[str | bytes]) -> np.ndarray:
        """Embeddings [len(texts), dim], float32, in input order."""
        return np.concatenate([r["EMBEDDING"] for r in self._infer_bytes(texts)])


@dataclass
class Classification:
    """Top-k result for one image, best first."""

    labels: list[str]
    scores: list[float]
    class_ids: list[int]


class ClassificationClient(EndpointClient):
    """Encoded image bytes -> top-5 ImageNet labels: `ClassificationClient(url).classify([jpeg_bytes])`."""

    model = "image_classification"
    input_name = "IMAGE"
    output_names = ("LABELS", "SCORES", "CLASS_IDS")

    def classify(self, images: Sequence[bytes]) -> list[Classification]:
        """One Classification per image, in input order."""
        out = []
        for r in self._infer_bytes(images):
            for labels, scores, ids in zip(r["LABELS"], r["SCORES"], r["CLASS_IDS"]):
                out.append(Classification([b.decode("utf-8") if isinstance(b, bytes) else str(b) for b in labels],
                                          [float(x) for x in scores], [int(x) for x in ids]))
        return out
