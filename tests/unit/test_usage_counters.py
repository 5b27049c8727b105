"""Usage metering without servers: the models' per-tenant counters (python_backends/*/model.py against the
pb_utils stand-in, tests/pb_stand_in.py), the stream admission's token count and give-back helpers
(hotpath.gateway.streams), the OpenAI API's tenancy headers, and `hotpath usage`'s reading of the counters
(hotpath.monitoring.usage_report). The same paths against real servers: tests/integration/test_usage.py."""

import io
import json
import os

import numpy as np
import pytest
from PIL import Image
from tritonclient.grpc import service_pb2

from hotpath import paths
from hotpath.gateway import streams
from hotpath.monitoring.usage_report import COLUMNS, Usage, parse_exposition, window_query
from hotpath.openai_api.generation import OUTPUT_TOKENS_COMMENT, output_tokens_comment
from hotpath.openai_api.triton import tenancy_headers
from hotpath.runtime.text import encode, load_tokenizer
from hotpath.runtime.usage import TENANCY_REFUSED, tenants_of
from hotpath.specs.repository import read_config
from tests.pb_stand_in import InferenceRequest as Request
from tests.pb_stand_in import MetricFamily, TritonError, bytes_column, error_of, initialize_args, load_adapter
from tests.unit.test_adapters import _tokenizer as tokenizer_adapter


@pytest.fixture(autouse=True)
def _fresh_families():
    MetricFamily.families.clear()
    yield
    MetricFamily.families.clear()


def _tenant(name: str) -> str:
    return json.dumps({"x-hotpath-tenant": name, "x-hotpath-collection": name})


def _counted(family: str) -> dict[str, float]:
    """tenant -> value of one usage family in the stand-in."""
    fam = MetricFamily.families.get(family)
    return {} if fam is None else {m.labels["tenant"]: m.value for m in fam.series}


# ----------------------------------------------------------------------------------------------- tenancy

def test_tenants_of_names_the_gateways_tenant_local_without_it_and_none_when_malformed():
    requests = [Request(parameters=_tenant("acme")), Request(),
                Request(parameters='{"x-hotpath-tenant": "acme", "X-Hotpath-Tenant": "other"}'),
                Request(parameters='{"x-hotpath-tenant": "Not A Name"}')]
    assert tenants_of(requests) == ["acme", "local", None, None]


# ----------------------------------------------------------------------------------------------- models

def test_tokenizer_counts_each_requests_tokens_for_its_tenant(tmp_path, monkeypatch):
    model, params, version = tokenizer_adapter(tmp_path, monkeypatch)
    acme = ["a short one", "a somewhat longer sentence about tokenizers and padding"]
    beta = ["héllo 世界"]
    responses = model.execute([Request(parameters=_tenant("acme"), TEXT=bytes_column(*acme)),
                               Request(parameters=_tenant("beta"), TEXT=bytes_column(b"\xff")),   # refused: not counted
                               Request(parameters=_tenant("beta"), TEXT=bytes_column(*beta)),
                               Request(TEXT=bytes_column("no gateway")),
                               Request(parameters='{"x-hotpath-tenant": "BAD"}', TEXT=bytes_column("x"))])
    tok = load_tokenizer(version / params["tokenizer_file"], int(params["max_length"]))
    tok.no_padding()
    expected = {"acme": sum(len(e.ids) for e in tok.encode_batch(acme)),
                "beta": len(tok.encode(beta[0]).ids), "local": len(tok.encode("no gateway").ids)}
    assert _counted("hotpath_usage_embedding_tokens_total") == expected
    assert error_of(responses[4]) == (TritonError.INVALID_ARG, f"tokenizer: {TENANCY_REFUSED}")
    labels = MetricFamily.families["hotpath_usage_embedding_tokens_total"].series[0].labels
    assert labels == {"tenant": "acme", "model": "tokenizer", "load": str(os.getpid())}
    # the same as the padded batch's attention mask, which is what the model sums
    padded = load_tokenizer(version / params["tokenizer_file"], int(params["max_length"]),
                            int(params["pad_to_multiple_of"]))
    assert expected["acme"] == int(encode(padded, acme)["attention_mask"].sum())
    model.finalize()


def _jpeg(seed: int) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 255, (40, 60, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG")
    return out.getvalue()


def test_image_preprocess_counts_the_images_it_decoded_per_tenant(tmp_path, monkeypatch):
    config = read_config(paths.model_repository() / "image_preprocess")
    model = load_adapter("image_preprocess", monkeypatch)()
    model.initialize(initialize_args(config, tmp_path / "image_preprocess" / "1"))
    model.execute([Request(parameters=_tenant("acme"), IMAGE=bytes_column(_jpeg(1), _jpeg(2))),
                   Request(parameters=_tenant("acme"), IMAGE=bytes_column(b"not an image")),   # fails: not counted
                   Request(parameters=_tenant("beta"), IMAGE=bytes_column(_jpeg(3)))])
    assert _counted("hotpath_usage_images_total") == {"acme": 2, "beta": 1}


class _Sender:
    def __init__(self):
        self.sent = []

    def send(self, response=None, flags=0):
        self.sent.append((response, flags))

    def is_cancelled(self):
        return False


def test_text_generation_counts_the_engines_tokens_once_when_a_request_ends(monkeypatch):
    from hotpath.runtime.llm.request import Request as LLMRequest
    from hotpath.runtime.usage import Usage as Meter

    module = load_adapter("text_generation", monkeypatch)
    stream_class = module.execute.__globals__["Stream"]
    pb = module.execute.__globals__["pb_utils"]
    meter = Meter(pb, "text_generation", ("input_tokens", "output_tokens"))
    stream = stream_class(_Sender(), LLMRequest(text="hi", messages=None, stream=True, exclude_input=True,
                                                want_output_tokens=True), "acme", meter)
    for i in range(3):   # deltas: nothing counted per token
        stream.reply({"id": "r", "text": "x", "tokens": 1, "finish": None, "input_tokens": 7, "output_tokens": i + 1})
    assert _counted("hotpath_usage_output_tokens_total") == {}
    stream.reply({"id": "r", "text": "", "tokens": 0, "finish": "stop", "input_tokens": 7, "output_tokens": 4})
    stream.reply({"id": "r", "text": "", "tokens": 0, "finish": "stop", "input_tokens": 7, "output_tokens": 4})
    assert _counted("hotpath_usage_input_tokens_total") == {"acme": 7}
    assert _counted("hotpath_usage_output_tokens_total") == {"acme": 4}


# ----------------------------------------------------------------------------------------------- the stream admission

def test_the_upstream_gets_the_gateways_tenant_and_no_client_x_hotpath_metadata():
    sent = {"x-hotpath-tenant": "acme", "x-hotpath-collection": "shared", "x-hotpath-anything": "1",
            "authorization": "Bearer t", "x-request-id": "abc"}
    forwarded = streams.upstream_metadata(sent, "acme")
    assert sorted(forwarded) == [("x-hotpath-collection", "acme"), ("x-hotpath-tenant", "acme"),
                                 ("x-request-id", "abc")]


def _generation_request(raw: bool, ask: bool | None, outputs: tuple[str, ...] = ()) -> service_pb2.ModelInferRequest:
    request = service_pb2.ModelInferRequest(model_name="text_generation", id="r1")
    text = request.inputs.add(name="text_input", datatype="BYTES", shape=[1])
    if raw:
        request.raw_input_contents.append(len(b"hi").to_bytes(4, "little") + b"hi")
    else:
        text.contents.bytes_contents.append(b"hi")
    if ask is not None:
        flag = request.inputs.add(name=streams.COUNT_INPUT, datatype="BOOL", shape=[1])
        if raw:
            request.raw_input_contents.append(b"\x01" if ask else b"\x00")
        else:
            flag.contents.bool_contents.append(ask)
    for name in outputs:
        request.outputs.add(name=name)
    return request


@pytest.mark.parametrize("raw", [True, False])
@pytest.mark.parametrize("ask", [None, False, True])
def test_a_generation_message_is_made_to_ask_for_its_count_in_the_form_the_client_used(raw, ask):
    request = _generation_request(raw, ask)
    strip = streams.ask_for_count(request)
    assert strip is (ask is not True)
    index = [t.name for t in request.inputs].index(streams.COUNT_INPUT)
    assert streams._bool_true(request, index)
    assert bool(request.raw_input_contents) is raw and (not raw or len(request.raw_input_contents) == 2)


def test_a_message_naming_its_outputs_gets_the_count_added_and_stripped():
    request = _generation_request(True, True, outputs=("text_output",))
    assert streams.ask_for_count(request) is True
    assert [o.name for o in request.outputs] == ["text_output", streams.COUNT_OUTPUT]


def _response(count: int | None, raw: bool = True) -> service_pb2.ModelStreamInferResponse:
    response = service_pb2.ModelStreamInferResponse()
    infer = response.infer_response
    infer.id, infer.model_name = "r1", "text_generation"
    infer.outputs.add(name="text_output", datatype="BYTES", shape=[1])
    infer.raw_output_contents.append(len(b"ok").to_bytes(4, "little") + b"ok")
    if count is not None:
        infer.outputs.add(name=streams.COUNT_OUTPUT, datatype="UINT32", shape=[1])
        infer.raw_output_contents.append(np.array([count], "<u4").tobytes())
    return response


def test_the_count_is_read_from_the_last_answer_and_stripped_from_it():
    assert streams.generated_tokens(_response(None)) is None
    response = _response(17)
    assert streams.generated_tokens(response) == 17
    streams.strip_count(response)
    assert [o.name for o in response.infer_response.outputs] == ["text_output"]
    assert len(response.infer_response.raw_output_contents) == 1


class _Charger:
    def __init__(self):
        self.returned = []

    async def give_back(self, tenant, model, tokens):
        self.returned.append((tenant, model, tokens))


def test_the_admission_gives_back_what_a_generation_did_not_use():
    import asyncio

    admission = streams.StreamAdmission(0, ("127.0.0.1:1",), _Charger())

    async def run():
        pending, returns = streams.Pending(), set()
        pending.add("r1", 100, True)
        deltas = admission._answer(_response(None).SerializeToString(), pending, "acme", returns)
        last = admission._answer(_response(30).SerializeToString(), pending, "acme", returns)
        await asyncio.gather(*returns)
        return deltas, last, pending

    deltas, last, pending = asyncio.run(run())
    assert deltas == _response(None).SerializeToString()
    answer = service_pb2.ModelStreamInferResponse.FromString(last)
    assert [o.name for o in answer.infer_response.outputs] == ["text_output"]   # the client did not ask
    assert admission.charge.returned == [("acme", "text_generation", 70)]
    assert not pending.by_id


# ----------------------------------------------------------------------------------------------- the OpenAI API

def test_the_api_passes_on_only_the_gateways_tenancy_headers():
    from starlette.datastructures import Headers

    incoming = Headers({"X-Hotpath-Tenant": "acme", "x-hotpath-collection": "acme", "x-hotpath-other": "no",
                        "authorization": "Bearer x"})
    assert tenancy_headers(incoming) == {"x-hotpath-tenant": "acme", "x-hotpath-collection": "acme"}
    assert tenancy_headers(Headers({})) == {}
    assert output_tokens_comment(12) == OUTPUT_TOKENS_COMMENT + b"12\n\n"


# ----------------------------------------------------------------------------------------------- hotpath usage

EXPOSITION = """\
# HELP hotpath_usage_embedding_tokens_total Tokens embedded
# TYPE hotpath_usage_embedding_tokens_total counter
hotpath_usage_embedding_tokens_total{model="tokenizer",tenant="acme"} 40
hotpath_usage_embedding_tokens_total{model="sentence_embedder",tenant="acme"} 2
hotpath_usage_embedding_tokens_total{model="sentence_embedder",tenant="beta"} 5
# HELP hotpath_usage_images_total Images decoded
# TYPE hotpath_usage_images_total counter
hotpath_usage_images_total{model="image_preprocess",tenant="beta"} 3
# HELP nv_inference_count x
# TYPE nv_inference_count counter
nv_inference_count{model="tokenizer",version="1"} 9
# HELP hotpath_gateway_tenant_requests_total Inference requests served per tenant and door
# TYPE hotpath_gateway_tenant_requests_total counter
hotpath_gateway_tenant_requests_total{tenant="acme",door="grpc"} 4
hotpath_gateway_tenant_requests_total{tenant="acme",door="openai"} 1
"""


def test_usage_sums_each_tenants_counters_over_models_doors_and_endpoints():
    usage = Usage(source="test")
    parse_exposition(EXPOSITION, usage)
    parse_exposition(EXPOSITION, usage, tenant="beta")   # a second replica, read for one tenant
    assert usage.as_json()["tenants"] == {
        "acme": {**dict.fromkeys(COLUMNS, 0), "requests": 5, "embedding_tokens": 42},
        "beta": {**dict.fromkeys(COLUMNS, 0), "embedding_tokens": 10, "images": 6}}
    table = usage.table().splitlines()
    assert table[1].split() == ["tenant", *COLUMNS] and table[2].split()[0] == "acme"


def test_the_window_query_takes_the_rise_per_series_and_a_new_or_restarted_series_whole():
    assert window_query("m_total", "1h") == ("sum by (tenant) (((last_over_time(m_total[1h]) - m_total offset 1h) "
                                             ">= 0) or last_over_time(m_total[1h]))")
    assert 'm_total{tenant="acme"} offset 1h' in window_query("m_total", "1h", "acme")
