"""The OpenAI API's answer cache (hotpath.openai_api.answer_cache) across two API replicas sharing one real
redis-server, beside the session's real tritonservers: an answer computed by replica A is a hit on replica B
(embeddings byte for byte; a greedy chat's text, streamed or not), a caller in another namespace gets its own,
a chat that samples is never cached, the semantic cache answers a paraphrase and not a near miss, and a
Redis killed and restarted costs misses, never errors."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import time
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hotpath.openai_api.answer_cache import DEFAULT_SEMANTIC_THRESHOLD
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.server.ports import free_ports
from hotpath.shared_state.cache_key import HIT_HEADER, NAMESPACE_HEADER
from hotpath.shared_state.server import LocalRedis

MODEL, GEN = "text_embedding", "text_generation"
SEMANTIC = {"x-hotpath-semantic-cache": "on"}


@pytest.fixture(scope="module")
def redis():
    with LocalRedis() as server:
        yield server


@contextlib.contextmanager
def _replicas(triton, redis):
    """Two OpenAI API replicas on one Triton, sharing one Redis."""
    env = {**os.environ, "HOTPATH_REDIS_URL": f"redis://127.0.0.1:{redis.port}/0?timeout_ms=1000"}
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository, env=env))
               for _ in range(2)]


@pytest.fixture(scope="module")
def apis(triton, redis):
    with _replicas(triton, redis) as servers:
        yield servers


@pytest.fixture(scope="module")
def chat_triton(built_repository, tmp_path_factory):
    """text_generation (the suite's test settings) beside text_embedding, as production serves them: the
    semantic cache embeds on the server it generates on."""
    from conftest import GENERATION_TEST_PARAMETERS, _serve, generation_repository

    from hotpath.server.subset import linked

    target = generation_repository(tmp_path_factory.mktemp("chat-cache"), built_repository,
                                   **GENERATION_TEST_PARAMETERS)
    server = _serve(linked(("text_embedding", "sentence_embedder"), target, built_repository), log=lambda m: None)
    server.start(timeout=600)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def chat_apis(chat_triton, redis):
    with _replicas(chat_triton, redis) as servers:
        yield servers


def _post(api, path: str, body: dict, headers: dict | None = None) -> tuple[int, dict, bytes]:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=120)
    try:
        conn.request("POST", path, json.dumps(body).encode(), {"content-type": "application/json", **(headers or {})})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _stored(api, kind: str) -> float:
    """The API's count of answers it stored in the cache (its /metrics)."""
    with urllib.request.urlopen(f"http://{api.host}:{api.port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "hotpath_openai_cache_total" and sample.labels == {"kind": kind, "result": "store"})


def _until(check, what, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not (result := check()):
        assert time.monotonic() < deadline, f"waited {timeout_s} s for: {what}"
        time.sleep(0.05)
    return result


def test_embeddings_from_replica_a_are_a_hit_on_replica_b(apis):
    a, b = apis
    body = {"model": MODEL, "input": [f"cache me {time.time_ns()}", "Низкая задержка 🚀"]}
    status, headers, first = _post(a, "/v1/embeddings", body)
    assert status == 200 and headers[HIT_HEADER.lower()] == "miss"
    status, headers, second = _until(lambda: (r := _post(b, "/v1/embeddings", body))[1][HIT_HEADER.lower()] == "hit"
                                     and r, "replica A's answer stored and found by replica B")
    assert status == 200 and second == first, "a hit is the first answer, byte for byte"
    status, headers, fresh = _post(b, "/v1/embeddings", body, {NAMESPACE_HEADER: "another-tenant"})
    assert status == 200 and headers[HIT_HEADER.lower()] == "miss"
    assert json.loads(fresh)["data"] == json.loads(first)["data"]   # computed again: the same vectors
    refused = {"model": MODEL, "input": "x", "dimensions": 3}   # not a Matryoshka model: 400
    status, headers, error = _post(a, "/v1/embeddings", refused)
    status_again, headers_again, _ = _post(b, "/v1/embeddings", refused)
    assert status == status_again == 400 and HIT_HEADER.lower() not in headers_again, "errors are never cached"


def test_a_redis_killed_and_restarted_costs_misses_not_errors(apis, redis):
    a, _ = apis
    redis.kill()
    try:
        body = {"model": MODEL, "input": f"redis is down {time.time_ns()}"}
        for _ in range(2):
            status, headers, answer = _post(a, "/v1/embeddings", body)
            assert status == 200 and headers[HIT_HEADER.lower()] == "miss" and json.loads(answer)["data"]
    finally:
        redis.start()
    _until(lambda: _post(a, "/v1/embeddings", body)[1][HIT_HEADER.lower()] == "hit",
           "the API uses Redis again after its restart")


@pytest.mark.timeout(1800)   # the first one loads vLLM: minutes on a busy 2-core host
def test_greedy_chat_is_shared_and_sampled_chat_is_not(chat_apis):
    a, b = chat_apis
    messages = [{"role": "system", "content": "You answer in one short sentence."},
                {"role": "user", "content": f"Name a colour. ({time.time_ns()})"}]
    body = {"model": GEN, "messages": messages, "temperature": 0, "max_tokens": 12}
    status, headers, first = _post(a, "/v1/chat/completions", body)
    assert status == 200 and headers[HIT_HEADER.lower()] == "miss"
    text = json.loads(first)["choices"][0]["message"]["content"]
    with openai.OpenAI(base_url=b.base_url, api_key="unused", max_retries=0) as sdk:
        def streamed_hit():
            raw = sdk.chat.completions.with_raw_response.create(model=GEN, messages=messages, temperature=0,
                                                                max_tokens=12, stream=True)
            chunks = list(raw.parse())
            return raw.headers.get(HIT_HEADER) == "hit" and chunks

        chunks = _until(streamed_hit, "replica A's greedy answer served to replica B's streamed request")
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    sampled = {**body, "temperature": 0.8}
    for _ in range(2):
        status, headers, _ = _post(b, "/v1/chat/completions", sampled)
        assert status == 200 and HIT_HEADER.lower() not in headers


@pytest.mark.timeout(1800)
def test_semantic_cache_answers_a_paraphrase_not_a_near_miss(chat_apis):
    a, b = chat_apis
    system = {"role": "system", "content": f"Answer briefly. ({time.time_ns()})"}   # a context of its own
    ask = {"model": GEN, "temperature": 0.7, "max_tokens": 12}

    def chat(api, question, headers=SEMANTIC):
        return _post(api, "/v1/chat/completions", {**ask, "messages": [system, {"role": "user", "content": question}]},
                     headers)

    stores = _stored(a, "semantic")
    status, headers, first = chat(a, "What is the capital of France?")
    assert status == 200 and headers[HIT_HEADER.lower()] == "miss"
    text = json.loads(first)["choices"][0]["message"]["content"]
    _until(lambda: _stored(a, "semantic") > stores, "replica A stored its answer")
    # another spelling of the same prompt (the uncased encoder's view): sampled, so only a hit gives A's text
    status, headers, again = chat(b, "WHAT is the capital of  FRANCE?")
    assert headers.get(HIT_HEADER.lower()) == "semantic-hit", headers
    assert json.loads(again)["choices"][0]["message"]["content"] == text
    assert float(headers["x-hotpath-cache-similarity"]) >= DEFAULT_SEMANTIC_THRESHOLD
    status, headers, _ = chat(b, "What is the capital of Germany?")
    assert status == 200 and headers[HIT_HEADER.lower()] == "miss"
    status, headers, _ = chat(b, "What is the capital of France?", headers={})   # not asked for: computed
    assert status == 200 and HIT_HEADER.lower() not in headers
