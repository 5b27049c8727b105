"""The genai-perf runner (hotpath.sweeps.measure.genai_perf): its stock command lines and its export parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotpath.errors import HotpathError
from hotpath.sweeps.measure import genai_perf as gp
from hotpath.sweeps.measure.llm_benchmark import BenchmarkStats


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


def _row(label: str, c: int, tok_s: float, ttft_p95: float, itl_p50: float = 30.0, itl_mean: float = 31.0):
    return BenchmarkStats(label, c, 8, tok_s, 1.0, ttft_p95 / 2, ttft_p95, itl_p50, itl_mean, 40.0, 900.0, 48.0)


def test_goals_are_judged_against_llama_cpp_and_the_old_engine():
    from perf.lab.compare.generation import genai_goals

    rows = [_row("hotpath", 8, 250.0, 400.0), _row("llama.cpp", 8, 100.0, 2000.0),
            _row("hotpath", 1, 30.0, 100.0, 25.0, 26.0), _row("llama.cpp", 1, 50.0, 90.0, 15.0, 20.0)]
    goals = "\n".join(genai_goals(rows, {"hotpath": (40.0, 3000.0)}, old_itl=(36.0, 37.0)))
    assert "2.50x (goal >= 2.5x): **MET**" in goals
    assert "0.20x (goal <= 0.25x): **MET**" in goals
    assert "(goal: both below): **MET**" in goals and "load to ready 40.0 s (goal <= 45 s): **MET**" in goals
    worse = "\n".join(genai_goals([_row("hotpath", 8, 249.0, 600.0), _row("llama.cpp", 8, 100.0, 2000.0)],
                                  {"hotpath": (46.0, 1.0)}, None))
    assert worse.count("MISSED") == 3


def test_a_section_is_replaced_in_place_and_the_rest_kept(tmp_path):
    from perf.lab.compare.generation import GENAI_BEGIN, GENAI_END, write_section

    report = tmp_path / "r.md"
    report.write_text("# title\n\nold-vs-new section by someone else\n")
    write_section(report, f"{GENAI_BEGIN}\nfirst\n{GENAI_END}")
    write_section(report, f"{GENAI_BEGIN}\nsecond\n{GENAI_END}")
    text = report.read_text()
    assert "old-vs-new section by someone else" in text and "second" in text and "first" not in text
    assert text.count(GENAI_BEGIN) == 1
