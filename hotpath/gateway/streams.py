"""The stream admission: every message of a gRPC stream (ModelStreamInfer) counts against its tenant.

NGINX cannot read the messages of a bidirectional stream, so the gateway passes each stream here, with
the caller's tenant in STREAM_TENANT_HEADER. Each message is read as a ModelInferRequest (its model and,
for generation, the tokens it may produce); front_door.lua's `/charge`, asked over the unix socket beside
nginx.conf, applies the same checks and the same per-tenant budget as the unary calls (public endpoint,
request rate, tokens per minute). An admitted message goes on to the replica the stream was opened to,
unchanged; a refused one is answered on the stream as Triton answers a failed request there: an error
response whose message starts with "gateway: [STATUS] " (hotpath.client reads the class from that tag).
Triton's `triton_grpc_error` header never reaches a replica: NGINX drops header names with '_', and
tritonserver 2.51 crashed (SIGSEGV) on a stream of invalid requests opened with it.

Tenancy: the upstream call carries x-hotpath-tenant (the stream's tenant) and x-hotpath-collection (the
tenant's own), which tritonserver forwards to the models as request parameters (hotpath.runtime.tenancy);
any x-hotpath-* metadata the client sent is dropped.

Usage: a generation message is charged its max_tokens by /charge; when its answer ends, the tokens it did not
generate are given back (/charge?returned=N, hotpath/gateway/usage.lua). The count is the model's own
`num_output_tokens`: a message that does not ask for it (return_num_output_tokens) is sent on asking for it,
and the output is removed from the answers before they reach the client. Other responses go back unchanged.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import threading
import urllib.parse
from pathlib import Path

import grpc
from google.protobuf.message import DecodeError
from tritonclient.grpc import service_pb2

from hotpath.gateway.front_door import MAX_TOKENS_INPUT, REFUSED_PARAMETERS, STREAM_TENANT_HEADER
from hotpath.runtime.tenancy import COLLECTION_HEADER, TENANT_HEADER

log = logging.getLogger(__name__)

METHOD = "/inference.GRPCInferenceService/ModelStreamInfer"
GRPC_ERROR_HEADER = "triton_grpc_error"   # crashed tritonserver 2.51 (SIGSEGV): never passed on
_HOP_HEADERS = {STREAM_TENANT_HEADER, GRPC_ERROR_HEADER, "authorization", "content-type", "te", "user-agent", "grpc-accept-encoding",
                "grpc-encoding", "grpc-timeout"}
MAX_DIM = 2**31 - 1
# /charge is asked with a GET whose line NGINX bounds (8 KiB header buffers): a longer name, percent-encoded,
# would be refused there as a header fault, so it is refused here first. No model has such a name.
MAX_MODEL_NAME = 1024
CHARGE_TIMEOUT_S = 5.0
GATEWAY_PREFIX = "x-hotpath-"            # the gateway's own metadata: never taken from a client
COUNT_INPUT = "return_num_output_tokens"  # text_generation's flag (hotpath.runtime.llm.request)
COUNT_OUTPUT = "num_output_tokens"        # UINT32 [1]: the tokens the engine generated, on the last answer
OUT_QUEUE = 64   # responses buffered per stream before the relay stops reading from the replica


def requested_tokens(request: service_pb2.ModelInferRequest) -> tuple[int, int]:
    """(max_tokens, n) of a generation request's sampling_parameters (a JSON text): max_tokens 0 when absent
    or unreadable (front_door.lua then charges the model's default), n its choices (1..8; each generates up
    to max_tokens: the charge is max_tokens, or the default, times n); a malformed value is the model's to
    refuse."""
    for index, tensor in enumerate(request.inputs):
        if tensor.name != MAX_TOKENS_INPUT:
            continue
        if tensor.contents.bytes_contents:
            text = tensor.contents.bytes_contents[0]
        elif index < len(request.raw_input_contents) and len(request.raw_input_contents[index]) >= 4:
            raw = request.raw_input_contents[index]   # a serialized BYTES tensor: 4-byte length, then the bytes
            text = raw[4:4 + int.from_bytes(raw[:4], "little")]
        else:
            return 0, 1
        try:
            params = json.loads(text)
            value, n = params.get("max_tokens"), params.get("n", 1)
        except (ValueError, AttributeError):
            return 0, 1
        n = min(n, 8) if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1
        return (value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0), n
    return 0, 1


def malformed(request: service_pb2.ModelInferRequest) -> tuple[str, str] | None:
    """What front_door.lua refuses in a unary call's message: a dimension past 2^31-1 (Triton 2.51 keeps a
    batch size in 32 bits: 2^32 + 1 is served as 1; 0 with data was served too), a parameter of
    REFUSED_PARAMETERS; and a model name too long to ask /charge about."""
    if len(request.model_name.encode()) > MAX_MODEL_NAME:
        return "INVALID_ARGUMENT", f"gateway: a model name is at most {MAX_MODEL_NAME} bytes"
    if any(not 1 <= d <= MAX_DIM for tensor in request.inputs for d in tensor.shape):
        return "INVALID_ARGUMENT", "gateway: an input's shape holds a dimension that is not 1..2^31-1"
    maps = [request.parameters, *(t.parameters for t in request.inputs), *(t.parameters for t in request.outputs)]
    refused = sorted({key for m in maps for key in m if key in REFUSED_PARAMETERS})
    if refused:
        return "INVALID_ARGUMENT", f"gateway: parameter '{refused[0]}' is not accepted"
    return None


def upstream_metadata(metadata: dict[str, str], tenant: str) -> tuple[tuple[str, str], ...]:
    """The metadata the replica gets: the client's, less hop-by-hop headers and any x-hotpath-* (any case),
    plus the gateway's tenant and collection (the tenant's own)."""
    kept = [(k, v) for k, v in metadata.items()
            if k.lower() not in _HOP_HEADERS and not k.lower().startswith(GATEWAY_PREFIX)]
    return (*kept, (TENANT_HEADER, tenant), (COLLECTION_HEADER, tenant))


def _bool_true(request: service_pb2.ModelInferRequest, index: int) -> bool:
    tensor = request.inputs[index]
    if tensor.contents.bool_contents:
        return bool(tensor.contents.bool_contents[0])
    if index < len(request.raw_input_contents):
        return request.raw_input_contents[index][:1] not in (b"", b"\x00")
    return False


def ask_for_count(request: service_pb2.ModelInferRequest) -> bool:
    """Makes `request` ask for COUNT_OUTPUT; True when the client had not asked (its answers must then lose it)."""
    asked = False
    for index, tensor in enumerate(request.inputs):
        if tensor.name == COUNT_INPUT:
            asked = _bool_true(request, index)
            if not asked:   # the client said false: true, in the form the client used
                if index < len(request.raw_input_contents):
                    request.raw_input_contents[index] = b"\x01"
                else:
                    del tensor.contents.bool_contents[:]
                    tensor.contents.bool_contents.append(True)
            break
    else:
        tensor = request.inputs.add(name=COUNT_INPUT, datatype="BOOL", shape=[1])
        if request.raw_input_contents:   # raw contents hold all inputs or none
            request.raw_input_contents.append(b"\x01")
        else:
            tensor.contents.bool_contents.append(True)
    if request.outputs and not any(o.name == COUNT_OUTPUT for o in request.outputs):
        request.outputs.add(name=COUNT_OUTPUT)
        asked = False
    return not asked


def generated_tokens(response: service_pb2.ModelStreamInferResponse) -> int | None:
    """COUNT_OUTPUT of a response (its request's last), None when it has none."""
    infer = response.infer_response
    for index, tensor in enumerate(infer.outputs):
        if tensor.name != COUNT_OUTPUT:
            continue
        if tensor.contents.uint_contents:
            return int(tensor.contents.uint_contents[0])
        if index < len(infer.raw_output_contents) and len(infer.raw_output_contents[index]) >= 4:
            return int.from_bytes(infer.raw_output_contents[index][:4], "little")
    return None


def strip_count(response: service_pb2.ModelStreamInferResponse) -> None:
    """Removes COUNT_OUTPUT (and its raw contents) from a response."""
    infer = response.infer_response
    for index, tensor in enumerate(infer.outputs):
        if tensor.name == COUNT_OUTPUT:
            del infer.outputs[index]
            if index < len(infer.raw_output_contents):
                del infer.raw_output_contents[index]
            return


class Pending:
    """A stream's generation messages whose tokens were charged, waiting for their last answer (by id)."""

    def __init__(self):
        self.by_id: dict[str, collections.deque] = {}

    def add(self, request_id: str, charged: int, strip: bool) -> None:
        self.by_id.setdefault(request_id, collections.deque()).append((charged, strip))

    def take(self, request_id: str) -> tuple[int, bool] | None:
        waiting = self.by_id.get(request_id)
        if not waiting:
            return None
        entry = waiting.popleft()
        if not waiting:
            del self.by_id[request_id]
        return entry


def refusal_response(request: service_pb2.ModelInferRequest, code: str, message: str) -> bytes:
    return service_pb2.ModelStreamInferResponse(
        error_message=f"gateway: [{code}] {message.removeprefix('gateway: ')}",
        infer_response=service_pb2.ModelInferResponse(model_name=request.model_name,
                                                      model_version=request.model_version,
                                                      id=request.id)).SerializeToString()


class Charger:
    """Asks front_door.lua's /charge over NGINX's unix socket: None when admitted, else (code, message)."""

    def __init__(self, socket_path: Path, key: str):
        self.socket_path, self.key = str(socket_path), key

    async def __call__(self, tenant: str, model: str, max_tokens: int) -> tuple[str, str] | None:
        refused, _ = await self.admit(tenant, model, max_tokens)
        return refused

    async def admit(self, tenant: str, model: str, max_tokens: int, n: int = 1) -> tuple[tuple[str, str] | None, int]:
        """(None, tokens charged) when admitted, else ((code, message), 0)."""
        answer = await self._ask({"tenant": tenant, "model": model, "max_tokens": max_tokens, "n": n})
        if answer.get("code") != "OK":
            return (answer.get("code", "UNAVAILABLE"), answer.get("message", "")), 0
        return None, int(answer.get("charged") or 0)

    async def give_back(self, tenant: str, model: str, tokens: int) -> None:
        """Gives `tokens` charged but not generated back to the tenant's budget (usage.lua)."""
        if tokens > 0:
            await self._ask({"tenant": tenant, "model": model, "returned": tokens})

    async def _ask(self, args: dict) -> dict:
        query = urllib.parse.urlencode(args)
        reader, writer = await asyncio.open_unix_connection(self.socket_path)
        try:
            writer.write(f"GET /charge?{query} HTTP/1.0\r\nHost: gateway\r\nX-Hotpath-Key: {self.key}\r\n\r\n".encode())
            await writer.drain()
            raw = await asyncio.wait_for(reader.read(), CHARGE_TIMEOUT_S)
        finally:
            writer.close()
        head, _, body = raw.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.") or head.split(b" ", 2)[1] != b"200":
            return {"code": "UNAVAILABLE", "message": "gateway: the stream admission could not be checked"}
        return json.loads(body)


class StreamAdmission:
    """A grpc.aio server on loopback relaying ModelStreamInfer to the replicas, message by message."""

    def __init__(self, port: int, upstreams: tuple[str, ...], charger: Charger):
        self._error: Exception | None = None
        self.port, self.upstreams, self.charge = port, upstreams, charger
        self._next = itertools.cycle(range(len(upstreams)))
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: grpc.aio.Server | None = None
        self._channels: list[grpc.aio.Channel] = []

    async def _relay(self, requests, context: grpc.aio.ServicerContext):
        metadata = dict(context.invocation_metadata())
        tenant = metadata.get(STREAM_TENANT_HEADER, "")
        forward = upstream_metadata(metadata, tenant)
        pending = Pending()
        returns: set[asyncio.Task] = set()
        channel = self._channels[next(self._next)]
        upstream = channel.stream_stream(METHOD, request_serializer=None, response_deserializer=None)(
            metadata=forward)
        out: asyncio.Queue = asyncio.Queue(OUT_QUEUE)   # a client that does not read holds Triton back
        done = object()

        async def pump_in():
            try:
                async for raw in requests:
                    request = service_pb2.ModelInferRequest.FromString(raw)
                    # What is checked is what goes on: Triton's C++ parser keeps a map entry that holds
                    # an unknown field, which Python's parser sets aside (and would not check).
                    request.DiscardUnknownFields()
                    refused, charged = malformed(request), 0
                    if refused is None:
                        refused, charged = await self.charge.admit(tenant, request.model_name,
                                                                   *requested_tokens(request))
                    if refused is None:
                        if charged > 0:   # a generation: its unused tokens go back when it ends
                            pending.add(request.id, charged, ask_for_count(request))
                        await upstream.write(request.SerializeToString())
                    else:
                        await out.put(refusal_response(request, *refused))
                await upstream.done_writing()
            except DecodeError:
                await out.put(("INVALID_ARGUMENT", "gateway: a stream message is not a ModelInferRequest"))
            except Exception as exc:   # the upstream went away
                await out.put(("UNAVAILABLE", f"gateway: stream ended: {type(exc).__name__}"))

        async def pump_out():
            try:
                async for raw in upstream:
                    await out.put(self._answer(raw, pending, tenant, returns) if pending.by_id else raw)
            except grpc.aio.AioRpcError as exc:
                await out.put((exc.code().name, exc.details() or ""))
            await out.put(done)

        tasks = [asyncio.ensure_future(pump_in()), asyncio.ensure_future(pump_out())]
        try:
            while True:
                item = await out.get()
                if item is done:
                    return
                if isinstance(item, tuple):   # end the stream with this status
                    await context.abort(getattr(grpc.StatusCode, item[0], grpc.StatusCode.UNKNOWN), item[1])
                yield item
        finally:
            upstream.cancel()
            for task in tasks:
                task.cancel()

    def _answer(self, raw: bytes, pending: Pending, tenant: str, returns: set) -> bytes:
        """A replica's response as the client gets it; the last answer of a charged generation gives back
        what it did not generate (a task: the answer does not wait for it)."""
        if not pending.by_id:   # nothing charged waits for its count: the answer goes back unparsed
            return raw
        try:
            response = service_pb2.ModelStreamInferResponse.FromString(raw)
        except DecodeError:
            return raw
        infer = response.infer_response
        if response.error_message:
            pending.take(infer.id)   # the count is unknown: nothing is given back
            return raw
        generated = generated_tokens(response)
        if generated is None:
            return raw
        entry = pending.take(infer.id)
        if entry is None:
            return raw
        charged, strip = entry
        if charged > generated:
            task = asyncio.ensure_future(self._give_back(tenant, infer.model_name, charged - generated))
            returns.add(task)
            task.add_done_callback(returns.discard)
        if not strip:
            return raw
        strip_count(response)
        return response.SerializeToString()

    async def _give_back(self, tenant: str, model: str, tokens: int) -> None:
        try:
            await self.charge.give_back(tenant, model, tokens)
        except Exception as exc:  # noqa: BLE001 - a lost give-back leaves the tokens charged, nothing worse
            log.warning("stream admission: giving back %d tokens of %s failed: %r", tokens, tenant, exc)

    async def _serve(self, started: threading.Event) -> None:
        self._channels = [grpc.aio.insecure_channel(u) for u in self.upstreams]
        handler = grpc.method_handlers_generic_handler("inference.GRPCInferenceService", {
            "ModelStreamInfer": grpc.stream_stream_rpc_method_handler(self._relay)})
        self._server = grpc.aio.server(options=[("grpc.max_receive_message_length", -1),
                                                ("grpc.max_send_message_length", -1)])
        self._server.add_generic_rpc_handlers((handler,))
        try:
            # Port 0: the OS picks a free one as it binds (no window for another process to take it).
            self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        except RuntimeError as exc:
            self._error = exc
            started.set()
            return
        await self._server.start()
        self._stopping = asyncio.Event()
        started.set()
        grace_s = await self._wait_stop()
        await self._server.stop(grace_s)
        for channel in self._channels:
            await channel.close()

    async def _wait_stop(self) -> float:
        await self._stopping.wait()
        return self._grace_s

    def start(self) -> "StreamAdmission":
        """Serve on a thread of its own (its event loop), until stop()."""
        started = threading.Event()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_until_complete, args=(self._serve(started),),
                                        name="stream-admission", daemon=True)
        self._thread.start()
        if not started.wait(10):
            raise RuntimeError("the stream admission did not start")
        if self._error is not None:
            raise RuntimeError(f"the stream admission could not bind 127.0.0.1:{self.port}: {self._error}")
        return self

    def stop(self, grace_s: float = 5.0) -> None:
        if self._loop is None or self._server is None:
            return
        self._grace_s = grace_s
        self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(grace_s + 10)   # the loop stops the server, closes the upstream channels and ends
        self._loop = None
