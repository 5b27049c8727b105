"""The API's calls to the repository's endpoints over async gRPC: embeddings on a bare grpc.aio channel; readiness,
metadata and generation streams on tritonclient.grpc.aio's. One of each per process.

Embeddings go out in chunks of the endpoint's max_batch_size, all chunks at once, as bare
GRPCInferenceService calls on grpc.aio: Triton's own protobuf messages and tritonclient's byte-tensor
encoding, without tritonclient's InferInput/InferResult wrappers or a gRPC deadline (the event loop bounds
the time). That took the API's CPU per /v1/embeddings request at c=1 from 1.36 to 1.24 ms
(perf/reports/openai_api.md, "Where the door's time goes"). Generation opens one
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
from typing import AsyncIterator, Awaitable

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
from tritonclient.grpc import MAX_GRPC_MESSAGE_SIZE, service_pb2, service_pb2_grpc
from tritonclient.grpc._utils import get_error_grpc
from tritonclient.utils import InferenceServerException, serialize_byte_tensor, triton_to_np_dtype

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
CHANNEL_OPTIONS = [("grpc.max_send_message_length", MAX_GRPC_MESSAGE_SIZE),
                   ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE_SIZE)]


def embedding_request(endpoint: str, texts: list[str]) -> service_pb2.ModelInferRequest:
    """text_embedding's request: TEXT, BYTES [len(texts), 1]; EMBEDDING asked for."""
    request = service_pb2.ModelInferRequest(model_name=endpoint)
    request.inputs.add(name="TEXT", datatype="BYTES", shape=[len(texts), 1])
    request.outputs.add(name="EMBEDDING")
    encoded = np.array([t.encode("utf-8") for t in texts], dtype=np.object_)
    request.raw_input_contents.append(serialize_byte_tensor(encoded).item())
    return request


def output_array(response: service_pb2.ModelInferResponse, name: str) -> np.ndarray | None:
    """A fixed-size output of a response (None: the response does not carry it)."""
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        if tensor.name == name:
            return np.frombuffer(raw, dtype=triton_to_np_dtype(tensor.datatype)).reshape(tuple(tensor.shape))
    return None


GENERATION_OUTPUTS = [grpcclient.InferRequestedOutput(n) for n in OUTPUTS]


class Triton:
    def __init__(self, url: str, timeout_s: float = 60.0):
        self.url, self.timeout_s = url, timeout_s
        self.client = grpcaio.InferenceServerClient(url)   # readiness, metadata and generation streams
        self.channel = grpc.aio.insecure_channel(url, options=CHANNEL_OPTIONS)
        self.stub = service_pb2_grpc.GRPCInferenceServiceStub(self.channel)

    async def close(self) -> None:
        await self.client.close()
        await self.channel.close()

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

    def embed(self, model: ServedModel, texts: list[str], headers: dict | None = None) -> Awaitable[np.ndarray]:
        """Embeddings [len(texts), dim] float32, in input order; `headers`: the caller's tenancy_headers().

        The calls are made here, before anything is awaited: they go out on the event loop's next turn, so a
        caller that yields once (`await asyncio.sleep(0)`) can work while Triton computes."""
        size = model.max_batch_size
        metadata = tuple(headers.items()) if headers else None
        chunks = [texts[i:i + size] for i in range(0, len(texts), size)]
        calls = [self.stub.ModelInfer(embedding_request(model.endpoint, chunk), metadata=metadata)
                 for chunk in chunks]
        return self._vectors(model, chunks, calls)

    async def _vectors(self, model: ServedModel, chunks: list[list[str]], calls: list) -> np.ndarray:
        try:
            async with asyncio.timeout(self.timeout_s):
                responses = [await call for call in calls]
        except BaseException as exc:
            for call in calls:
                call.cancel()   # the other chunks' calls, after a failure or a cancellation
            if isinstance(exc, grpc.RpcError):
                raise from_triton(model.endpoint, get_error_grpc(exc), "input") from None
            if isinstance(exc, TimeoutError):
                raise from_triton(model.endpoint, InferenceServerException(
                    f"no answer in {self.timeout_s:g} s", status="StatusCode.DEADLINE_EXCEEDED")) from None
            raise
        parts = [output_array(response, "EMBEDDING") for response in responses]
        if any(v is None or len(v) != len(chunk) for v, chunk in zip(parts, chunks)):
            # a cached error replayed as an empty success (2.51)
            raise APIError(500, f"{model.endpoint}: an answer without embeddings", "server_error")
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

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
