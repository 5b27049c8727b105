"""n and logprobs in the OpenAI API's pure code: the engine's token entries rendered in OpenAI's chat and legacy
shapes, responses with one element per choice added up per choice, what the answer cache may keep."""

import json

import numpy as np
import pytest
from tritonclient.grpc import service_pb2
from tritonclient.grpc._infer_result import InferResult

from hotpath.openai_api.answer_cache import deterministic
from hotpath.openai_api.generation import (
    LOGPROB_FLOOR,
    Completion,
    Totals,
    chat_logprobs,
    completion_logprobs,
    parse_step,
    request_inputs,
    request_outputs,
    sampling_parameters,
)
from hotpath.openai_api.schemas import ChatCompletionRequest, CompletionRequest, logprobs_fault
from hotpath.runtime.llm.request import InputError, parse_request

# the engine's entries: [id, token, logprob, [[id, token, logprob, rank], ...]] (engine_process.token_logprobs)
PARIS = [[12, "Par", -0.1, [[12, "Par", -0.1, 1], [40, "The", -2.5, 2], [7, "It", -3.0, 3]]],
         [13, "is", -0.2, [[13, "is", -0.2, 1], [50, "ies", -1.9, 2], [8, "!", -4.0, 3]]],
         [14, "é", float("-inf"), [[99, "x", -0.01, 1], [98, "y", -5.0, 2], [14, "é", float("-inf"), 30]]]]


def _chat(**extra) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 **extra})


def test_chat_shape_takes_the_top_by_rank_and_floors_infinity():
    out = chat_logprobs(PARIS, 2)["content"]
    assert [e["token"] for e in out] == ["Par", "is", "é"]
    assert out[0] == {"token": "Par", "logprob": -0.1, "bytes": [80, 97, 114], "top_logprobs": [
        {"token": "Par", "logprob": -0.1, "bytes": [80, 97, 114]}, {"token": "The", "logprob": -2.5,
                                                                   "bytes": [84, 104, 101]}]}
    assert out[2]["logprob"] == LOGPROB_FLOOR and out[2]["bytes"] == [195, 169]
    assert [t["token"] for t in out[2]["top_logprobs"]] == ["x", "y"]   # the chosen token ranks 30th: not in a top 2
    assert all(e["top_logprobs"] == [] for e in chat_logprobs(PARIS, 0)["content"])
    json.dumps(chat_logprobs(PARIS, 3), allow_nan=False)   # valid JSON: no infinity reaches a client


def test_legacy_shape_offsets_carry_across_deltas():
    first, at = completion_logprobs(PARIS[:2])
    assert first == {"tokens": ["Par", "is"], "token_logprobs": [-0.1, -0.2],
                     "top_logprobs": [{"Par": -0.1, "The": -2.5, "It": -3.0}, {"is": -0.2, "ies": -1.9, "!": -4.0}],
                     "text_offset": [0, 3]}
    rest, at = completion_logprobs(PARIS[2:], at)
    assert rest["text_offset"] == [5] and at == 6 and rest["top_logprobs"][0]["é"] == LOGPROB_FLOOR


def _result(final: bool, **outputs) -> InferResult:
    response = service_pb2.ModelInferResponse(model_name="text_generation")
    for name, value in outputs.items():
        tensor = response.outputs.add()
        tensor.name = name
        values = value if isinstance(value, list) else [value]
        tensor.shape.append(len(values))
        if isinstance(values[0], str):
            tensor.datatype = "BYTES"
            response.raw_output_contents.append(b"".join(len(v.encode()).to_bytes(4, "little") + v.encode()
                                                         for v in values))
        else:
            tensor.datatype = "UINT32"
            response.raw_output_contents.append(np.array(values, dtype=np.uint32).tobytes())
    if final:
        response.parameters["triton_final_response"].bool_param = True
    return InferResult(response)


def test_steps_with_two_choices_add_up_per_choice():
    steps = [parse_step(_result(False, text_output=["Par", ""], logprobs=[json.dumps(PARIS[:1]), "[]"])),
             parse_step(_result(False, text_output=["is", "Lyon"],
                                logprobs=[json.dumps(PARIS[1:2]), json.dumps(PARIS[2:])])),
             parse_step(_result(True, text_output=["", ""], logprobs=["[]", "[]"], finish_reason=["stop", "length"],
                                num_input_tokens=9, num_output_tokens=3))]
    totals = Totals()
    for step in steps:
        totals.add(step)
    assert [(c.text, c.finish_reason, len(c.logprobs)) for c in totals.choices] == [("Paris", "stop", 2),
                                                                                   ("Lyon", "length", 1)]
    assert (totals.text, totals.finish_reason) == ("Paris", "stop")
    assert totals.usage() == {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}
    whole = Completion(_chat(n=2, logprobs=True, top_logprobs=1)).whole(totals)
    assert [c["index"] for c in whole["choices"]] == [0, 1]
    assert [c["finish_reason"] for c in whole["choices"]] == ["stop", "length"]
    assert [e["token"] for e in whole["choices"][0]["logprobs"]["content"]] == ["Par", "is"]
    assert totals.answer() == {"text": "Paris", "finish_reason": "stop", "prompt_tokens": 9, "completion_tokens": 3}


def test_stream_chunks_carry_their_choice_index_and_logprobs():
    chat = Completion(_chat(n=2, stream=True, logprobs=True))
    chunk = chat.chunk("is", index=1, logprobs=PARIS[1:2])
    assert chunk["choices"][0]["index"] == 1 and chunk["choices"][0]["delta"] == {"content": "is"}
    assert chunk["choices"][0]["logprobs"]["content"][0]["token"] == "is"
    assert chat.chunk(None, "stop", index=1)["choices"][0]["logprobs"] is None
    text = Completion(CompletionRequest.model_validate({"model": "m", "prompt": "x", "n": 2, "logprobs": 1,
                                                        "stream": True}))
    a = text.chunk("Par", index=0, logprobs=PARIS[:1])["choices"][0]["logprobs"]
    b = text.chunk("is", index=0, logprobs=PARIS[1:2])["choices"][0]["logprobs"]
    c = text.chunk("Par", index=1, logprobs=PARIS[:1])["choices"][0]["logprobs"]
    assert (a["text_offset"], b["text_offset"], c["text_offset"]) == ([0], [3], [0])   # offsets kept per choice


def test_requests_carry_n_and_logprobs_to_the_engine():
    request = _chat(n=3, logprobs=True, top_logprobs=4, temperature=0.5)
    assert sampling_parameters(request) == {"temperature": 0.5, "n": 3, "logprobs": 4}
    names = {t._get_tensor().name for t in request_inputs(request)}
    assert "return_logprobs" in names and "logprobs" in request_outputs(request)
    plain = _chat(logprobs=False, top_logprobs=0)
    assert "logprobs" not in sampling_parameters(plain)
    assert "return_logprobs" not in {t._get_tensor().name for t in request_inputs(plain)}
    assert "logprobs" not in request_outputs(plain)
    legacy = CompletionRequest.model_validate({"model": "m", "prompt": "x", "logprobs": 0})
    assert sampling_parameters(legacy) == {"logprobs": 0}


def test_top_logprobs_needs_logprobs():
    assert logprobs_fault(_chat(top_logprobs=2)) == "top_logprobs"
    assert logprobs_fault(_chat(top_logprobs=2, logprobs=False)) == "top_logprobs"
    assert logprobs_fault(_chat(top_logprobs=0)) is None and logprobs_fault(_chat(top_logprobs=2, logprobs=True)) is None


@pytest.mark.parametrize("extra, cached", [
    ({"temperature": 0}, True), ({"seed": 1, "temperature": 0.9}, True), ({"temperature": 0.9}, False), ({}, False),
    ({"temperature": 0, "n": 2}, False), ({"temperature": 0, "n": 1}, True), ({"temperature": 0, "logprobs": True}, False),
    ({"temperature": 0, "logprobs": False}, True), ({"seed": 3, "n": 2}, False),
])
def test_the_cache_keeps_only_what_it_replays_exactly(extra, cached):
    assert deterministic(_chat(**extra)) is cached


def test_completion_logprobs_zero_is_still_cached_out():
    assert not deterministic(CompletionRequest.model_validate({"model": "m", "prompt": "x", "temperature": 0,
                                                               "logprobs": 0}))


def _arrays(sampling: dict, **flags) -> dict:
    arrays = {"text_input": np.array([b"hi"], dtype=np.object_),
              "sampling_parameters": np.array([json.dumps(sampling).encode()], dtype=np.object_)}
    arrays.update({k: np.array([v]) for k, v in flags.items()})
    return arrays


def test_engine_request_n_and_return_logprobs():
    request = parse_request(_arrays({"n": 3, "logprobs": 5}, return_logprobs=True), 512, 1000)
    assert request.n == 3 and request.want_logprobs and request.sampling == {"n": 3, "logprobs": 5}
    assert parse_request(_arrays({}), 512, 1000).n == 1
    with pytest.raises(InputError, match="return_logprobs needs sampling_parameters.logprobs"):
        parse_request(_arrays({"n": 2}, return_logprobs=True), 512, 1000)


def test_a_grpc_stream_is_charged_for_every_choice():
    """The gateway's stream admission reads max_tokens and n (the charge is max_tokens, or the model's default,
    times n: front_door.lua; the engine generates up to that much per choice)."""
    from tritonclient.grpc import service_pb2

    from hotpath.gateway.streams import requested_tokens

    def asked(sampling: bytes) -> tuple[int, int]:
        request = service_pb2.ModelInferRequest(model_name="text_generation")
        params = request.inputs.add(name="sampling_parameters", datatype="BYTES")
        params.shape.append(1)
        params.contents.bytes_contents.append(sampling)
        return requested_tokens(request)

    assert asked(b'{"max_tokens": 7, "n": 3}') == (7, 3) and asked(b'{"max_tokens": 7}') == (7, 1)
    assert asked(b'{"n": 2}') == (0, 2)                      # the default, twice
    assert asked(b'{"max_tokens": 7, "n": 100}') == (7, 8)   # the model refuses n > 8; never charged more
    assert asked(b'{"max_tokens": 7, "n": true}') == asked(b'{"max_tokens": 7, "n": "4"}') == (7, 1)
