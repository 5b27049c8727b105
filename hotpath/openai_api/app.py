"""The OpenAI-compatible HTTP API (Starlette on uvicorn) over the repository's endpoints.

Routes: POST /v1/embeddings, /v1/chat/completions, /v1/completions, /tokenize, /detokenize (vLLM's);
GET /v1/models[/{id}], /health, /metrics. Every answer other than 200 is an OpenAI error object
(hotpath.openai_api.errors), unknown routes and methods included. Bodies are bounded before they are parsed (413), must keep arriving (408
when nothing came for `body_timeout_s`), are parsed strictly (400 naming the field), and at most
`max_in_flight` requests are answered at once (429 with Retry-After beyond that: a fast refusal instead
of a queue in front of Triton's own). A request takes its place among those only once its body is whole:
half-sent bodies hold a connection (hotpath.openai_api.connections bounds those), never a place.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from hotpath import settings
from hotpath.openai_api import errors
from hotpath.openai_api.answer_cache import (
    SEMANTIC_HEADER,
    AnswerCache,
    canonical,
    deterministic,
)
from hotpath.openai_api.catalog import ServedModel, served_models
from hotpath.openai_api.errors import APIError
from hotpath.openai_api.generation import (
    FINISH_REASONS,
    OUTPUT_TOKENS_HEADER,
    Completion,
    Totals,
    output_tokens_comment,
    request_inputs,
    request_outputs,
)
from hotpath.openai_api.metrics import APIMetrics
from hotpath.openai_api.schemas import (
    CHAT_REFUSED,
    COMPLETION_REFUSED,
    DEPRECATED,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    EmbeddingsRequest,
    TokenizeChatRequest,
    TokenizeRequest,
    logprobs_fault,
    min_tokens_fault,
)
from hotpath.openai_api.stream_phases import StreamPhases
from hotpath.openai_api.tokenization import ModelTokenizer, check_ids, check_text
from hotpath.openai_api.tokens import TokenCounter
from hotpath.openai_api.tool_calling import tool_fault
from hotpath.openai_api.tool_prompt import engine_messages
from hotpath.openai_api.tool_stream import ToolStream, tool_chunks, tool_events
from hotpath.openai_api.triton import Triton, tenancy_headers
from hotpath.shared_state.cache_key import HIT_HEADER, NAMESPACE_HEADER
from hotpath.shared_state.target import RedisTarget

log = logging.getLogger("hotpath.openai_api")

DEFAULT_MAX_BODY_BYTES = 8 << 20    # 2048 inputs of ~4 KB each
DEFAULT_MAX_IN_FLIGHT = 64


@dataclass
class APIConfig:
    grpc_url: str
    repository: Path
    aliases: dict[str, str] = field(default_factory=dict)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT
    api_key: str | None = field(default=None, repr=False)   # None: no key (behind the tenant gateway, or loopback)
    redis: RedisTarget | None = None   # the fleet's Redis: answers cached for every replica (answer_cache); None: none
    semantic_model: str = "text_embedding"   # the endpoint whose vectors the semantic cache compares
    body_timeout_s: float = field(default_factory=settings.client_body_timeout_s)   # 408 when a body stalls this long


def json_response(body: dict, status: int = 200, headers: dict | None = None) -> Response:
    return Response(orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY), status, headers,
                    media_type="application/json")


def error_response(error: APIError) -> Response:
    return json_response(error.body(), error.status, error.headers())


def sse(data: dict) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


DONE = b"data: [DONE]\n\n"
SIMILARITY_HEADER = "X-Hotpath-Cache-Similarity"   # on a semantic hit: the cosine it was served at


class OpenAIAPI:
    def __init__(self, config: APIConfig):
        self.config = config
        self.models: dict[str, ServedModel] = served_models(config.repository, config.aliases)
        self.counters = {m.endpoint: TokenCounter(m.tokenizer) for m in self.models.values() if m.tokenizer}
        self.metrics = APIMetrics()
        self.triton: Triton | None = None
        self.cache: AnswerCache | None = None
        self.embedder = next((m for m in self.models.values()
                              if m.kind == "embedding" and m.endpoint == config.semantic_model), None)
        self._stores: set[asyncio.Task] = set()
        self._tokenizers: dict[str, ModelTokenizer] = {}
        self.in_flight = 0
        self.app = Starlette(routes=[
            Route("/v1/embeddings", self.route("embeddings", self.embeddings), methods=["POST"]),
            Route("/v1/chat/completions", self.route("chat", self.chat), methods=["POST"]),
            Route("/v1/completions", self.route("completions", self.completions), methods=["POST"]),
            Route("/tokenize", self.route("tokenize", self.tokenize), methods=["POST"]),
            Route("/detokenize", self.route("detokenize", self.detokenize), methods=["POST"]),
            Route("/v1/models", self.route("models", self.list_models, counted=False), methods=["GET"]),
            Route("/v1/models/{model:path}", self.route("models", self.get_model, counted=False), methods=["GET"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/metrics", self.metrics_route, methods=["GET"]),
        ], exception_handlers={HTTPException: self.http_error, Exception: self.server_error},
            lifespan=self.lifespan)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app):
        self.triton = Triton(self.config.grpc_url)
        if self.config.redis is not None:
            from hotpath.shared_state.cache_key import repository_build
            from hotpath.specs.repository import Repository

            self.cache = AnswerCache(self.config.redis.client(asyncio=True),
                                     repository_build(Repository(self.config.repository)),
                                     counter=self.metrics.cache)
        try:
            yield
        finally:
            await self.triton.close()
            if self.cache is not None:
                await self.cache.client.aclose()

    # -- the frame every API route runs in: auth, in-flight cap, errors, metrics

    def route(self, name: str, handler, counted: bool = True):
        async def run(request: Request) -> Response:
            slot = _Slot(self, name, counted)
            model, response = "-", None
            try:
                self._authorize(request)
                slot.refuse_when_full()   # before the body is read: refusing stays cheap
                request.state.slot = slot
                response, model = await handler(request)
            except APIError as error:
                response = error_response(error)
                self.metrics.errors.labels(name, str(error.status), error.type).inc()
            except Exception:   # noqa: BLE001 - a bug: logged with its traceback, the client gets a plain 500
                log.exception(f"{request.method} {request.url.path} failed")
                response = error_response(INTERNAL)
                self.metrics.errors.labels(name, "500", "server_error").inc()
            finally:
                if not isinstance(response, StreamingResponse):
                    slot.release()
            self.metrics.requests.labels(name, model, str(response.status_code)).inc()
            return response

        return run

    def _authorize(self, request: Request) -> None:
        if self.config.api_key is None:
            return
        if request.headers.get("authorization", "") != f"Bearer {self.config.api_key}":
            raise APIError(401, "Incorrect or missing API key (send Authorization: Bearer <key>)",
                           "authentication_error", None, "invalid_api_key")

    async def _body(self, request: Request, schema):
        """The request's body parsed as `schema`, its request counted in flight once the body is whole; 413
        beyond max_body_bytes (read no further), 408 when it stalls, 400 when it does not parse."""
        raw = await self._read(request)
        request.state.slot.take()
        try:
            parsed = schema.model_validate_json(raw)
        except ValidationError as exc:
            raise errors.from_validation(exc) from None
        request.state.raw = raw
        return parsed

    async def _read(self, request: Request) -> bytes:
        limit, stall_s = self.config.max_body_bytes, self.config.body_timeout_s
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            raise errors.body_too_large(limit) if length.isdigit() else errors.invalid("Bad Content-Length")
        chunks, size, stream = [], 0, request.stream()
        while True:
            try:   # each read, as NGINX's client_body_timeout (wait_for, not asyncio.timeout: the image runs 3.10)
                chunk = await asyncio.wait_for(stream.__anext__(), stall_s)
            except StopAsyncIteration:
                return b"".join(chunks)
            except asyncio.TimeoutError:
                raise errors.body_timeout(stall_s) from None
            size += len(chunk)
            if size > limit:
                raise errors.body_too_large(limit)
            chunks.append(chunk)

    # -- the fleet's answer cache (answer_cache)

    def _namespace(self, request: Request) -> str:
        """The caller's cache namespace, "" for none: the tenant gateway's header (its tenant's namespace;
        the gateway always sets it), or "api" for the one tenant of an API with its own key."""
        if self.cache is None:
            return ""
        if self.config.api_key is not None:
            return "api"
        return request.headers.get(NAMESPACE_HEADER, "api")

    def _behind_gateway(self) -> bool:
        """No key of its own: the tenant gateway (or loopback) is the caller's door."""
        return self.config.api_key is None

    def _tenancy(self, request: Request) -> dict[str, str]:
        """The gateway's tenant and collection headers, passed on to Triton so the models count usage for the
        right tenant (hotpath.runtime.usage); none for an API with its own key (one tenant: "local")."""
        return tenancy_headers(request.headers) if self._behind_gateway() else {}

    def _generated(self, headers: dict | None, tokens: int) -> dict | None:
        """`headers` plus the tokens generated, for the gateway's give-back (generation.OUTPUT_TOKENS_HEADER)."""
        if not self._behind_gateway():
            return headers
        return {**(headers or {}), OUTPUT_TOKENS_HEADER: str(int(tokens))}

    def _later(self, coroutine) -> None:
        """Store after the answer went out; the task is kept until done (asyncio holds it weakly)."""
        task = asyncio.ensure_future(coroutine)
        self._stores.add(task)
        task.add_done_callback(self._stores.discard)

    def _model(self, name: str, kind: str, chat: bool = False) -> ServedModel:
        model = self.models.get(name)
        if model is None or model.kind != kind or (chat and not model.chat):
            raise errors.model_not_found(name)
        return model

    # -- routes

    async def embeddings(self, request: Request):
        body: EmbeddingsRequest = await self._body(request, EmbeddingsRequest)
        model = self._model(body.model, "embedding")
        if body.dimensions is not None and body.dimensions != model.dimensions:
            raise errors.invalid(f"'dimensions' must be {model.dimensions} for {model.id} (not a Matryoshka model: "
                                 "its vectors cannot be shortened)", "dimensions", "invalid_value")
        texts = body.texts
        _check_texts(model, texts)
        namespace = self._namespace(request)
        if namespace:
            key = canonical(orjson.loads(request.state.raw))
            stored = await self.cache.get(namespace, model.endpoint, key)
            if stored is not None:
                return Response(stored, media_type="application/json", headers={HIT_HEADER: "hit"}), model.id
        response, model_id = await self._embed(body, model, texts, self._tenancy(request))
        if namespace:
            self._later(self.cache.put(namespace, model.endpoint, key, response.body))
            response.headers[HIT_HEADER] = "miss"
        return response, model_id

    async def _embed(self, body: EmbeddingsRequest, model: ServedModel, texts: list[str], headers: dict):
        pending = self.triton.embed(model, texts, headers)
        try:
            await asyncio.sleep(0)   # the calls go out, then counting tokens overlaps Triton's work
            tokens = self.counters[model.endpoint].count(texts)
        finally:
            vectors = await pending
        self.metrics.tokens.labels(model.id, "prompt").inc(tokens)
        if body.encoding_format == "base64":
            little = vectors.astype("<f4", copy=False)
            data = [{"object": "embedding", "index": i, "embedding": base64.b64encode(v.tobytes()).decode("ascii")}
                    for i, v in enumerate(little)]
        else:
            data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        return json_response({"object": "list", "data": data, "model": body.model,
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}), model.id

    async def chat(self, request: Request):
        body: ChatCompletionRequest = await self._body(request, ChatCompletionRequest)
        if refused := CHAT_REFUSED.check(body):
            raise errors.unsupported(refused, DEPRECATED.get(refused))
        if fault := logprobs_fault(body):
            raise errors.invalid("'top_logprobs' needs 'logprobs': true", fault, "invalid_value")
        if fault := tool_fault(body):
            raise errors.invalid(*fault, "invalid_value")
        return await self._generate(request, self._model(body.model, "generation", chat=True), body, "messages")

    async def completions(self, request: Request):
        body: CompletionRequest = await self._body(request, CompletionRequest)
        if refused := COMPLETION_REFUSED.check(body):
            raise errors.unsupported(refused)
        return await self._generate(request, self._model(body.model, "generation"), body, "prompt")

    async def _generate(self, request: Request, model: ServedModel, body, param: str):
        if fault := min_tokens_fault(body):
            raise errors.invalid("'min_tokens' must be at most the request's max_tokens", fault, "invalid_value")
        if body.stream_options is not None and not body.stream:
            raise errors.invalid("'stream_options' is only allowed when 'stream' is true", "stream_options")
        completion = Completion(body)
        store = await self._cached_answer(request, model, body, completion)
        if isinstance(store, Response):
            return store, model.id
        steps = self.triton.generate(model, request_inputs(body), param, self._tenancy(request),
                                     request_outputs(body))
        totals = Totals()
        if not body.stream:
            async for step in steps:
                totals.add(step)
            self._count_tokens(model, totals)
            if store:
                store(totals)
            return json_response(completion.whole(totals),
                                 headers=self._generated(store and {HIT_HEADER: "miss"}, totals.completion_tokens)
                                 ), model.id
        phases = StreamPhases(self.metrics.phase, request.state.slot.started)
        phases.mark("receive")
        # The first response decides the status: an error before it is an HTTP error, after it an error event.
        first = await anext(steps)
        phases.mark("first_response")
        headers = {"cache-control": "no-cache", **({HIT_HEADER: "miss"} if store else {})}
        return StreamingResponse(self._events(request.state.slot, model, completion, first, steps, totals, store,
                                              phases), media_type="text/event-stream", headers=headers), model.id

    async def _cached_answer(self, request: Request, model: ServedModel, body, completion: Completion):
        """A cached answer's response; else a function that stores the answer once generated (None: not
        cacheable). Exact for a deterministic request; semantic for a chat that asks for it."""
        namespace = self._namespace(request)
        if not namespace:
            return None
        raw = orjson.loads(request.state.raw)
        exact = deterministic(body)
        semantic = (completion.chat and self.embedder is not None and body.messages[-1].role == "user"
                    and body.choices == 1 and body.top_logprobs_wanted is None
                    and request.headers.get(SEMANTIC_HEADER, "").lower() == "on")
        if not (exact or semantic):
            return None
        key = canonical(raw)
        if exact and (stored := await self.cache.get(namespace, model.endpoint, key)) is not None:
            return self._replay(request, completion, body, stored, {HIT_HEADER: "hit"})
        vector = context = None
        if semantic:   # everything but the last user message's words is the context it must match exactly
            context = canonical({**raw, "messages": [*raw["messages"][:-1], {"role": "user"}]})
            vector = (await self.triton.embed(self.embedder, [body.messages[-1].text], self._tenancy(request)))[0]
            if found := await self.cache.similar(namespace, model.endpoint, context, vector):
                stored, score = found
                return self._replay(request, completion, body, stored,
                                    {HIT_HEADER: "semantic-hit", SIMILARITY_HEADER: f"{score:.4f}"})

        def store(totals: Totals) -> None:
            if totals.finish_reason not in FINISH_REASONS:   # a cancelled or failed generation is not an answer
                return
            answer = orjson.dumps(totals.answer())
            if exact:
                self._later(self.cache.put(namespace, model.endpoint, key, answer))
            if semantic:
                self._later(self.cache.remember(namespace, model.endpoint, context, vector, answer))

        return store

    def _replay(self, request: Request, completion: Completion, body, stored: bytes, headers: dict) -> Response:
        """A cached generation, rendered as this request asks (whole or streamed), with an id of its own."""
        totals = Totals(**orjson.loads(stored))
        if not body.stream:
            return json_response(completion.whole(totals), headers=self._generated(headers, 0))   # none generated
        slot = request.state.slot
        behind = self._behind_gateway()

        async def events():
            try:
                if completion.tools.active:
                    for chunk in tool_chunks(completion, 0, ToolStream(completion.tools), totals.text, [],
                                              totals.finish_reason):
                        yield sse(chunk)
                else:
                    yield sse(completion.chunk(totals.text, None, first=True))
                    yield sse(completion.chunk(None, totals.finish_reason))
                if completion.include_usage:
                    yield sse(completion.usage_chunk(totals))
                yield DONE
                if behind:
                    yield output_tokens_comment(0)   # a cached answer: nothing generated
            finally:
                slot.release()

        return StreamingResponse(events(), media_type="text/event-stream",
                                 headers={"cache-control": "no-cache", **headers})

    async def _events(self, slot: _Slot, model: ServedModel, completion: Completion, first, steps, totals: Totals,
                      store, phases: StreamPhases):
        try:
            totals.add(first)
            chunks = tool_events if completion.tools.active else _content_events
            async for chunk in chunks(completion, first, phases.steps(steps), totals):
                data = sse(chunk)
                phases.mark("relay")
                yield data
                phases.mark("write")
            if completion.include_usage:
                yield sse(completion.usage_chunk(totals))
            yield DONE
            if self._behind_gateway():
                yield output_tokens_comment(totals.completion_tokens)
            if store:
                store(totals)
        except APIError as error:   # never a silent cut: the stream ends with the error event
            self.metrics.errors.labels("chat" if completion.chat else "completions", str(error.status),
                                       error.type).inc()
            yield sse(error.body())
        finally:
            slot.release()
            self._count_tokens(model, totals)
            await steps.aclose()

    def _count_tokens(self, model: ServedModel, totals: Totals) -> None:
        self.metrics.tokens.labels(model.id, "prompt").inc(totals.prompt_tokens)
        self.metrics.tokens.labels(model.id, "completion").inc(totals.completion_tokens)

    def _tokenizer(self, name: str) -> tuple[ServedModel, ModelTokenizer]:
        """A generation model's own tokenizer (loaded once); 404 for a model without one."""
        model = self.models.get(name)
        if model is None or model.kind != "generation" or model.export is None:
            raise errors.model_not_found(name)
        if model.endpoint not in self._tokenizers:
            self._tokenizers[model.endpoint] = ModelTokenizer(model.export)
        return model, self._tokenizers[model.endpoint]

    async def tokenize(self, request: Request):
        body = await self._body(request, TokenizeRequest)
        model, tokenizer = self._tokenizer(body.model)
        if isinstance(body, TokenizeChatRequest):
            if body.add_generation_prompt and body.continue_final_message:
                raise errors.invalid("'continue_final_message' cannot be true with 'add_generation_prompt' true",
                                     "continue_final_message", "invalid_value")
            messages = engine_messages(body.messages)   # as the engine gets them (tool turns included)
            for i, m in enumerate(messages):
                check_text(m["content"], f"messages[{i}].content")
            text = tokenizer.render(messages, body.add_generation_prompt, body.continue_final_message)
        else:
            check_text(body.prompt, "prompt")
            text = body.prompt
        ids = await asyncio.to_thread(tokenizer.encode, text, body.add_special_tokens)   # a big text: off the loop
        return json_response({"count": len(ids), "max_model_len": model.context_length, "tokens": ids,
                              "token_strs": tokenizer.token_strs(ids) if body.return_token_strs else None}), model.id

    async def detokenize(self, request: Request):
        body: DetokenizeRequest = await self._body(request, DetokenizeRequest)
        model, tokenizer = self._tokenizer(body.model)
        check_ids(body.tokens, tokenizer.vocab_size)
        text = await asyncio.to_thread(tokenizer.decode, body.tokens)
        return json_response({"prompt": text}), model.id

    async def list_models(self, _request: Request):
        return json_response({"object": "list", "data": [m.card() for m in self.models.values()]}), "-"

    async def get_model(self, request: Request):
        name = request.path_params["model"]
        if name not in self.models:
            raise errors.model_not_found(name)
        return json_response(self.models[name].card()), name

    async def health(self, _request: Request) -> Response:
        endpoints = sorted({m.endpoint for m in self.models.values()})
        waiting = await self.triton.not_ready(endpoints) if self.triton else ["the API itself"]
        if not waiting:
            return json_response({"status": "ok", "models": endpoints})
        return error_response(APIError(503, f"not ready: {', '.join(waiting)}", "server_error", None, "not_ready",
                                       errors.RETRY_AFTER_S))

    async def metrics_route(self, _request: Request) -> Response:
        body, content_type = self.metrics.exposition()
        return Response(body, media_type=content_type)

    # -- errors outside the routes' own

    async def http_error(self, _request: Request, exc: HTTPException) -> Response:
        kinds = {404: ("Unknown route (this server answers /v1/embeddings, /v1/chat/completions, "
                       "/v1/completions, /v1/models, /tokenize, /detokenize, /health, /metrics)", "not_found"),
                 405: ("Method not allowed on this route", "method_not_allowed")}
        message, code = kinds.get(exc.status_code, (str(exc.detail), None))
        return error_response(APIError(exc.status_code, message, "invalid_request_error", None, code))

    async def server_error(self, request: Request, exc: Exception) -> Response:
        log.exception(f"{request.method} {request.url.path} failed")   # the traceback stays in the log
        return error_response(INTERNAL)


INTERNAL = APIError(500, "The server failed the request", "server_error", None, "internal_error")


class _Slot:
    """A request's place among those in flight, and its latency: released once, when its answer is complete
    (a stream's when the stream ends)."""

    def __init__(self, api: OpenAIAPI, route: str, counted: bool = True):
        self.api, self.route, self.counted, self.started = api, route, counted, time.perf_counter()
        self.held = self.released = False

    def refuse_when_full(self) -> None:
        if self.counted and self.api.in_flight >= self.api.config.max_in_flight:
            raise errors.overloaded(self.api.config.max_in_flight)

    def take(self) -> None:
        """Counted in flight from now (its body is whole); 429 when the others fill the cap."""
        if not self.counted or self.held:
            return
        self.refuse_when_full()
        api = self.api
        api.in_flight += 1
        api.metrics.in_flight.inc()
        self.held = True

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.held:
            self.api.in_flight -= 1
            self.api.metrics.in_flight.dec()
        self.api.metrics.latency.labels(self.route).observe(time.perf_counter() - self.started)


async def _content_events(completion: Completion, first, steps, totals: Totals):
    """A stream's chunks, text deltas as content (each choice's first chunk with its role)."""
    for i in range(completion.n):
        yield completion.chunk(first.text_of(i), None, first=True, index=i, logprobs=first.logprobs_of(i))
    async for step in steps:
        totals.add(step)
        for i in range(completion.n):
            text, logprobs = step.text_of(i), step.logprobs_of(i)
            if text or logprobs:
                yield completion.chunk(text, index=i, logprobs=logprobs)
    for i in range(completion.n):
        yield completion.chunk(None, totals.of(i).finish_reason, index=i)


def _check_texts(model: ServedModel, texts: list[str]) -> None:
    """The model's own per-text limits, checked before this process tokenizes anything (same 400 as Triton's)."""
    for i, text in enumerate(texts):
        if model.max_text_chars is not None and len(text) > model.max_text_chars:
            raise errors.invalid(f"input[{i}] is {len(text)} characters, over the limit of {model.max_text_chars}",
                                 "input", "input_too_long")
        if model.max_text_bytes is not None and len(text) * 4 > model.max_text_bytes:
            size = len(text.encode("utf-8", errors="surrogatepass"))
            if size > model.max_text_bytes:
                raise errors.invalid(f"input[{i}] is {size} bytes, over the limit of {model.max_text_bytes}",
                                     "input", "input_too_long")
        if not text.isascii():
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise errors.invalid(f"input[{i}] is not valid Unicode text (lone surrogate at {exc.start})",
                                     "input", "invalid_value") from None
