"""The AIPerf runner (hotpath.sweeps.measure.aiperf): its command lines per door and its export parsing."""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest

from hotpath.errors import HotpathError
from hotpath.sweeps.measure import aiperf as ap


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def _cmd(target: ap.Target) -> list[str]:
    return ap.command(Path("/v/aiperf"), target, Path("/tok"), concurrency=8, requests=40, input_tokens=128,
                      output_tokens=48, artifact_dir=Path("/a"))


def test_triton_door_posts_generate_stream_with_a_fixed_output_length():
    cmd = _cmd(ap.Target.triton_generate("text_generation", "http://127.0.0.1:8000"))
    assert cmd[:2] == ["/v/aiperf", "profile"] and _flag(cmd, "--model-names") == "text_generation"
    assert _flag(cmd, "--endpoint-type") == "template" and "--streaming" in cmd
    assert _flag(cmd, "--custom-endpoint") == "/v2/models/text_generation/generate_stream"
    extra = json.loads(_flag(cmd, "--extra-inputs"))
    assert extra["response_field"] == "text_output"
    # The template renders the body Triton's vLLM backend reads, with max_tokens = min_tokens = 48.
    body = json.loads(jinja2.Environment(autoescape=True).from_string(extra["payload_template"])
                      .render(text='say "hi" <b>'))
    assert body["text_input"] == 'say "hi" <b>' and body["stream"] is True and body["exclude_input_in_output"]
    assert json.loads(body["sampling_parameters"]) == {"max_tokens": 48, "min_tokens": 48, "temperature": 0}


def test_openai_doors_fix_the_output_length_with_min_tokens():
    chat = _cmd(ap.Target.openai_chat("text_generation", "http://127.0.0.1:8080", api_key="k"))
    assert _flag(chat, "--endpoint-type") == "chat" and _flag(chat, "--extra-inputs") == "min_tokens:48"
    assert _flag(chat, "--header") == "Authorization:Bearer k"
    completions = _cmd(ap.Target.openai_completions("m", "http://127.0.0.1:9"))
    assert _flag(completions, "--endpoint-type") == "completions" and "--header" not in completions
    assert (_flag(completions, "--concurrency"), _flag(completions, "--request-count"),
            _flag(completions, "--prompt-output-tokens-mean")) == ("8", "40", "48")


def _export() -> dict:
    """The metrics of profile_export_aiperf.json that the runner reads, in AIPerf 0.13's shape."""
    stats = {"unit": "ms", "avg": 10.0, "p50": 9.0, "p95": 20.0}
    data = {name: dict(stats) for name in ("time_to_first_token", "inter_token_latency", "request_latency",
                                           "output_sequence_length")}
    data.update(request_count={"unit": "requests", "avg": 40.0},
                output_token_throughput={"unit": "tokens/sec", "avg": 300.5},
                request_throughput={"unit": "requests/sec", "avg": 6.2})
    return data


def test_export_figures_are_read_by_name():
    r = ap.parse_export(_export(), "hotpath openai", 8)
    assert (r.label, r.concurrency, r.requests, r.output_tokens_per_s, r.ttft_p95_ms, r.itl_p50_ms) == \
        ("hotpath openai", 8, 40, 300.5, 20.0, 9.0)


def test_a_missing_metric_names_itself():
    data = _export()
    del data["inter_token_latency"]
    with pytest.raises(HotpathError, match="inter_token_latency.p50"):
        ap.parse_export(data, "x", 1)
