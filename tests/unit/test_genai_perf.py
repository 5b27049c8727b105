"""The genai-perf runner (hotpath.perf.measure.genai_perf): its stock command lines and its export parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotpath.errors import HotpathError
from hotpath.perf.measure import genai_perf as gp


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_triton_command_uses_the_stock_kserve_vllm_flags():
    target = gp.Target.triton("text_generation", "127.0.0.1:8001", admin_key="k3y")
    cmd = gp.command(Path("/v/genai-perf"), target, Path("/tok"), concurrency=8, requests=40, input_tokens=128,
                     output_tokens=48, artifact_dir=Path("/a"))
    assert cmd[:4] == ["/v/genai-perf", "profile", "-m", "text_generation"]
    assert (_flag(cmd, "--endpoint-type"), _flag(cmd, "--backend"), _flag(cmd, "-u")) == ("kserve", "vllm",
                                                                                        "127.0.0.1:8001")
    assert "--streaming" in cmd and "--output-tokens-mean-deterministic" in cmd
    assert (_flag(cmd, "--concurrency"), _flag(cmd, "--request-count"), _flag(cmd, "--output-tokens-mean")) == \
        ("8", "40", "48")
    assert _flag(cmd, "-H") == "triton-grpc-protocol-admin-key:k3y"
    assert "--extra-inputs" not in cmd   # an extra tensor the model does not declare would be refused


def test_openai_command_fixes_the_output_length_with_min_tokens():
    cmd = gp.command(Path("g"), gp.Target.openai("m", "http://127.0.0.1:9"), Path("/tok"), 1, 10, 128, 48, Path("/a"))
    assert _flag(cmd, "--endpoint-type") == "completions" and "--backend" not in cmd
    assert _flag(cmd, "--extra-inputs") == "min_tokens:48" and "-H" not in cmd


def _export(**over) -> dict:
    stats = {"avg": 10.0, "p50": 9.0, "p95": 20.0}
    data = {name: dict(stats) for name in ("time_to_first_token", "inter_token_latency", "request_latency",
                                           "output_sequence_length")}
    data |= {"request_count": {"avg": 40.0}, "output_token_throughput": {"avg": 123.4},
             "request_throughput": {"avg": 2.5}}
    data["inter_token_latency"] = {"avg": 31.0, "p50": 30.0, "p95": 45.0}
    return data | over


def test_parse_export_reads_the_figures():
    s = gp.parse_export(_export(), "hotpath", 8)
    assert (s.label, s.concurrency, s.requests, s.output_tokens_per_s) == ("hotpath", 8, 40, 123.4)
    assert (s.ttft_p50_ms, s.ttft_p95_ms) == (9.0, 20.0)
    assert (s.itl_p50_ms, s.itl_mean_ms, s.itl_p95_ms) == (30.0, 31.0, 45.0)
    assert "| hotpath | 8 | 40 | 123.4 | 9 / 20 | 30.0 / 31.0 / 45.0 |" in gp.markdown_table([s])


def test_parse_export_names_a_missing_metric():
    data = _export()
    del data["time_to_first_token"]
    with pytest.raises(HotpathError, match="time_to_first_token"):
        gp.parse_export(data, "x", 1)


def test_text_generation_accepts_genai_perfs_sampling_parameters():
    """genai-perf's vLLM converter sends numbers as strings, as Triton's vLLM backend takes them."""
    from hotpath.runtime.llm.request import InputError, parse_sampling

    assert parse_sampling('{"max_tokens": "48", "min_tokens": "48"}', 1024) == {"max_tokens": 48, "min_tokens": 48}
    assert parse_sampling('{"temperature": "0.5", "top_k": "-1"}', 1024) == {"temperature": 0.5, "top_k": -1}
    for bad in ('{"max_tokens": "4.5"}', '{"max_tokens": "many"}', '{"temperature": "nan"}',
                '{"max_tokens": "4", "min_tokens": "5"}', '{"max_tokens": "2000"}'):
        with pytest.raises(InputError):
            parse_sampling(bad, 1024)
