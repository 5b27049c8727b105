"""The API's calls to the repository's endpoints: async gRPC (tritonclient.grpc.aio), one channel per process.

Embeddings go out in chunks of the endpoint's max_batch_size, all chunks at once; generation opens one
gRPC stream per request (decoupled model; Triton 2.51 pins a stream's model version until the stream
ends, hotpath.client.GenerationClient) and asks for the empty final response, so the end of a request is
its final flag, not a guess.

Every call carries the caller's tenant and collection as the tenant gateway named them (`headers`:
hotpath.runtime.tenancy's x-hotpath-tenant and x-hotpath-collection, which tritonserver forwards to the
models as request parameters), so the models count usage for the tenant that asked (hotpath.runtime.usage).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import AsyncIterator

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import InferenceServerException

from hotpath.client import text_input
from hotpath.openai_api.catalog import ServedModel
from hotpath.openai_api.errors import APIError, from_triton
from hotpath.openai_api.generation import OUTPUTS, Step, parse_step
from hotpath.runtime.tenancy import COLLECTION_HEADER, TENANT_HEADER

TENANCY_HEADERS = (TENANT_HEADER, COLLECTION_HEADER)


def tenancy_headers(incoming) -> dict[str, str]:
    """The gateway's tenancy headers of an incoming request (a case-insensitive mapping), to pass on to Triton:
    only those two, each when set."""
    return {name: incoming[name] for name in TENANCY_HEADERS if incoming.get(name)}

EMBEDDING_OUTPUT = [grpcclient.InferRequestedOutput("EMBEDDING")]
GENERATION_OUTPUTS = [grpcclient.InferRequestedOutput(n) for n in OUTPUTS]


class Triton:
    def __init__(self, url: str, timeout_s: float = 60.0):
        self.url, self.timeout_s = url, timeout_s
        self.client = grpcaio.InferenceServerClient(url)

    async def close(self) -> None:
        await self.client.close()

    async def not_ready(self, models: list[str]) -> list[str]:
        """What keeps the API from serving now: [] when tritonserver and every one of `models` it serves are
        ready. A model the server does not have at all (a server started on part of the repository) is not
        waited for: requests for it are answered 404."""
        try:
            if not await self.client.is_server_ready(client_timeout=5.0):
                return ["tritonserver"]
            ready = await asyncio.gather(*(self.client.is_model_ready(m, client_timeout=5.0) for m in models))
            waiting = [m for m, ok in zip(models, ready) if not ok]
            return [m for m in waiting if await self._known(m)]
        except InferenceServerException as exc:
            return [f"tritonserver at {self.url} ({exc.status() or exc.message()})"]

    async def _known(self, model: str) -> bool:
        try:
            await self.client.get_model_metadata(model, client_timeout=5.0)
        except InferenceServerException as exc:
            return "StatusCode.NOT_FOUND" not in str(exc.status()) or "no available versions" in (exc.message() or "")
        return True

    async def _embed_chunk(self, model: ServedModel, texts: list[str], headers: dict | None = None) -> np.ndarray:
        try:
            result = await self.client.infer(model.endpoint, [text_input("TEXT", texts)], outputs=EMBEDDING_OUTPUT,
                                             client_timeout=self.timeout_s, headers=headers or None)
        except InferenceServerException as exc:
            raise from_triton(model.endpoint, exc, "input") from None
        vectors = result.as_numpy("EMBEDDING")
        if vectors is None or len(vectors) != len(texts):   # a cached error replayed as an empty success (2.51)
            raise APIError(500, f"{model.endpoint}: an answer without embeddings", "server_error")
        return vectors

    async def embed(self, model: ServedModel, texts: list[str], headers: dict | None = None) -> np.ndarray:
        """Embeddings [len(texts), dim] float32, in input order; `headers`: the caller's tenancy_headers()."""
        size = model.max_batch_size
        if len(texts) <= size:
            return await self._embed_chunk(model, texts, headers)
        parts = await asyncio.gather(*(self._embed_chunk(model, texts[i:i + size], headers)
                                       for i in range(0, len(texts), size)))
        return np.concatenate(parts)

    async def generate(self, model: ServedModel, inputs: list[grpcclient.InferInput],
                       param: str, headers: dict | None = None, outputs: tuple[str, ...] | None = None
                       ) -> AsyncIterator[Step]:
        """The model's responses as Steps until its final one; an error response raises APIError (a 400
        names `param`). Leaving early cancels the request on the server. `headers`: the caller's
        tenancy_headers(); `outputs`: the outputs to ask for (default: OUTPUTS)."""
        requested = GENERATION_OUTPUTS if outputs is None else [grpcclient.InferRequestedOutput(n) for n in outputs]
        request = {"model_name": model.endpoint, "inputs": inputs, "outputs": requested,
                   "request_id": uuid.uuid4().hex, "parameters": {"triton_enable_empty_final_response": True}}

        async def one():
            yield request

        stream = self.client.stream_infer(one(), stream_timeout=self.timeout_s, headers=headers or None)
        finished = False
        try:
            async for result, error in stream:
                if error is not None:
                    finished = True
                    raise from_triton(model.endpoint, error, param)
                step = parse_step(result)
                yield step
                if step.final:
                    finished = True
                    return
            finished = True
            raise APIError(503, f"{model.endpoint}: the stream ended without a final response", "server_error",
                           retry_after_s=1)
        except grpc.RpcError as exc:   # the stream itself broke (server gone, timeout)
            finished = True
            raise from_triton(model.endpoint, get_error_grpc(exc), param) from None
        finally:
            if not finished:
                stream.cancel()
