"""The OpenAI-compatible API (hotpath.openai_api) as a process beside the session's real tritonserver, driven
by real clients: the official `openai` SDK (sync and async; embeddings in base64, its default, and float)
and LangChain's OpenAIEmbeddings, plus raw HTTP for what no SDK sends (bad bodies, oversize bodies).
Embeddings through the API must equal the gRPC endpoint's on the suite's multilingual texts."""

from __future__ import annotations

import asyncio
import concurrent.futures
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from urllib.parse import urlparse

import numpy as np
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from transformers import AutoTokenizer

from hotpath.client import EmbeddingClient
from hotpath.exporters.parity_corpus import multilingual_corpus
from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.openai_door import openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.openai_api.schemas import MAX_EMBEDDING_INPUTS
from hotpath.server.ports import free_ports
from hotpath.specs.repository import Repository

MODEL = "text_embedding"
ALIAS = "all-minilm-l6-v2"
TEXTS = ["hello", "The quick brown fox jumps over the lazy dog.", "Низкая задержка важнее средней пропускной способности.",
         "低延迟推理服务器需要动态批处理。", "مرحبا بالعالم", "emoji only 🚀🔥🎉", "",
         " ".join(["a very long document that goes well past the model's maximum sequence length"] * 30)]
MULTILINGUAL = multilingual_corpus(per_locale=3, random_strings=300, seed=7)
MAX_BODY = 1 << 20


def _contract_generation() -> str | None:
    """Why the chat tests cannot run against this repository's text_generation, or None when they can."""
    inputs = {i.name for i in Repository().endpoint("text_generation").inputs}
    missing = {"text_input", "messages"} - inputs
    return (f"text_generation has no {sorted(missing)} input(s) yet (today: {sorted(inputs)}); chat/completions map "
            "onto the vLLM-backend tensors the engine issue adds") if missing else None


@pytest.fixture(scope="module")
def api(triton):
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository, aliases=[f"{ALIAS}={MODEL}"],
                      extra_args=["--max-body-bytes", str(MAX_BODY)]) as server:
        yield server


@pytest.fixture(scope="module")
def sdk(api):
    with openai.OpenAI(base_url=api.base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.fixture(scope="module")
def grpc_embed(grpc_url):
    with EmbeddingClient(grpc_url) as client:
        yield client.embed


def _cosines(a, b) -> np.ndarray:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _post(api: OpenAIServer, path: str, body: bytes, headers: dict | None = None) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=60)
    try:
        conn.request("POST", path, body, {"content-type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read() or b"null")
    finally:
        conn.close()


def _metric(api: OpenAIServer, name: str, **labels) -> float:
    """The sum of a sample of the API's /metrics over the series whose labels include `labels`."""
    with urllib.request.urlopen(f"http://{api.host}:{api.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name and labels.items() <= sample.labels.items())


# -- embeddings

def test_sdk_embeddings_equal_grpc_on_multilingual_texts_base64_and_float(sdk, grpc_embed):
    texts = TEXTS + MULTILINGUAL
    expected = grpc_embed(texts)
    as_base64 = sdk.embeddings.create(model=MODEL, input=texts)   # the SDK asks for base64 by default
    as_float = sdk.embeddings.create(model=MODEL, input=texts, encoding_format="float")
    for answer in (as_base64, as_float):
        assert [d.index for d in answer.data] == list(range(len(texts)))
        got = np.array([d.embedding for d in answer.data])
        assert got.shape == expected.shape
        assert _cosines(got, expected).min() >= 0.9999
    assert as_base64.model == MODEL and as_base64.usage.prompt_tokens == as_float.usage.prompt_tokens


def test_usage_is_the_models_own_token_count(sdk):
    reference = AutoTokenizer.from_pretrained(str(minilm_dir()))
    expected = sum(len(ids) for ids in reference(TEXTS, truncation=True, max_length=256)["input_ids"])
    answer = sdk.embeddings.create(model=MODEL, input=TEXTS, encoding_format="float")
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == expected
    one = sdk.embeddings.create(model=MODEL, input=TEXTS[1])
    assert one.usage.prompt_tokens == len(reference(TEXTS[1])["input_ids"])


def test_async_sdk_and_alias(api, grpc_embed):
    async def run():
        async with openai.AsyncOpenAI(base_url=api.base_url, api_key="unused", max_retries=0) as client:
            return await asyncio.gather(*(client.embeddings.create(model=name, input=TEXTS[:4])
                                          for name in (MODEL, ALIAS, MODEL)))

    answers = asyncio.run(run())
    expected = grpc_embed(TEXTS[:4])
    for answer in answers:
        assert _cosines([d.embedding for d in answer.data], expected).min() >= 0.9999
    assert answers[1].model == ALIAS


def test_langchain_openai_embeddings(api, grpc_embed):
    from langchain_openai import OpenAIEmbeddings

    # check_embedding_ctx_length=False: otherwise LangChain tokenizes with tiktoken (whose encodings are
    # downloaded) and sends token ids, which this API refuses (they are not this model's tokens).
    embeddings = OpenAIEmbeddings(model=MODEL, base_url=api.base_url, api_key="unused",
                                  check_embedding_ctx_length=False, max_retries=0, chunk_size=64)
    texts = MULTILINGUAL[:100]
    documents = embeddings.embed_documents(texts)
    query = embeddings.embed_query(TEXTS[2])
    assert _cosines(documents, grpc_embed(texts)).min() >= 0.9999
    assert _cosines([query], grpc_embed([TEXTS[2]]))[0] >= 0.9999


def test_dimensions_rule(sdk):
    assert len(sdk.embeddings.create(model=MODEL, input="x", dimensions=384, encoding_format="float")
               .data[0].embedding) == 384
    with pytest.raises(openai.BadRequestError) as err:
        sdk.embeddings.create(model=MODEL, input="x", dimensions=128)
    assert err.value.body["param"] == "dimensions"


def test_batch_limit_and_token_arrays_are_refused_naming_input(sdk):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.embeddings.create(model=MODEL, input=["x"] * (MAX_EMBEDDING_INPUTS + 1))
    assert err.value.body["param"] == "input"
    with pytest.raises(openai.BadRequestError) as err:
        sdk.embeddings.create(model=MODEL, input=[[101, 7592, 102]])
    assert err.value.body["param"].startswith("input")
    with pytest.raises(openai.BadRequestError) as err:   # the model's own per-text limit, before tokenizing here
        sdk.embeddings.create(model=MODEL, input=["ok", "x" * 9000])
    assert err.value.body["param"] == "input" and "input[1]" in err.value.message


def test_typed_errors_not_found(sdk, api):
    with pytest.raises(openai.NotFoundError) as err:
        sdk.embeddings.create(model="no-such-model", input="x")
    assert err.value.body == {"message": err.value.body["message"], "type": "invalid_request_error",
                              "param": "model", "code": "model_not_found"}
    status, _, body = _post(api, "/v1/nowhere", b"{}")
    assert status == 404 and set(body["error"]) == {"message", "type", "param", "code"}


def test_unknown_field_is_refused_naming_it(sdk):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.embeddings.create(model=MODEL, input="x", extra_body={"truncate_prompt_tokens": 5})
    assert err.value.body["param"] == "truncate_prompt_tokens"


def test_rate_limit_error_at_capacity(triton):
    """One request holds the only slot (a whole body of 512 long texts, being embedded: seconds); the next gets
    429 + Retry-After. A body still arriving holds none (tests/integration/test_openai_slow_clients.py)."""
    big = json.dumps({"model": MODEL, "input": [f"text {i} " + "word " * 100 for i in range(512)]})
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository, extra_args=["--max-in-flight", "1"]) as api:
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(_post, api, "/v1/embeddings", big.encode())
            while _metric(api, "hotpath_openai_requests_in_flight") < 1:
                assert not held.done(), held.result()[:2]
                time.sleep(0.01)
            with openai.OpenAI(base_url=api.base_url, api_key="unused", max_retries=0) as client:
                with pytest.raises(openai.RateLimitError) as err:
                    client.embeddings.create(model=MODEL, input="x")
            assert err.value.response.headers["retry-after"] == "1"
            assert err.value.body["code"] == "server_overloaded"
            assert held.result()[0] == 200
        while _metric(api, "hotpath_openai_requests_in_flight") > 0:   # the slot comes back
            time.sleep(0.05)
        with openai.OpenAI(base_url=api.base_url, api_key="unused", max_retries=0) as client:
            assert len(client.embeddings.create(model=MODEL, input="x").data) == 1


def test_authentication_error_with_a_key(triton):
    env = {**os.environ, "HOTPATH_OPENAI_API_KEY": "k" * 40}
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository, env=env) as api:
        with openai.OpenAI(base_url=api.base_url, api_key="wrong", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                client.embeddings.create(model=MODEL, input="x")
        with openai.OpenAI(base_url=api.base_url, api_key="k" * 40, max_retries=0) as client:
            assert len(client.embeddings.create(model=MODEL, input="x").data) == 1


# -- models, health, metrics

def test_models_health_and_metrics(sdk, api):
    models = {m.id: m for m in sdk.models.list()}
    assert {MODEL, ALIAS, "text_embedding_exact"} <= set(models)
    assert models[MODEL].owned_by == "hotpath" and models[MODEL].model_extra["context_length"] == 256
    assert sdk.models.retrieve(ALIAS).id == ALIAS
    with pytest.raises(openai.NotFoundError):
        sdk.models.retrieve("image_classification")   # not an embedding or generation endpoint
    assert api.health() == (200, {"status": "ok", "models": [MODEL, "text_embedding_exact"]})
    before = _metric(api, "hotpath_openai_requests_total", route="embeddings", code="404")
    with pytest.raises(openai.NotFoundError):
        sdk.embeddings.create(model="missing", input="x")
    assert _metric(api, "hotpath_openai_requests_total", route="embeddings", code="404") == before + 1
    assert _metric(api, "hotpath_openai_tokens_total", model=MODEL, kind="prompt") > 0
    assert _metric(api, "hotpath_openai_request_duration_seconds_count", route="embeddings") > 0


# -- bad bodies: each a 4xx in the OpenAI shape, the server alive after all of them

DEEP = b"[" * 100_000 + b"]" * 100_000
BAD_BODIES = {
    "not json": b"{model: text_embedding",
    "empty body": b"",
    "array body": b"[1, 2]",
    "json depth 100000": DEEP,
    "deep inside a field": b'{"model": "text_embedding", "input": ' + DEEP + b"}",
    "input a number": b'{"model": "text_embedding", "input": 5}',
    "input null": b'{"model": "text_embedding", "input": null}',
    "input empty list": b'{"model": "text_embedding", "input": []}',
    "input mixed list": b'{"model": "text_embedding", "input": ["a", 1]}',
    "model a number": b'{"model": 7, "input": "a"}',
    "model missing": b'{"input": "a"}',
    "huge int dimensions": b'{"model": "text_embedding", "input": "a", "dimensions": ' + b"9" * 5000 + b"}",
    "float dimensions": b'{"model": "text_embedding", "input": "a", "dimensions": 384.0}',
    "bool dimensions": b'{"model": "text_embedding", "input": "a", "dimensions": true}',
    "unknown encoding": b'{"model": "text_embedding", "input": "a", "encoding_format": "int8"}',
    "unknown field": b'{"model": "text_embedding", "input": "a", "extra": {"x": [1, 2, 3]}}',
    "duplicate-ish key case": b'{"model": "text_embedding", "Input": "a"}',
    "lone surrogate": b'{"model": "text_embedding", "input": "\\ud800"}',
    "invalid utf-8": b'{"model": "text_embedding", "input": "\xff\xfe"}',
    "NaN literal": b'{"model": "text_embedding", "input": "a", "dimensions": NaN}',
    "chat: huge max_tokens": b'{"model": "text_generation", "messages": [{"role": "user", "content": "hi"}], '
                             b'"max_tokens": ' + b"9" * 400 + b"}",
    "chat: infinite temperature": b'{"model": "text_generation", "messages": [{"role": "user", "content": "hi"}], '
                                  b'"temperature": 1e400}',
    "chat: tools": b'{"model": "text_generation", "messages": [{"role": "user", "content": "hi"}], "tools": [{}]}',
    "chat: bad role": b'{"model": "text_generation", "messages": [{"role": "tool", "content": "hi"}]}',
    "chat: no messages": b'{"model": "text_generation", "messages": []}',
    "chat: image part": b'{"model": "text_generation", "messages": [{"role": "user", "content": '
                        b'[{"type": "image_url", "image_url": {"url": "http://x"}}]}]}',
    "completions: token prompt": b'{"model": "text_generation", "prompt": [1, 2, 3]}',
    "completions: logprobs": b'{"model": "text_generation", "prompt": "hi", "logprobs": 3}',
}


@pytest.mark.parametrize("name", sorted(BAD_BODIES))
def test_bad_bodies_get_4xx_in_openai_shape(api, name):
    body = BAD_BODIES[name]
    path = "/v1/chat/completions" if name.startswith("chat") else \
        "/v1/completions" if name.startswith("completions") else "/v1/embeddings"
    status, _, answer = _post(api, path, body)
    assert 400 <= status < 500, (status, answer)
    assert set(answer["error"]) == {"message", "type", "param", "code"}
    assert "Traceback" not in answer["error"]["message"] and "/work" not in answer["error"]["message"]
    assert api.health()[0] == 200


def test_oversize_bodies_get_413_and_the_server_stays(api, sdk):
    big = json.dumps({"model": MODEL, "input": ["x" * 1000] * (MAX_BODY // 1000 + 10)}).encode()
    status, _, answer = _post(api, "/v1/embeddings", big)
    assert status == 413 and answer["error"]["code"] == "request_too_large"
    # Chunked, without Content-Length: refused once the bytes read pass the bound.
    conn = http.client.HTTPConnection(api.host, api.port, timeout=60)
    conn.request("POST", "/v1/embeddings", iter([big[i:i + 65536] for i in range(0, len(big), 65536)]),
                 {"content-type": "application/json"}, encode_chunked=True)
    response = conn.getresponse()
    assert response.status == 413
    conn.close()
    assert len(sdk.embeddings.create(model=MODEL, input="still here").data) == 1


# -- through the tenant gateway

def test_through_the_tenant_gateway(triton, api, grpc_embed):
    """The tenant's token is the API key; refusals are OpenAI errors the SDK types; the budget holds."""
    token, slow = new_token(), new_token()
    tenants = (Tenant("acme", token), Tenant("slow", slow, requests_per_s=1, burst=0))
    grpc_port, http_port, openai_port = free_ports(3)
    settings = TenantGatewaySettings(grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), tenants,
                                     max_body_bytes=MAX_BODY // 2, openai_port=openai_port,
                                     openai_upstreams=(f"{api.host}:{api.port}",),
                                     openai=openai_config(aliases={ALIAS: MODEL}))
    base = f"http://127.0.0.1:{openai_port}/v1"
    with TenantGateway(settings):
        with openai.OpenAI(base_url=base, api_key=token, max_retries=0) as client:
            answer = client.embeddings.create(model=ALIAS, input=TEXTS[:3])
            assert _cosines([d.embedding for d in answer.data], grpc_embed(TEXTS[:3])).min() >= 0.9999
            assert {MODEL, ALIAS} <= {m.id for m in client.models.list()}
            with pytest.raises(openai.NotFoundError) as err:
                client.embeddings.create(model="text_encoder", input="x")   # an internal step: not served
            assert err.value.body["param"] == "model"
            with pytest.raises(openai.BadRequestError):   # the API's own strict check, behind the gateway
                client.embeddings.create(model=MODEL, input="x", dimensions=3)
            status, _, body = _post_to(base, "/embeddings", json.dumps(
                {"model": MODEL, "input": ["x" * 1000] * (MAX_BODY // 2000 + 10)}).encode(), token)
            assert status == 413 and body["error"]["code"] == "request_too_large"
        with openai.OpenAI(base_url=base, api_key="not-a-tenant-token", max_retries=0) as client:
            with pytest.raises(openai.AuthenticationError):
                client.embeddings.create(model=MODEL, input="x")
        with openai.OpenAI(base_url=base, api_key=slow, max_retries=0) as client:
            refused = None
            for _ in range(200):   # 1 request/s, no burst: refused long before 200 calls
                try:
                    client.embeddings.create(model=MODEL, input="x")
                except openai.RateLimitError as exc:
                    refused = exc
                    break
            assert refused is not None and int(refused.response.headers["retry-after"]) >= 1
            assert refused.body["type"] == "rate_limit_error"


def _post_to(base: str, path: str, body: bytes, token: str) -> tuple[int, dict, dict]:
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    try:
        conn.request("POST", url.path + path, body, {"content-type": "application/json",
                                                     "authorization": f"Bearer {token}"})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read() or b"null")
    finally:
        conn.close()


# -- lifetime

def test_api_never_outlives_its_parent(triton):
    """The process that started the API (as `hotpath serve` does) is SIGKILLed: the API exits too."""
    port = free_ports(1)[0]
    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from hotpath.openai_api.openai_server import OpenAIServer\n"
        f"api = OpenAIServer({triton.grpc_url!r}, {port}, {str(triton.repository)!r}).start()\n"
        "print(api.process.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        api_pid = int(parent.stdout.readline())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(api_pid):
            time.sleep(0.1)
        assert not _alive(api_pid)
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# -- chat and text completions (text_generation with the vLLM-backend tensors)

chat = pytest.mark.skipif(_contract_generation() is not None, reason=str(_contract_generation()))
GEN = "text_generation"
PROMPT = [{"role": "system", "content": "You answer in one short sentence."},
          {"role": "user", "content": "What is the capital of France?"}]


@chat
def test_chat_greedy_streamed_equals_not_streamed(chat_sdk):
    sdk = chat_sdk
    whole = sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=24, seed=1)
    chunks = list(sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=24, seed=1,
                                              stream=True, stream_options={"include_usage": True}))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content and text
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens > 0
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason


@chat
def test_a_streamed_chat_is_broken_down_into_phases_that_tile_it(chat_sdk, chat_api):
    """The phase histogram (hotpath.openai_api.stream_phases): one receive and one first_response per stream,
    a relay and a write per chunk, a triton wait per response after the first; the phases sum to at most
    the request's own latency."""
    phase = "hotpath_openai_generation_phase_seconds"

    def counts():
        return {p: (_metric(chat_api, f"{phase}_count", phase=p), _metric(chat_api, f"{phase}_sum", phase=p))
                for p in ("receive", "first_response", "relay", "write", "triton")}

    def latency():
        return (_metric(chat_api, "hotpath_openai_request_duration_seconds_count", route="chat"),
                _metric(chat_api, "hotpath_openai_request_duration_seconds_sum", route="chat"))

    before, (requests, spent) = counts(), latency()
    chunks = list(chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=12,
                                                   stream=True))
    deadline = time.monotonic() + 10
    while latency()[0] == requests and time.monotonic() < deadline:   # observed once the stream's task ends
        time.sleep(0.05)
    after, took = counts(), latency()[1] - spent
    gained = {p: (after[p][0] - before[p][0], after[p][1] - before[p][1]) for p in after}
    assert gained["receive"][0] == gained["first_response"][0] == 1
    content_chunks = len(chunks)   # the role's chunk, a delta per response after it, the finish chunk
    assert gained["relay"][0] == gained["write"][0] == content_chunks
    assert 1 <= gained["triton"][0] <= content_chunks - 1
    assert all(seconds >= 0 for _, seconds in gained.values())
    assert sum(seconds for _, seconds in gained.values()) <= took + 1e-3


@chat
def test_chat_length_and_stop(chat_sdk):
    sdk = chat_sdk
    short = sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_completion_tokens=2)
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    full = sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=24)
    word = full.choices[0].message.content.split()[1]
    stopped = sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=24, stop=[word])
    assert word not in stopped.choices[0].message.content and stopped.choices[0].finish_reason == "stop"


@chat
def test_completions_and_async_stream(chat_api):
    api = chat_api
    async def run():
        async with openai.AsyncOpenAI(base_url=api.base_url, api_key="unused", max_retries=0) as client:
            whole = await client.completions.create(model=GEN, prompt="Once upon a time", temperature=0, max_tokens=12)
            stream = await client.completions.create(model=GEN, prompt="Once upon a time", temperature=0,
                                                     max_tokens=12, stream=True)
            return whole, "".join([c.choices[0].text async for c in stream if c.choices])

    whole, streamed = asyncio.run(run())
    assert whole.choices[0].text == streamed and whole.usage.completion_tokens > 0


@chat
def test_chat_refusals_are_typed(chat_sdk):
    sdk = chat_sdk
    for field, value in (("n", 9), ("top_logprobs", 21), ("logit_bias", {"1": 5})):   # n, logprobs: out of range
        with pytest.raises(openai.BadRequestError) as err:
            sdk.chat.completions.create(model=GEN, messages=PROMPT, **{field: value})
        assert err.value.body["param"] == field
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model=GEN, messages=PROMPT, response_format={"type": "xml"})
    assert err.value.body["param"] == "response_format.type"
    with pytest.raises(openai.BadRequestError) as err:   # context overflow names the messages
        sdk.chat.completions.create(model=GEN, messages=[{"role": "user", "content": "word " * 100_000}])
    assert err.value.body["param"] == "messages"


@chat
def test_chat_response_format_json_schema_is_enforced(chat_sdk):
    """response_format json_schema reaches vLLM as structured_outputs: greedy output that is the schema's JSON."""
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    answer = chat_sdk.chat.completions.create(
        model=GEN, temperature=0, max_tokens=48,
        messages=[{"role": "user", "content": "Describe a person named Alice who is 30 years old."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema, "strict": True}})
    content = answer.choices[0].message.content
    assert answer.choices[0].finish_reason == "stop", content
    person = json.loads(content)
    assert set(person) >= {"name", "age"} and isinstance(person["name"], str), person
    assert isinstance(person["age"], int) and not isinstance(person["age"], bool), person
