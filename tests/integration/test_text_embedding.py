"""text_embedding (one step: tokenizer + encoder in one Python model) and text_embedding_exact (Python
tokenizer -> encoder ensemble) served by a real tritonserver vs sentence-transformers in-process, on a
multilingual corpus (every Faker locale, random text over all of Unicode, edge cases) other than the
build's sample."""

import subprocess
import sys
import threading

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from sentence_transformers import SentenceTransformer

from hotpath.client import ClientError, EmbeddingClient, text_input
from hotpath.exporters.parity_corpus import multilingual_corpus, script_of
from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.server.admin import admin_headers

TEXTS = [
    "hello",
    "The quick brown fox jumps over the lazy dog.",
    "Низкая задержка важнее средней пропускной способности.",
    "低延迟推理服务器需要动态批处理。",
    "مرحبا بالعالم",
    "नमस्ते दुनिया",
    "emoji only 🚀🔥🎉",
    "",
    "   leading and trailing spaces   ",
    " ".join(["a very long document that goes well past the model's maximum sequence length"] * 30),
]


@pytest.fixture(scope="module")
def reference():
    model = SentenceTransformer(str(minilm_dir()), device="cpu")
    assert model.max_seq_length == 256
    return model


# model name -> the model whose dynamic batcher sees the requests first
ENDPOINTS = {"text_embedding": "sentence_embedder", "text_embedding_exact": "tokenizer"}
# Another seed and size than the build's parity check: texts the build never saw.
MULTILINGUAL = multilingual_corpus(per_locale=3, random_strings=300, seed=7)


@pytest.fixture(params=sorted(ENDPOINTS))
def endpoint(request):
    return request.param


@pytest.fixture()
def client(grpc_url, endpoint):
    with EmbeddingClient(grpc_url, model=endpoint) as c:
        yield c


def test_served_embeddings_match_sentence_transformers(client, reference):
    texts = TEXTS + MULTILINGUAL
    assert len(texts) > 600
    got = client.embed(texts)
    want = reference.encode(texts, normalize_embeddings=True, convert_to_numpy=True)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    worst = int(np.argmin(cosine))
    low = [(script_of(t), t[:30], round(float(c), 6)) for t, c in zip(texts, cosine) if c < 0.9999]
    assert not low, f"{len(low)} of {len(texts)} texts below cosine 0.9999, e.g. {low[:5]} (worst {worst})"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_batching_many_texts_keeps_order(client):
    texts = [f"sentence number {i} about topic {i % 7}" for i in range(70)]  # > max_batch_size: 3 requests
    together = client.embed(texts)
    alone = np.stack([client.embed([t])[0] for t in texts[::10]])
    np.testing.assert_allclose(together[::10], alone, atol=1e-5)


def _infer(url, inputs, model="text_embedding"):
    with grpcclient.InferenceServerClient(url) as c:
        return c.infer(model, inputs)


def test_non_utf8_text_gets_a_clear_error_and_server_keeps_serving(client):
    with pytest.raises(ClientError, match="not valid UTF-8"):
        client.embed([b"fine", b"\xff\xfe\xfd broken"])
    assert client.embed(["still serving"]).shape == (1, 384)


@pytest.mark.parametrize("make_input,message", [
    (lambda: _tensor("TEXT", np.array([[b"a", b"b"]], dtype=object), "BYTES"), "shape"),
    (lambda: _tensor("TEXT", np.array([[1]], dtype=np.int32), "INT32"), "data-type"),
    (lambda: _tensor("WRONG_NAME", np.array([[b"a"]], dtype=object), "BYTES"), "WRONG_NAME"),
], ids=["wrong-shape", "wrong-dtype", "unknown-input"])
def test_malformed_requests_are_rejected_clearly(grpc_url, client, endpoint, make_input, message):
    with pytest.raises(Exception) as info:
        _infer(grpc_url, [make_input()], endpoint)
    assert message in str(info.value)
    assert client.embed(["still serving"]).shape == (1, 384)


def _tensor(name, data, dtype):
    t = grpcclient.InferInput(name, list(data.shape), dtype)
    t.set_data_from_numpy(data)
    return t


def _batched_executions(url, model):
    with grpcclient.InferenceServerClient(url) as c:
        stats = c.get_inference_statistics(model, as_json=True, headers=admin_headers())["model_stats"][0]
    return sum(int(b["compute_infer"]["count"]) for b in stats.get("batch_stats", []) if int(b["batch_size"]) > 1)


def test_bad_request_in_a_dynamic_batch_fails_alone(grpc_url, reference, endpoint):
    batcher = ENDPOINTS[endpoint]
    c = grpcclient.InferenceServerClient(grpc_url)
    # Until the first step has run a multi-request batch during a burst: a busy host may serve a burst one by
    # one (each request finds an instance idle), so the burst is repeated, its inputs built before it, with
    # new texts each time (the response cache would answer repeated ones without the batcher).
    for attempt in range(10):
        good_texts = [f"concurrent request {attempt}.{i}" for i in range(15)]
        payloads = [t.encode() for t in good_texts[:7]] + [b"\xc3\x28 bad"] + [t.encode() for t in good_texts[7:]]
        before = _batched_executions(grpc_url, batcher)
        results, done = {}, threading.Semaphore(0)

        def callback(i, results=results, done=done):
            def _cb(result, error):
                results[i] = (result, error)
                done.release()
            return _cb

        inputs = [[text_input("TEXT", [payload])] for payload in payloads]
        for i, tensors in enumerate(inputs):
            c.async_infer(endpoint, tensors, callback(i))
        for _ in payloads:
            assert done.acquire(timeout=60)
        if _batched_executions(grpc_url, batcher) > before:
            break
    else:
        pytest.fail(f"{batcher} never batched concurrent requests; dynamic batching is not active")

    want = reference.encode(good_texts, normalize_embeddings=True)
    result, error = results[7]
    assert result is None and "not valid UTF-8" in error.message()
    assert error.status() == "StatusCode.INVALID_ARGUMENT"  # an input error: never retry
    goods = [results[i] for i in range(len(payloads)) if i != 7]
    assert all(err is None for _, err in goods), [err.message() for _, err in goods if err]
    got = np.concatenate([res.as_numpy("EMBEDDING") for res, _ in goods])
    np.testing.assert_allclose(got, want, atol=1e-4)
    c.close()


def test_cli_embed_prints_similarities(grpc_url):
    out = subprocess.run([sys.executable, "-m", "hotpath", "embed", "--url", grpc_url, "--similarity",
                          "a cat sits on the mat", "a kitten rests on a rug", "quarterly revenue grew"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [[float(v) for v in line.split()[-3:]] for line in out.stdout.strip().splitlines()]
    sims = np.array(rows)
    np.testing.assert_allclose(np.diag(sims), 1.0, atol=1e-3)
    assert sims[0, 1] > sims[0, 2] + 0.3


def test_cli_reports_unreachable_server_without_traceback():
    out = subprocess.run([sys.executable, "-m", "hotpath", "embed", "--url", "127.0.0.1:1", "x"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 69  # ServerUnavailableError (EX_UNAVAILABLE), after the client's bounded retries
    assert "error:" in out.stderr and "Traceback" not in out.stderr
