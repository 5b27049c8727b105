"""gRPC client for hotpath endpoints (tritonclient.grpc underneath).

One client keeps one gRPC channel open and sends many items per request (up to the endpoint's
max_batch_size) rather than one request per item.

Errors name what went wrong and whether trying again can help: InvalidInputError (INVALID_ARGUMENT:
the request itself is bad, never retried), ServerUnavailableError (UNAVAILABLE: overloaded, shutting
down or unreachable; retried a bounded number of times with jittered exponential backoff before it
is raised), RequestTimeoutError (DEADLINE_EXCEEDED), UnauthenticatedError (UNAUTHENTICATED: the
gateway refused the tenant token) and ServerFaultError (INTERNAL and the rest).

Behind the tenant gateway (hotpath.gateway) every call carries `authorization: Bearer <token>`:
the `token` argument, else $HOTPATH_TOKEN.
"""

from __future__ import annotations

import collections
import json
import queue
import random
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Iterator, Sequence

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath import settings
from hotpath.errors import HotpathError, InputError, UnavailableError


class ClientError(HotpathError):
    """The server rejected a request or could not be reached; `status` is the gRPC status name."""

    exit_code = 1  # the CLI's exit status for this kind of error
    retryable = False

    def __init__(self, message: str, status: str | None = None):
        super().__init__(message)
        self.status = status


class InvalidInputError(ClientError, InputError):
    """INVALID_ARGUMENT: the request is wrong (bad bytes, too large, wrong shape); never retry it."""

    exit_code = 65  # sysexits EX_DATAERR


class ServerUnavailableError(ClientError, UnavailableError):
    """UNAVAILABLE: overloaded (the gateway's in-flight cap, text_generation's admission queue), shutting down
    or unreachable; try later."""

    exit_code = 69  # sysexits EX_UNAVAILABLE
    retryable = True


class RequestTimeoutError(ClientError):
    """DEADLINE_EXCEEDED: no answer within the client's timeout (the request may still have run)."""

    exit_code = 75  # sysexits EX_TEMPFAIL


class UnauthenticatedError(ClientError):
    """UNAUTHENTICATED: the gateway knows no tenant by this token (or none was sent; see HOTPATH_TOKEN)."""

    exit_code = 77  # sysexits EX_NOPERM


class ServerFaultError(ClientError):
    """INTERNAL and any other server-side failure: a bug or a broken model, not the request's fault."""

    exit_code = 70  # sysexits EX_SOFTWARE


_BY_STATUS = {"INVALID_ARGUMENT": InvalidInputError, "UNAVAILABLE": ServerUnavailableError,
              "DEADLINE_EXCEEDED": RequestTimeoutError, "RESOURCE_EXHAUSTED": ServerUnavailableError,
              "UNAUTHENTICATED": UnauthenticatedError,
              # hotpath's calls never cancel themselves: a CANCELLED one was dropped by a server closing
              # its port mid-call (seen once in test_lifecycle's SIGTERM run), so it may be sent again.
              "CANCELLED": ServerUnavailableError,
              # HTTP statuses, as tritonclient.http reports them; 502: the gateway reached no server
              "400": InvalidInputError, "502": ServerUnavailableError, "503": ServerUnavailableError,
              "504": RequestTimeoutError,
              "401": UnauthenticatedError, "413": InvalidInputError, "429": ServerUnavailableError}


# Triton 2.51 after SIGTERM: NOT_FOUND "Request for unknown model: 'm' has no available versions" for the
# seconds its models take to unload. The model is known but no version of it is READY on this
# server now (an unknown name says "is not found"): UNAVAILABLE to the caller, retried; a gateway may send it
# elsewhere.
_NO_VERSION_NOW = "has no available versions"
# Triton 2.51 when a model's Python stub process died: INTERNAL "Stub process 'tokenizer_0_0' is not healthy."
# A server fault, but a transient one (the watchdog or the orchestrator restarts it; another replica can
# serve): retryable, like UNAVAILABLE. Inference requests are idempotent.
_DEAD_STUB = "is not healthy"
# A call whose HTTP/2 stream a proxy reset because the replica behind it died mid-call: INTERNAL "Stream removed
# (RST_STREAM ...)" from gRPC's transport, not from any model. Transient, and inference is idempotent: retried.
_STREAM_RESET = "RST_STREAM"


# A decoupled model's error on a gRPC stream reaches tritonclient as ModelStreamInferResponse.error_message
# alone (Triton 2.51 src/grpc/stream_infer_handler.cc: the status code is dropped unless the stream was
# opened with the `triton_grpc_error` header, a mode that crashed 2.51 once here; see GenerationClient),
# so hotpath's streaming models start their messages with "<model>: [STATUS] " and the class is read there.
_TAGGED = re.compile(r"^[\w.-]+: \[([A-Z_]+)\] ")


def client_error(where: str, exc: InferenceServerException) -> ClientError:
    """The ClientError subclass for a tritonclient exception (its status: gRPC 'StatusCode.X' or HTTP code,
    else the "<model>: [STATUS] " tag of a stream error's message)."""
    status = str(exc.status() or "").removeprefix("StatusCode.") or None
    if status is None and (tagged := _TAGGED.match(exc.message() or "")):
        status = tagged.group(1)
    kind = _BY_STATUS.get(status or "", ServerFaultError if status else ClientError)
    message = exc.message() or ""
    if (status == "NOT_FOUND" and _NO_VERSION_NOW in message) or \
            (status == "INTERNAL" and (_DEAD_STUB in message or _STREAM_RESET in message)):
        kind = ServerUnavailableError
    return kind(f"{where}: {exc.message()}", status)


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries of retryable errors (UNAVAILABLE) with full-jitter exponential backoff."""

    attempts: int = 3
    initial_backoff_s: float = 0.05
    max_backoff_s: float = 1.0

    def call(self, fn, where: str):
        """fn() until it succeeds, raises a non-retryable error, or the attempts are spent."""
        attempt = 1
        while True:
            try:
                return fn()
            except InferenceServerException as exc:
                error = client_error(where, exc)
            self.wait_or_raise(error, attempt)
            attempt += 1

    def wait_or_raise(self, error: ClientError, attempt: int) -> None:
        """After failed attempt number `attempt`: raise `error` unless it is retryable and attempts are left,
        else sleep the backoff (so the caller tries again)."""
        if not error.retryable or attempt >= self.attempts:
            raise error from None
        time.sleep(self.backoff_s(attempt))

    def backoff_s(self, attempt: int) -> float:
        """The pause after failed attempt number `attempt` (1-based): full jitter, capped."""
        return random.uniform(0, min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1)))


TOKEN_ENV = settings.token.name


class BearerToken(grpcclient.InferenceServerClientPlugin):
    """Adds `authorization: Bearer <token>` to every call of a tritonclient client."""

    def __init__(self, token: str):
        self._value = f"Bearer {token}"

    def __call__(self, request) -> None:
        request.headers["authorization"] = self._value


def connect(url: str, token: str | None = None) -> grpcclient.InferenceServerClient:
    """A gRPC client for `url` that sends `token` (default $HOTPATH_TOKEN) when there is one."""
    client = grpcclient.InferenceServerClient(url)
    token = token if token is not None else settings.token()
    if token:
        client.register_plugin(BearerToken(token))
    return client


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

    def __init__(self, url: str = "localhost:8001", model: str | None = None, timeout_s: float | None = 30.0,
                 retry: RetryPolicy = RetryPolicy(), token: str | None = None):
        self.url = url
        self.model = model or self.model
        self.timeout_s = timeout_s
        self.retry = retry
        self._client = connect(url, token)
        self._max_batch: int | None = None

    @property
    def max_batch_size(self) -> int:
        if self._max_batch is None:
            config = self.retry.call(lambda: self._client.get_model_config(self.model, as_json=True),
                                     self._where)["config"]
            self._max_batch = int(config.get("max_batch_size", 0)) or 1
        return self._max_batch

    def infer_raw(self, inputs: list[grpcclient.InferInput]) -> grpcclient.InferResult:
        """One request with prepared inputs (retried per `self.retry`); raises a ClientError subclass."""
        outputs = [grpcclient.InferRequestedOutput(n) for n in self.output_names]
        return self.retry.call(lambda: self._client.infer(self.model, inputs, outputs=outputs,
                                                          client_timeout=self.timeout_s), self._where)

    @property
    def _where(self) -> str:
        return f"{self.model} at {self.url}"

    def _infer_bytes(self, items: Sequence[str | bytes]) -> list[dict[str, np.ndarray]]:
        """Send `items` in chunks of max_batch_size; one dict of outputs per chunk."""
        if not items:
            raise ValueError(f"{self.model}: needs at least one input")
        size = self.max_batch_size
        results = []
        for i in range(0, len(items), size):
            result = self.infer_raw([text_input(self.input_name, items[i:i + size])])
            outputs = {n: result.as_numpy(n) for n in self.output_names}
            missing = [n for n, a in outputs.items() if a is None]
            if missing:  # tritonserver 2.51's response cache can replay a cached error as an empty success
                raise ServerFaultError(f"{self._where}: a success without outputs {missing}")
            results.append(outputs)
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


@dataclass(frozen=True)
class Hit:
    """One document found by the retrieval endpoint."""

    id: str
    score: float
    document: str


def _decoded(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


class RetrievalClient(EndpointClient):
    """Text -> top-k documents, and writes: `RetrievalClient(url).search(["query"], k=5)`,
    `.upsert(["id"], ["document"])`, `.delete(["id"])`. A write has returned once it is durable."""

    model = "retrieval"
    input_name = "TEXT"
    output_names = ("IDS", "SCORES", "DOCUMENTS")

    def _chunks(self, n: int) -> Iterator[slice]:
        if not n:
            raise ValueError(f"{self.model}: needs at least one input")
        for i in range(0, n, self.max_batch_size):
            yield slice(i, min(n, i + self.max_batch_size))

    def _call(self, inputs: list[grpcclient.InferInput]) -> dict[str, np.ndarray]:
        result = self.infer_raw(inputs)
        outputs = {n: result.as_numpy(n) for n in self.output_names}
        if any(a is None for a in outputs.values()):
            raise ServerFaultError(f"{self._where}: a success without outputs")
        return outputs

    def search(self, texts: Sequence[str | bytes], k: int | None = None) -> list[list[Hit]]:
        """Per text, its hits best first (k of them, the endpoint's default_k when None)."""
        out = []
        for part in self._chunks(len(texts)):
            inputs = [text_input("TEXT", texts[part])]
            if k is not None:
                inputs.append(_tensor("TOP_K", np.full((len(texts[part]), 1), k, dtype=np.int64), "INT64"))
            r = self._call(inputs)
            out.extend([Hit(_decoded(i), float(s), _decoded(d)) for i, s, d in zip(ids, scores, docs)]
                       for ids, scores, docs in zip(r["IDS"], r["SCORES"], r["DOCUMENTS"]))
        return out

    def _write(self, op: str, ids: Sequence[str], documents: Sequence[str | bytes]) -> list[bool]:
        existed = []
        for part in self._chunks(len(ids)):
            n = len(ids[part])
            r = self._call([text_input("TEXT", documents[part]), text_input("OP", [op] * n),
                            text_input("ID", ids[part])])
            existed.extend(bool(s[0] > 0) for s in r["SCORES"])
        return existed

    def upsert(self, ids: Sequence[str], documents: Sequence[str | bytes]) -> list[bool]:
        """Add or replace documents; per id, whether it existed before. Durable and searchable on return."""
        if len(ids) != len(documents):
            raise ValueError("upsert: one document per id")
        return self._write("upsert", ids, documents)

    def delete(self, ids: Sequence[str]) -> list[bool]:
        """Remove documents; per id, whether it existed. Durable on return."""
        return self._write("delete", ids, [b""] * len(ids))


@dataclass
class TokenDelta:
    """One streamed delta of one choice: the text it adds (a token's text, mostly) and when it arrived."""

    text: str
    at_s: float  # seconds since the request was sent
    choice: int = 0   # its choice's index (n > 1)


@dataclass
class Generation:
    """A finished generation: the whole text, why it ended, token counts and per-response arrival times.
    With n > 1, `text` and `finish_reason` are choice 0's, `choices` and `finish_reasons` every choice's;
    `completion_tokens` counts every choice's tokens. `logprobs` (when asked for): per choice, an entry per
    generated token as the engine computed it, [token id, token, logprob, [[id, token, logprob, rank], ...]]
    (the top alternatives); an end-of-sequence token, which the text leaves out, has none (as OpenAI's)."""

    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    token_times_s: list[float] = field(default_factory=list)  # arrival of each streamed delta, since the send
    total_s: float = 0.0
    choices: list[str] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    logprobs: list[list] | None = None

    @property
    def ttft_s(self) -> float | None:
        return self.token_times_s[0] if self.token_times_s else None


def _tensor(name: str, data: np.ndarray, dtype: str) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, list(data.shape), dtype)
    t.set_data_from_numpy(data)
    return t


def chat_messages(prompt: str | bytes, history: Sequence[str] | None = None, system: str | None = None) -> list[dict]:
    """The chat as text_generation's `messages`: an optional system turn, earlier turns (user, assistant,
    user, ... alternating), then `prompt` as the user's turn."""
    turns = [{"role": "system", "content": system}] if system is not None else []
    for i, text in enumerate(history or ()):
        turns.append({"role": ("user", "assistant")[i % 2], "content": _text(f"history[{i}]", text)})
    turns.append({"role": "user", "content": _text("prompt", prompt)})
    return turns


def sampling_parameters(max_tokens: int | None = None, temperature: float | None = None, top_p: float | None = None,
                        top_k: int | None = None, seed: int | None = None,
                        stop: str | Sequence[str] | None = None, n: int | None = None,
                        logprobs: int | None = None) -> dict:
    """text_generation's sampling_parameters (JSON object): only what is given."""
    values = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p, "top_k": top_k, "seed": seed,
              "stop": stop if stop is None or isinstance(stop, str) else list(stop), "n": n, "logprobs": logprobs}
    return {k: v for k, v in values.items() if v is not None and v != []}


def generation_inputs(prompt: str | bytes | None = None, max_tokens: int | None = None,
                      temperature: float | None = None, top_p: float | None = None, top_k: int | None = None,
                      seed: int | None = None, stop: str | Sequence[str] | None = None,
                      history: Sequence[str] | None = None, system: str | None = None,
                      messages: Sequence[dict] | None = None, raw: bool = False,
                      stream: bool = True, n: int | None = None,
                      logprobs: int | None = None) -> list[grpcclient.InferInput]:
    """text_generation's inputs (Triton's vLLM-backend tensors). By default the prompt is the user's turn of
    a chat (`messages`, after `history` and `system`), rendered with the model's chat template on the
    server; `messages` sends a whole conversation as is; `raw` sends the prompt as text_input (no
    template). Streaming asks for a response per delta; every request asks for the finish reason and
    token counts. `n`: choices (1..8, sampled: greedy choices are equal); `logprobs`: the top alternatives
    per token (0..20), and the `logprobs` output with them."""
    if messages is not None:
        chat = [{"role": m["role"], "content": _text(f"messages[{i}].content", m["content"])}
                for i, m in enumerate(messages)]
        inputs = [_string_tensor("messages", json.dumps(chat, ensure_ascii=False).encode("utf-8"))]
    elif raw:
        inputs = [_string_tensor("text_input", _utf8("text_input", prompt))]
    else:
        chat = chat_messages(prompt, history, system)
        inputs = [_string_tensor("messages", json.dumps(chat, ensure_ascii=False).encode("utf-8"))]
    params = sampling_parameters(max_tokens, temperature, top_p, top_k, seed, stop, n, logprobs)
    if params:
        inputs.append(_string_tensor("sampling_parameters", json.dumps(params).encode("utf-8")))
    flags = [("stream", stream), ("exclude_input_in_output", True), ("return_finish_reason", True),
             ("return_num_input_tokens", True), ("return_num_output_tokens", True)]
    if logprobs is not None:
        flags.append(("return_logprobs", True))
    for name, value in flags:
        inputs.append(_tensor(name, np.array([value], dtype=bool), "BOOL"))
    return inputs


def _strings_of(output: np.ndarray | None) -> list[str]:
    """A BYTES output's elements as text (none when absent)."""
    return [] if output is None else [v.decode("utf-8") for v in output.reshape(-1)]


def _string_tensor(name: str, data: bytes) -> grpcclient.InferInput:
    return _tensor(name, np.array([data], dtype=np.object_), "BYTES")


def _text(name: str, text: str | bytes) -> str:
    """A text field of the messages JSON: str, or UTF-8 bytes (refused otherwise, as the server would)."""
    try:
        return _utf8(name, text).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(f"{name} is not valid UTF-8 (byte {exc.start})", "INVALID_ARGUMENT") from None


def _utf8(name: str, text: str | bytes) -> bytes:
    """A text input's bytes; a str that is not valid Unicode (lone surrogates: undecodable bytes of a
    command line, os.fsdecode's surrogateescape) is refused here, as the server would refuse its bytes."""
    if not isinstance(text, str):
        return bytes(text)
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInputError(f"{name} is not valid UTF-8 text (undecodable character "
                                f"{text[exc.start]!r} at {exc.start})", "INVALID_ARGUMENT") from None


class GenerationClient:
    """Streaming text generation over gRPC: `for delta in client.stream("hi"): ...`.

    `stream()` yields a TokenDelta per generated token and then the final Generation; `generate()`
    returns only the Generation. Leaving a stream early cancels the request on the server, which
    frees its slot at the next decode step. One request at a time per client. Retryable errors are
    retried per `retry`, the policy of every hotpath client, but only before the first token: a stream
    that has yielded tokens is never replayed (its reader would see them twice).

    Each request gets a gRPC stream of its own on the client's channel, closed after the final
    response: Triton 2.51 holds the model version of a stream's first request until the stream ends, so
    a stream kept open between requests stops that version from unloading (an old copy's stub stays
    after a reload; a shutdown waits out its exit timeout). Errors are classed by the "[STATUS]" tag of
    the model's message (see client_error); Triton's `triton_grpc_error` stream header, which would carry
    the code, is not sent: with it tritonserver 2.51 crashed (SIGSEGV after "HandleCancellation called
    even when the context was not cancelled") during a run of invalid-input streams.
    """

    model = "text_generation"

    def __init__(self, url: str = "localhost:8001", model: str | None = None, timeout_s: float = 120.0,
                 token: str | None = None, retry: RetryPolicy = RetryPolicy()):
        self.url, self.model, self.timeout_s, self.retry = url, model or self.model, timeout_s, retry
        self._client = connect(url, token)
        self._responses: queue.Queue = queue.Queue()
        self._streaming = False

    def _on_response(self, result=None, error=None) -> None:  # tritonclient passes keywords
        self._responses.put((time.perf_counter(), result, error))

    def _open(self) -> None:
        if not self._streaming:
            self._responses = queue.Queue()
            try:
                self._client.start_stream(callback=self._on_response)
            except InferenceServerException as exc:
                raise client_error(f"{self.model} at {self.url}", exc) from None
            self._streaming = True

    def _end_stream(self, cancel: bool) -> None:
        if self._streaming:
            self._streaming = False
            try:
                self._client.stop_stream(cancel_requests=cancel)
            finally:
                self._responses = queue.Queue()

    def cancel(self) -> None:
        """Close the stream, cancelling the request in flight on the server."""
        self._end_stream(cancel=True)

    def stream(self, prompt: str | bytes | None = None, **params) -> Iterator[TokenDelta | Generation]:
        """Yield a TokenDelta per streamed delta, then the Generation; raises ClientError on a server error.
        Parameters: those of `generation_inputs` (max_tokens, temperature, top_p, top_k, seed, stop, history,
        system, messages, raw, n, logprobs)."""
        attempt = 1
        while True:
            started = False
            try:
                for event in self._stream_once(prompt, **params):
                    started = True
                    yield event
                return
            except ClientError as error:
                if started:  # a stream that has yielded tokens is never replayed
                    raise
                self.retry.wait_or_raise(error, attempt)
            attempt += 1

    def _stream_once(self, prompt: str | bytes | None, **params) -> Iterator[TokenDelta | Generation]:
        inputs = generation_inputs(prompt, **params)   # a bad input fails before any stream opens
        where = f"{self.model} at {self.url}"
        self._open()
        request_id = uuid.uuid4().hex
        sent = time.perf_counter()
        finished = False
        try:
            try:
                self._client.async_stream_infer(self.model, inputs, request_id=request_id)
            except InferenceServerException as exc:  # the stream broke (server unreachable); details in the callback
                try:
                    error = self._responses.get(timeout=1.0)[2] or exc
                except queue.Empty:
                    error = exc
                raise client_error(where, error) from None
            texts, logprobs, times = collections.defaultdict(list), collections.defaultdict(list), []
            while True:
                try:
                    at, result, error = self._responses.get(timeout=self.timeout_s)
                except queue.Empty:
                    raise RequestTimeoutError(f"{where}: no response within {self.timeout_s:.0f}s",
                                              "DEADLINE_EXCEEDED") from None
                if error is not None:   # the request's final response (or the stream broke): nothing to cancel
                    finished = True
                    self._end_stream(cancel=False)
                    raise client_error(where, error)
                deltas = _strings_of(result.as_numpy("text_output"))   # one per choice
                for index, entries in enumerate(_strings_of(result.as_numpy("logprobs"))):
                    logprobs[index].extend(json.loads(entries))
                if any(deltas):
                    times.append(at - sent)
                for index, delta in enumerate(deltas):
                    if delta:
                        texts[index].append(delta)
                        yield TokenDelta(delta, at - sent, index)
                reasons = result.as_numpy("finish_reason")
                if reasons is None:
                    continue
                finished = True
                self._end_stream(cancel=False)   # the request is complete: nothing to cancel
                reasons = _strings_of(reasons)
                choices = ["".join(texts[i]) for i in range(len(reasons))]
                yield Generation(choices[0], reasons[0], int(result.as_numpy("num_input_tokens").reshape(-1)[0]),
                                 int(result.as_numpy("num_output_tokens").reshape(-1)[0]), times, at - sent,
                                 choices, reasons,
                                 [logprobs[i] for i in range(len(reasons))] if params.get("logprobs") is not None else None)
                return
        finally:
            if not finished:  # an error, or abandoned mid-stream: cancel whatever the server still runs
                self.cancel()

    def generate(self, prompt: str | bytes | None = None, **params) -> Generation:
        """The finished Generation (see `stream` for parameters)."""
        for event in self.stream(prompt, **params):
            if isinstance(event, Generation):
                return event
        raise ClientError(f"{self.model} at {self.url}: the stream ended without a final response")

    def close(self) -> None:
        self._end_stream(cancel=True)
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
