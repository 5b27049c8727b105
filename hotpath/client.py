"""gRPC client for hotpath endpoints (tritonclient.grpc underneath).

One client keeps one gRPC channel open; `embed` sends many texts per request (up to the endpoint's
max_batch_size) rather than one request per text.
"""

from __future__ import annotations

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


class EmbeddingClient:
    """Text -> normalized embedding over gRPC: `EmbeddingClient(url).embed(["a", "b"])`."""

    def __init__(self, url: str = "localhost:8001", model: str = "text_embedding",
                 input_name: str = "TEXT", output_name: str = "EMBEDDING", timeout_s: float | None = 30.0):
        self.url, self.model = url, model
        self.input_name, self.output_name = input_name, output_name
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
                                      outputs=[grpcclient.InferRequestedOutput(self.output_name)],
                                      client_timeout=self.timeout_s)
        except InferenceServerException as exc:
            raise ClientError(f"{self.model} at {self.url}: {exc.message()}") from None

    def embed(self, texts: Sequence[str | bytes]) -> np.ndarray:
        """Embeddings [len(texts), dim], float32, in input order."""
        if not texts:
            raise ValueError("embed() needs at least one text")
        size = self.max_batch_size
        chunks = [self.infer_raw([text_input(self.input_name, texts[i:i + size])]).as_numpy(self.output_name)
                  for i in range(0, len(texts), size)]
        return np.concatenate(chunks)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> "EmbeddingClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
