"""text_generation's request and engine-settings checks (hotpath.runtime.llm), without a server."""

import numpy as np
import pytest

from hotpath.runtime.llm.request import InputError, parse_request, parse_sampling
from hotpath.runtime.llm.settings import EngineSettings, SettingsError, from_parameters


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
    ('{"stop": ' + str(["x"] * 17).replace("'", '"') + '}', "up to 16"), ('{"n": 2}', "unknown key 'n'"),
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
    with pytest.raises(SettingsError, match="parameters.max_batch: unknown engine setting"):
        from_parameters({"max_batch": "16"})
    with pytest.raises(SettingsError, match="default_max_tokens: exceeds max_tokens_limit"):
        from_parameters({"default_max_tokens": "600"})
    with pytest.raises(SettingsError, match="omp_threads_bind"):
        from_parameters({"omp_threads_bind": "0-1;rm"})


def test_engine_settings_are_validated_at_build_time():
    """text_generation's [parameters] (vLLM engine settings) fail `hotpath build`, naming the key."""
    from hotpath.exporters.smollm2 import TextGenerationExporter
    from hotpath.spec import spec_from_dict

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
