"""Chat/completions onto text_generation's vLLM-backend tensors and back; Triton errors onto OpenAI's."""

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.grpc._infer_result import InferResult
from tritonclient.utils import InferenceServerException

from hotpath.openai_api.answer_cache import canonical
from hotpath.openai_api.errors import from_triton
from hotpath.openai_api.generation import Completion, Totals, parse_step, request_inputs, sampling_parameters
from hotpath.openai_api.schemas import ChatCompletionRequest, CompletionRequest
from hotpath.runtime.llm.request import parse_sampling


def _chat(**extra) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "text_generation", "messages": [
        {"role": "developer", "content": "Be brief."}, {"role": "user", "content": "Héllo"},
        {"role": "assistant", "content": "Hi"}, {"role": "user", "content": "More"}], **extra})


def _tensors(inputs) -> dict:
    out = {}
    for t in inputs:
        tensor = t._get_tensor()
        content = t._get_content()
        if tensor.datatype == "BOOL":
            out[tensor.name] = bool(content[0])
        else:
            out[tensor.name] = content[4:].decode()
        assert list(tensor.shape) == [1]
    return out


def test_chat_request_tensors():
    tensors = _tensors(request_inputs(_chat(max_completion_tokens=7, temperature=0, seed=3, stop="\n", stream=True)))
    assert json.loads(tensors["messages"]) == [{"role": "system", "content": "Be brief."},
                                               {"role": "user", "content": "Héllo"},
                                               {"role": "assistant", "content": "Hi"},
                                               {"role": "user", "content": "More"}]
    assert "text_input" not in tensors and tensors["stream"] is True
    assert all(tensors[f] for f in ("exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
                                    "return_num_output_tokens"))
    assert json.loads(tensors["sampling_parameters"]) == {"max_tokens": 7, "temperature": 0.0, "seed": 3,
                                                          "stop": ["\n"]}


def test_completion_request_tensors_send_only_what_was_set():
    request = CompletionRequest.model_validate({"model": "m", "prompt": "Once"})
    tensors = _tensors(request_inputs(request))
    assert tensors["text_input"] == "Once" and tensors["stream"] is False and "messages" not in tensors
    assert sampling_parameters(request) == {}


def _result(final: bool, **outputs) -> InferResult:
    response = service_pb2.ModelInferResponse(model_name="text_generation")
    for name, value in outputs.items():
        tensor = response.outputs.add()
        tensor.name = name
        tensor.shape.append(1)
        if isinstance(value, str):
            tensor.datatype = "BYTES"
            raw = value.encode()
            response.raw_output_contents.append(len(raw).to_bytes(4, "little") + raw)
        else:
            tensor.datatype = "UINT32"
            response.raw_output_contents.append(np.array([value], dtype=np.uint32).tobytes())
    if final:
        response.parameters["triton_final_response"].bool_param = True
    return InferResult(response)


def test_steps_add_up_to_the_whole_answer_and_usage():
    steps = [parse_step(_result(False, text_output="Par")), parse_step(_result(False, text_output="is")),
             parse_step(_result(True, text_output=".", finish_reason="stop", num_input_tokens=12,
                                num_output_tokens=3))]
    assert [s.final for s in steps] == [False, False, True]
    totals = Totals()
    for step in steps:
        totals.add(step)
    assert (totals.text, totals.finish_reason) == ("Paris.", "stop")
    assert totals.usage() == {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
    empty_final = parse_step(_result(True))
    assert empty_final.final and empty_final.text == "" and empty_final.finish_reason is None


def test_chat_objects_and_chunks():
    completion = Completion(_chat(stream=True, stream_options={"include_usage": True}))
    first = completion.chunk("Hi", first=True)
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant",
                                                                                          "content": "Hi"}
    assert first["usage"] is None
    last = completion.chunk(None, "length")
    assert last["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"}
    totals = Totals("Hi", "length", 5, 1)
    assert completion.usage_chunk(totals)["choices"] == [] and completion.usage_chunk(totals)["usage"]["total_tokens"] == 6
    whole = Completion(_chat()).whole(totals)
    assert whole["object"] == "chat.completion" and whole["choices"][0]["message"] == {"role": "assistant",
                                                                                       "content": "Hi"}
    text = Completion(CompletionRequest.model_validate({"model": "m", "prompt": "x", "stream": True}))
    assert text.chunk("a")["object"] == "text_completion" and text.chunk("a")["choices"][0]["text"] == "a"
    assert "usage" not in text.chunk("a")


@pytest.mark.parametrize("status, message, code, retry", [
    ("StatusCode.INVALID_ARGUMENT", "prompt is 900 tokens, over the context of 512", 400, None),
    (None, "text_generation: [INVALID_ARGUMENT] prompt too long", 400, None),
    (None, "text_generation: [UNAVAILABLE] admission queue full", 503, "1"),
    ("StatusCode.RESOURCE_EXHAUSTED", "quota", 429, "1"),
    ("StatusCode.UNAVAILABLE", "shutting down", 503, "1"),
    ("StatusCode.NOT_FOUND", "Request for unknown model: 'm' has no available versions", 503, "1"),
    ("StatusCode.INTERNAL", "Traceback (most recent call last): File /work/x.py", 500, None),
    ("StatusCode.DEADLINE_EXCEEDED", "slow", 504, None),
])
def test_triton_status_maps_one_to_one(status, message, code, retry):
    error = from_triton("text_generation", InferenceServerException(message, status=status), "messages")
    assert error.status == code and error.headers().get("retry-after") == retry
    assert error.param == ("messages" if code == 400 else None)
    assert "Traceback" not in error.message and error.message.startswith("text_generation: ")
    assert set(error.body()["error"]) == {"message", "type", "param", "code"}


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.mark.parametrize("response_format, want", [
    (None, None),
    ({"type": "text"}, None),
    ({"type": "json_object"}, {"json_object": True}),
    ({"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}, {"json": SCHEMA}),
])
def test_response_format_becomes_structured_outputs_the_model_accepts(response_format, want):
    extra = {} if response_format is None else {"response_format": response_format}
    for request in (_chat(max_tokens=5, **extra),
                    CompletionRequest.model_validate({"model": "m", "prompt": "Once", **extra})):
        text = _tensors(request_inputs(request))["sampling_parameters"]
        sent = json.loads(text)
        if want is None:
            assert "structured_outputs" not in sent
        else:   # Triton's vLLM-backend shape: the StructuredOutputsParams fields as JSON text
            assert json.loads(sent["structured_outputs"]) == want
        # ...and text_generation's own check reads it back as the constraint it passes to vLLM.
        assert parse_sampling(text, 512).get("structured_outputs") == want


def test_the_answer_cache_key_holds_response_format():
    base = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    keys = {canonical({**base, **extra}) for extra in (
        {}, {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA}}},
        {"response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}}}})}
    assert len(keys) == 4
    assert canonical({**base, "stream": True}) == canonical(base)   # what only shapes the reply is left out
