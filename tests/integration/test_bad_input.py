"""Bad input gets INVALID_ARGUMENT (gRPC) / 400 (HTTP) with a message naming the problem, on every
endpoint, and the hotpath client raises InvalidInputError for it (never retried).

text_generation has its own bad-input matrix (tests/integration/test_text_generation.py).
Limits are read from the specs, so the test follows them when they change. The raw cases of
tests/bad_requests.py bypass tritonclient (missing, extra, mistyped, misshapen, overflowing, lying inputs):
each that a hotpath model answers must be INVALID_ARGUMENT / 400 naming the input, with no traceback or
server path, and the endpoint must serve a good request right after; the ones Triton's own frontend answers
are pinned to its answer, for the front door to correct.
"""

import io
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from PIL import Image
from tritonclient.utils import InferenceServerException

from hotpath.client import ClassificationClient, EmbeddingClient, InvalidInputError
from hotpath.paths import model_specs_dir
from hotpath.specs.spec import load_spec
from tests.bad_requests import all_cases, good_request
from tests.imagegen import bad_inputs, encode, photo


def limit(model: str, key: str) -> int:
    return int(load_spec(model_specs_dir() / f"{model}.toml").config.parameters[key].string_value)


def _png(size, mode="1") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, "PNG")
    return out.getvalue()


def text_cases(first_step: str):
    max_bytes, max_chars = limit(first_step, "max_text_bytes"), limit(first_step, "max_text_chars")
    return {
        "non-utf8": (np.array([[b"fine \xff\xfe broken"]], dtype=object), "BYTES", "not valid UTF-8"),
        "over-bytes": (np.array([["é" * (max_bytes // 2 + 1)]], dtype=object), "BYTES",
                       f"bytes, over the limit of {max_bytes}"),
        "over-chars": (np.array([["ab" * (max_chars // 2 + 1)]], dtype=object), "BYTES",
                       f"characters, over the limit of {max_chars}"),
        "wrong-dtype": (np.array([[1]], dtype=np.int32), "INT32", "data-type"),
        "wrong-shape": (np.array([[b"a", b"b"]], dtype=object), "BYTES", "shape"),
    }


def image_cases():
    cases = {name: (np.array([[data]], dtype=object), "BYTES", fragment)
             for name, (data, fragment) in bad_inputs().items()}
    max_bytes, max_decoded = limit("image_preprocess", "max_bytes"), limit("image_preprocess", "max_decoded_pixels")
    side = int(max_decoded ** 0.5) + 1
    cases["over-decoded-pixels"] = (np.array([[_png((side, side))]], dtype=object), "BYTES",
                                    f"over the limit of {max_decoded}")
    cases["over-bytes"] = (np.array([[b"\xff\xd8" + bytes(max_bytes)]], dtype=object), "BYTES",
                           f"over the limit of {max_bytes}")
    cases["wrong-dtype"] = (np.array([[1.0]], dtype=np.float32), "FP32", "data-type")
    return cases


ENDPOINTS = {"text_embedding": ("TEXT", text_cases("sentence_embedder")),
             "text_embedding_exact": ("TEXT", text_cases("tokenizer")),
             "image_classification": ("IMAGE", image_cases())}
MATRIX = [(endpoint, case) for endpoint, (_, cases) in ENDPOINTS.items() for case in cases]


def _send(module, url, model, name, data, dtype):
    tensor = module.InferInput(name, list(data.shape), dtype)
    tensor.set_data_from_numpy(data)
    client = module.InferenceServerClient(url)
    try:
        client.infer(model, [tensor])
    finally:
        client.close()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("endpoint,case", MATRIX, ids=[f"{e}-{c}" for e, c in MATRIX])
def test_bad_input_is_invalid_argument_with_a_clear_message(triton, endpoint, case, protocol):
    input_name, cases = ENDPOINTS[endpoint]
    data, dtype, fragment = cases[case]
    module, url, want = ((grpcclient, triton.grpc_url, "StatusCode.INVALID_ARGUMENT") if protocol == "grpc"
                         else (httpclient, triton.http_url, "400"))
    if input_name == "TEXT" and dtype == "BYTES":  # distinct per protocol: see the response-cache test below
        data = np.array([[f"{protocol} ".encode() + (v.encode() if isinstance(v, str) else v) for v in row]
                         for row in data], dtype=object)
    with pytest.raises(InferenceServerException) as info:
        _send(module, url, endpoint, input_name, data, dtype)
    assert info.value.status() == want, (info.value.status(), info.value.message(), triton.log_tail(15))
    assert fragment in info.value.message(), info.value.message()


@pytest.mark.parametrize("protocol", ["grpc", "http"])
@pytest.mark.parametrize("endpoint", ["text_embedding", "text_embedding_exact"])
def test_a_repeated_bad_text_is_refused_again(triton, endpoint, protocol):
    # tritonserver caches a single model's errors and replays them as empty successes; only ensembles
    # carry the cache (hotpath.specs.config_pbtxt refuses it elsewhere), and the ensemble scheduler caches successes only.
    module, url = (grpcclient, triton.grpc_url) if protocol == "grpc" else (httpclient, triton.http_url)
    data = np.array([[f"repeated {uuid.uuid4()} \xff".encode("latin-1")]], dtype=object)
    for _ in range(3):
        with pytest.raises(InferenceServerException, match="not valid UTF-8"):
            _send(module, url, endpoint, "TEXT", data, "BYTES")


@pytest.mark.parametrize("endpoint", sorted(ENDPOINTS))
def test_client_raises_invalid_input_error_once_and_keeps_serving(grpc_url, endpoint):
    input_name, cases = ENDPOINTS[endpoint]
    bad = cases["non-utf8" if input_name == "TEXT" else "truncated_jpeg"][0][0, 0]
    client_type = EmbeddingClient if input_name == "TEXT" else ClassificationClient
    with client_type(grpc_url, model=endpoint) as client:
        calls = []
        real = client._client.infer
        client._client.infer = lambda *a, **k: calls.append(1) or real(*a, **k)  # count sends (a real server answers)
        with pytest.raises(InvalidInputError) as info:
            client._infer_bytes([bad])
        assert len(calls) == 1, "an input error must not be retried"
        assert info.value.status == "INVALID_ARGUMENT" and info.value.exit_code == 65
        good = "still serving" if input_name == "TEXT" else encode(photo("coffee").resize((320, 240)), "JPEG")
        assert len(client._infer_bytes([good])) == 1


RAW = all_cases()
MODEL_SIDE = [c for c in RAW if not c.frontend]
FRONTEND = [c for c in RAW if c.frontend]


def _url(triton, case):
    return triton.grpc_url if case.protocol == "grpc" else triton.http_url


@pytest.mark.parametrize("case", MODEL_SIDE, ids=[c.id for c in MODEL_SIDE])
def test_raw_bad_request_is_refused_naming_the_input_and_the_server_keeps_serving(triton, case):
    answer = case.send(_url(triton, case))
    assert answer.invalid, (answer, triton.log_tail(15))
    assert any(n in answer.message for n in case.names), answer.message
    assert not answer.leaks, answer.message
    assert good_request(triton.grpc_url, case.endpoint).status == "OK"


@pytest.mark.parametrize("case", FRONTEND, ids=[c.id for c in FRONTEND])
def test_triton_frontend_answers_are_pinned_for_the_front_door(triton, case):
    # Answered by tritonserver before any model runs (case.frontend says why): no model can change these.
    answer = case.send(_url(triton, case))
    assert answer.status == case.answer.split()[0], (answer, case.answer)
    assert not answer.leaks, answer.message
    assert good_request(triton.grpc_url, case.endpoint).status == "OK"
