"""text_generation's request and engine-settings checks (hotpath.runtime.llm), without a server."""

import json

import numpy as np
import pytest

from hotpath.runtime.llm.request import (
    MAX_CHOICES,
    MAX_STRUCTURED_BYTES,
    MAX_STRUCTURED_DEPTH,
    InputError,
    parse_request,
    parse_sampling,
)
from hotpath.runtime.llm.settings import EngineSettings, ParameterError, from_parameters


def _arrays(**values):
    out = {}
    for name, value in values.items():
        if isinstance(value, bool):
            out[name] = np.array([value])
        else:
            out[name] = np.array([value.encode() if isinstance(value, str) else value], dtype=np.object_)
    return out


def test_a_chat_request_with_every_option():
    r = parse_request(_arrays(messages='[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]',
                              sampling_parameters='{"max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 40, '
                                                  '"seed": 7, "stop": "."}',
                              stream=True, exclude_input_in_output=True, return_finish_reason=True), 512, 1000)
    assert r.text is None and [m["role"] for m in r.messages] == ["system", "user"]
    assert r.sampling == {"max_tokens": 8, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "seed": 7, "stop": ["."]}
    assert r.stream and r.exclude_input and r.want_finish_reason and not r.want_input_tokens
    assert r.engine_message("x") == {"op": "add", "id": "x", "text": None, "messages": r.messages,
                                     "sampling": r.sampling, "prompt_text": False}


def test_defaults_follow_the_vllm_backend():
    r = parse_request(_arrays(text_input="The capital of France is"), 512, 1000)
    assert r.text == "The capital of France is" and r.sampling == {}
    assert not r.stream and not r.exclude_input   # the whole text, prompt first, in one response
    assert r.engine_message("y")["prompt_text"] is True


@pytest.mark.parametrize("arrays,message", [
    ({}, "exactly one of text_input or messages"),
    ({"text_input": "a", "messages": "[]"}, "exactly one of"),
    ({"text_input": b"\xff"}, "not valid UTF-8"),
    ({"text_input": "x" * 1001}, "1001 bytes, over the 1000-byte limit"),
    ({"text_input": "hi", "stream": True}, "streaming requires exclude_input_in_output = true"),
    ({"messages": '[{"role": "user"}]'}, "exactly the keys role and content"),
    ({"messages": '{"role": "user", "content": "x"}'}, "non-empty JSON list"),
])
def test_bad_requests(arrays, message):
    with pytest.raises(InputError, match=message):
        parse_request(_arrays(**arrays), 512, 1000)


@pytest.mark.parametrize("text,message", [
    ('{"max_tokens": 513}', r"within 1\.\.512"), ('{"max_tokens": 1.0}', "an integer"),
    ('{"temperature": Infinity}', "Infinity is not a number"), ('{"top_p": 1.5}', "top_p"),
    ('{"top_k": -2}', "top_k"), ('{"seed": 2147483648}', "seed"), ('{"stop": ["a", 3]}', "stop"),
    ('{"stop": ' + str(["x"] * 17).replace("'", '"') + '}', "up to 16"), ('{"n": 9}', r"n must be .* 1\.\.8"),
    ('{"n": 0}', r"n must be"), ('{"logprobs": 21}', "logprobs must be"), ('{"logprobs": -1}', "logprobs must be"),
    ('{"best_of": 2}', "unknown key 'best_of'"),
    ("[]", "JSON object"), ("{", "not valid JSON"),
])
def test_bad_sampling_parameters(text, message):
    with pytest.raises(InputError, match=message):
        parse_sampling(text, 512)


def test_null_sampling_values_mean_the_default():
    assert parse_sampling('{"max_tokens": null, "seed": 3}', 512) == {"seed": 3}


def test_engine_settings():
    s = from_parameters({"dtype": "auto", "max_num_seqs": "8", "enable_prefix_caching": "false", "restart": "1",
                         "hotpath.restarted_at": "1764800000.5"})   # the watchdog's reload marker
    assert s.max_num_seqs == 8 and s.enable_prefix_caching is False and s.kv_cache_mib == EngineSettings.kv_cache_mib
    with pytest.raises(ParameterError, match="parameters.max_batch: unknown engine setting"):
        from_parameters({"max_batch": "16"})
    with pytest.raises(ParameterError, match="default_max_tokens: exceeds max_tokens_limit"):
        from_parameters({"default_max_tokens": "600"})
    with pytest.raises(ParameterError, match="omp_threads_bind"):
        from_parameters({"omp_threads_bind": "0-1;rm"})


def test_engine_settings_are_validated_at_build_time():
    """text_generation's [parameters] (vLLM engine settings) fail `hotpath build`, naming the key."""
    from hotpath.exporters.smollm2 import TextGenerationExporter
    from hotpath.specs.spec import spec_from_dict

    def spec(**params):
        return spec_from_dict({"backend": "python", "parameters": params,
                               "hotpath": {"kind": "python", "python_backend": "text_generation",
                                           "exporter": "text_generation"}}, "text_generation")

    assert TextGenerationExporter().source_files(spec(dtype="float32", max_num_seqs=4))
    for params, key in (({"dtype": "float8"}, "dtype"), ({"max_num_seqs": 0}, "max_num_seqs"),
                        ({"kv_cache_mib": "lots"}, "kv_cache_mib"), ({"enforce_eager": "maybe"}, "enforce_eager"),
                        ({"max_batch": 16}, "max_batch"),
                        ({"max_tokens_limit": 4096, "max_model_len": 2048}, "max_tokens_limit")):
        with pytest.raises(Exception, match=f"parameters.{key}"):
            TextGenerationExporter().source_files(spec(**params))


# Structured output: sampling_parameters.structured_outputs, Triton's vLLM-backend key (vLLM's
# StructuredOutputsParams as JSON text; an object is accepted too; guided_decoding is the older spelling).
SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


@pytest.mark.parametrize("value, want", [
    (json.dumps({"json": SCHEMA}), {"json": SCHEMA}),                  # Triton's shape: JSON text
    ({"json": SCHEMA}, {"json": SCHEMA}),
    ({"json": json.dumps(SCHEMA)}, {"json": SCHEMA}),                  # the schema as its JSON text
    ({"json_object": True}, {"json_object": True}),
    ({"regex": r"\d{3}-\d{4}"}, {"regex": r"\d{3}-\d{4}"}),
    ({"choice": ["Positive", "Negative"]}, {"choice": ["Positive", "Negative"]}),
    ({"choice": ["a"], "json": None}, {"choice": ["a"]}),              # null is not set
])
def test_structured_outputs_are_accepted_as_the_vllm_backend_sends_them(value, want):
    for key in ("structured_outputs", "guided_decoding"):
        sampling = parse_sampling(json.dumps({"max_tokens": 8, key: value}), 512)
        assert sampling == {"max_tokens": 8, "structured_outputs": want}
    r = parse_request(_arrays(text_input="hi", sampling_parameters=json.dumps({"structured_outputs": value})), 512, 1000)
    assert r.engine_message("z")["sampling"] == {"structured_outputs": want}
    assert parse_sampling('{"structured_outputs": null}', 512) == {}


def _nested(depth: int):
    value = {"type": "string"}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def test_structured_output_bounds_are_exact():
    assert _depth_ok(_nested(MAX_STRUCTURED_DEPTH)) and not _depth_ok(_nested(MAX_STRUCTURED_DEPTH + 1))
    at_limit = "a" * (MAX_STRUCTURED_BYTES - 2)                       # + its two quotes: the limit exactly
    assert parse_sampling(json.dumps({"structured_outputs": {"regex": at_limit}}), 512)
    with pytest.raises(InputError, match=r"structured_outputs\.regex is 16385 bytes"):
        parse_sampling(json.dumps({"structured_outputs": {"regex": at_limit + "a"}}), 512)
    assert parse_sampling(json.dumps({"structured_outputs": {"choice": ["x"] * MAX_CHOICES}}), 512)


def _depth_ok(schema) -> bool:
    try:
        parse_sampling(json.dumps({"structured_outputs": {"json": schema}}), 512)
    except InputError as exc:
        assert "nested deeper than" in str(exc)
        return False
    return True


def _bad_structured_values():
    """A generated corpus: each a structured_outputs value (or sampling_parameters text) that must be refused."""
    wrong = [1, 2.5, True, False, [], {}, "", "x", [1], ["a", 1], None]
    cases = []
    for value in wrong:                                                 # the whole value of the wrong type
        if not isinstance(value, (dict, str)) and value is not None:
            cases.append(("value", value))
    for kind, fine in (("json", SCHEMA), ("json_object", True), ("regex", "a+"), ("choice", ["a", "b"])):
        for value in wrong:
            if value is None or value == fine or (kind == "json" and value == {}) or (kind == "regex" and value == "x"):
                continue   # null is "not set"; {} is a schema (any value); "x" is a regex
            cases.append((kind, {kind: value}))
        for other in ("json", "json_object", "regex", "choice"):       # two kinds at once
            if other != kind:
                cases.append((f"{kind}+{other}", {kind: fine, other: {"json": SCHEMA, "json_object": True,
                                                                       "regex": "b", "choice": ["c"]}[other]}))
        cases.append((f"{kind} as text", json.dumps({kind: fine})[:-1]))   # truncated JSON text
    cases += [
        ("none set", {}), ("all null", {"json": None, "regex": None}),
        ("grammar", {"grammar": "root ::= 'a'"}), ("structural_tag", {"structural_tag": "{}"}),
        ("whitespace", {"json": SCHEMA, "disable_any_whitespace": True}), ("backend", {"json": SCHEMA, "_backend": "x"}),
        ("schema text a list", {"json": "[1]"}), ("schema text NaN", {"json": '{"minimum": NaN}'}),
        ("schema not JSON", {"json": "{type: object}"}), ("text a list", "[1]"), ("text a number", "3"),
        ("regex too long", {"regex": "a" * MAX_STRUCTURED_BYTES}),
        ("schema too big", {"json": {"description": "d" * MAX_STRUCTURED_BYTES}}),
        ("schema text too big", {"json": json.dumps({"description": "d" * MAX_STRUCTURED_BYTES})}),
        ("whole text too big", json.dumps({"regex": "a" * (MAX_STRUCTURED_BYTES + 1)})),
        ("schema too deep", {"json": _nested(MAX_STRUCTURED_DEPTH + 1)}),
        ("schema text too deep", {"json": json.dumps(_nested(MAX_STRUCTURED_DEPTH + 1))}),
        ("schema text deeper than Python", {"json": "[" * 100_000}),
        ("choices too many", {"choice": ["x"] * (MAX_CHOICES + 1)}),
        ("choices too big", {"choice": ["c" * 1000] * 17}),
        ("choice empty string", {"choice": ["a", ""]}), ("choice a string", {"choice": "ab"}),
        ("json_object 1", {"json_object": 1}), ("json_object text", {"json_object": "true"}),
    ]
    return cases


BAD_STRUCTURED = _bad_structured_values()


@pytest.mark.parametrize("name, value", BAD_STRUCTURED, ids=[c[0] for c in BAD_STRUCTURED])
def test_bad_structured_outputs_are_input_errors_naming_the_key(name, value):
    for key in ("structured_outputs", "guided_decoding"):
        with pytest.raises(InputError, match=key) as exc:
            parse_sampling(json.dumps({key: value}), 512)
        assert len(str(exc.value)) <= 300


def test_corpus_is_not_trivially_small():
    assert len(BAD_STRUCTURED) >= 60


@pytest.mark.parametrize("text, message", [
    ('{"structured_outputs": {"regex": "a"}, "guided_decoding": {"regex": "b"}}', "not both"),
    ('{"structured_outputs": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ('{"guided_json": {}}', "unknown key 'guided_json'"),
])
def test_structured_output_spellings(text, message):
    with pytest.raises(InputError, match=message):
        parse_sampling(text, 512)
