"""Request validation of the OpenAI-compatible API: strict bodies, refused fields named, bounded numbers."""

import json

import pytest
from pydantic import ValidationError

from hotpath.openai_api import errors
from hotpath.openai_api.schemas import (
    CHAT_REFUSED,
    COMPLETION_REFUSED,
    MAX_EMBEDDING_INPUTS,
    ChatCompletionRequest,
    CompletionRequest,
    EmbeddingsRequest,
)

CHAT = '{"model": "m", "messages": [{"role": "user", "content": "hi"}]%s}'


def _error(schema, body: str) -> errors.APIError:
    with pytest.raises(ValidationError) as exc:
        schema.model_validate_json(body)
    return errors.from_validation(exc.value)


def test_embeddings_accepts_a_string_or_a_list():
    assert EmbeddingsRequest.model_validate_json('{"model": "m", "input": "a"}').texts == ["a"]
    body = EmbeddingsRequest.model_validate_json('{"model": "m", "input": ["a", "b"], "encoding_format": "base64"}')
    assert body.texts == ["a", "b"] and body.encoding_format == "base64"


@pytest.mark.parametrize("body, param, code", [
    ('{"model": "m", "input": "a", "foo": 1}', "foo", "unknown_parameter"),
    ('{"input": "a"}', "model", "missing_required_parameter"),
    ('{"model": "m", "input": 5}', "input", "invalid_value"),
    ('{"model": "m", "input": [[1, 2]]}', "input", "invalid_value"),
    ('{"model": "m", "input": []}', "input", "invalid_value"),
    ('{"model": "m", "input": "a", "dimensions": 3.0}', "dimensions", "invalid_value"),
    ('{"model": "m", "input": "a", "dimensions": true}', "dimensions", "invalid_value"),
    ('{"model": "m", "input": "a", "encoding_format": "int8"}', "encoding_format", "invalid_value"),
    ('[1]', None, "invalid_type"),
    ('{"model": ', None, "invalid_json"),
])
def test_embeddings_errors_name_the_field(body, param, code):
    error = _error(EmbeddingsRequest, body)
    assert (error.status, error.param, error.code) == (400, param, code)


def test_batch_limit():
    body = '{"model": "m", "input": [%s]}' % ", ".join(['"a"'] * (MAX_EMBEDDING_INPUTS + 1))
    assert _error(EmbeddingsRequest, body).param == "input"


def test_deep_json_is_a_400_not_a_crash():
    error = _error(EmbeddingsRequest, '{"model": "m", "input": ' + "[" * 100_000 + "]" * 100_000 + "}")
    assert error.code == "invalid_json"


@pytest.mark.parametrize("extra, param", [
    (', "max_tokens": ' + "9" * 400, "max_tokens"),
    (', "max_tokens": 0', "max_tokens"),
    (', "temperature": 1e400', "temperature"),
    (', "temperature": 2.5', "temperature"),
    (', "top_p": 0', "top_p"),
    (', "seed": 9223372036854775808', "seed"),
    (', "stop": ["a", "b", "c", "d", "e"]', "stop"),
    (', "stop": ""', "stop"),
    (', "stream": "yes"', "stream"),
    (', "stream_options": {"include_usage": true, "x": 1}', "stream_options.x"),
])
def test_sampling_fields_are_bounded(extra, param):
    assert _error(ChatCompletionRequest, CHAT % extra).param == param


def test_message_roles_and_parts():
    body = ChatCompletionRequest.model_validate_json(
        '{"model": "m", "messages": [{"role": "developer", "content": "be brief"}, '
        '{"role": "user", "content": [{"type": "text", "text": "hel"}, {"type": "text", "text": "lo"}]}]}')
    assert [m.text for m in body.messages] == ["be brief", "hello"]
    assert _error(ChatCompletionRequest, '{"model": "m", "messages": [{"role": "function", "content": "x"}]}').param \
        == "messages[0].role"
    image = '{"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}'
    assert _error(ChatCompletionRequest, image).param.startswith("messages[0].content")


@pytest.mark.parametrize("extra, refused", [
    (', "best_of": 2', "best_of"), (', "functions": [{"name": "f"}]', "functions"),
    (', "logit_bias": {"50256": -100}', "logit_bias"), (', "presence_penalty": 0.5', "presence_penalty"),
    (', "frequency_penalty": 1', "frequency_penalty"), (', "function_call": "auto"', "function_call"),
])
def test_fields_the_engine_cannot_honour_are_refused(extra, refused):
    assert CHAT_REFUSED.check(ChatCompletionRequest.model_validate_json(CHAT % extra)) == refused
    assert errors.unsupported(refused).param == refused


@pytest.mark.parametrize("extra", [', "n": 1', ', "n": 8', ', "logprobs": false', ', "logprobs": true',
                                   ', "logprobs": true, "top_logprobs": 20', ', "presence_penalty": 0',
                                   ', "response_format": {"type": "text"}', ', "logit_bias": {}', ''])
def test_their_no_op_values_are_accepted(extra):
    assert CHAT_REFUSED.check(ChatCompletionRequest.model_validate_json(CHAT % extra)) is None


def test_completions():
    body = CompletionRequest.model_validate_json('{"model": "m", "prompt": ["hi"], "max_tokens": 5, "stop": "x"}')
    assert body.text == "hi" and body.stops == ["x"] and body.token_limit == 5
    assert COMPLETION_REFUSED.check(CompletionRequest.model_validate_json(
        '{"model": "m", "prompt": "hi", "echo": true}')) == "echo"
    assert _error(CompletionRequest, '{"model": "m", "prompt": [1, 2]}').param.startswith("prompt")
    assert _error(CompletionRequest, '{"model": "m", "prompt": ["a", "b"]}').param == "prompt"


def test_max_completion_tokens_wins_over_max_tokens():
    body = ChatCompletionRequest.model_validate_json(CHAT % ', "max_tokens": 9, "max_completion_tokens": 3')
    assert body.token_limit == 3


# response_format: honoured (text_generation's structured_outputs); anything else a 400 naming it.
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.mark.parametrize("response_format, want", [
    ({"type": "text"}, None),
    ({"type": "json_object"}, {"json_object": True}),
    ({"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}, {"json": SCHEMA}),
    ({"type": "json_schema", "json_schema": {"name": "person-2_b", "description": "d", "schema": SCHEMA,
                                             "strict": True}}, {"json": SCHEMA}),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": {}, "strict": False}}, {"json": {}}),
])
def test_response_format_is_honoured(response_format, want):
    for schema, body in ((ChatCompletionRequest, CHAT % (", \"response_format\": " + json.dumps(response_format))),
                         (CompletionRequest, json.dumps({"model": "m", "prompt": "p", "response_format": response_format}))):
        request = schema.model_validate_json(body)
        assert (CHAT_REFUSED if schema is ChatCompletionRequest else COMPLETION_REFUSED).check(request) is None
        assert request.response_format.structured_outputs() == want


def _bad_response_formats():
    """A generated corpus of response_format values that must be a 400 naming response_format."""
    def js(**fields):
        return {"type": "json_schema", "json_schema": {"name": "p", "schema": SCHEMA, **fields}}

    cases = [1, "json_object", [], True, {}, {"type": "xml"}, {"type": "JSON_OBJECT"}, {"type": None},
             {"type": "json_schema"}, {"type": "json_object", "json_schema": {"name": "p", "schema": SCHEMA}},
             {"type": "text", "json_schema": {"name": "p", "schema": SCHEMA}}, {"type": "json_object", "x": 1},
             {"type": "json_schema", "json_schema": {"schema": SCHEMA}},
             {"type": "json_schema", "json_schema": {"name": "p"}},
             {"type": "json_schema", "json_schema": "p"}, {"type": "json_schema", "json_schema": None},
             js(strict="yes"), js(strict=1), js(description=3), js(extra=1), js(name=""), js(name="a b"),
             js(name="x" * 65), js(name=5), js(schema=[]), js(schema="{}"), js(schema=None), js(schema=True),
             js(schema={"description": "d" * 16384}), js(schema={"enum": ["e" * 100] * 200})]
    deep = {"type": "string"}
    for _ in range(32):
        deep = {"type": "object", "properties": {"a": deep}}
    cases.append(js(schema=deep))
    return cases


BAD_FORMATS = _bad_response_formats()


@pytest.mark.parametrize("response_format", BAD_FORMATS, ids=[f"bad{i}" for i in range(len(BAD_FORMATS))])
def test_bad_response_formats_are_400s_naming_the_field(response_format):
    for schema, body in ((ChatCompletionRequest, CHAT % (", \"response_format\": " + json.dumps(response_format))),
                         (CompletionRequest, json.dumps({"model": "m", "prompt": "p", "response_format": response_format}))):
        error = _error(schema, body)
        assert error.status == 400 and error.param.startswith("response_format"), error.body()
        assert error.body()["error"]["type"] == "invalid_request_error"


def test_min_tokens_is_vllms_extension_bounded_by_max_tokens():
    from hotpath.openai_api.generation import sampling_parameters
    from hotpath.openai_api.schemas import ChatCompletionRequest, CompletionRequest, min_tokens_fault

    chat = ChatCompletionRequest.model_validate({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "max_tokens": 48, "min_tokens": 48})
    assert sampling_parameters(chat)["min_tokens"] == 48 and min_tokens_fault(chat) is None
    over = CompletionRequest.model_validate({"model": "m", "prompt": "hi", "max_tokens": 8, "min_tokens": 9})
    assert min_tokens_fault(over) == "min_tokens"
    assert "min_tokens" not in sampling_parameters(CompletionRequest.model_validate({"model": "m", "prompt": "x"}))
    for bad in (-1, "48", 1.5, True):
        with pytest.raises(ValueError):
            CompletionRequest.model_validate({"model": "m", "prompt": "hi", "min_tokens": bad})
