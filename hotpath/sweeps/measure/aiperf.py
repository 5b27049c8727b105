"""AIPerf (NVIDIA's LLM benchmark, genai-perf's successor) in a venv of its own.

AIPerf's pins (pydantic 2, orjson, its own transformers) are not hotpath's, so it lives in
.hotpath/aiperf-venv, created on first use. It speaks HTTP only; each door is one target:

    Target.openai_chat(model, "http://127.0.0.1:8080")   # /v1/chat/completions, streamed (hotpath's OpenAI API,
                                                          # vLLM's own server, llama.cpp's server)
    Target.triton_generate(model, "http://127.0.0.1:8000")  # Triton's KServe generate extension,
                                                          # /v2/models/<model>/generate_stream (the vLLM backend's
                                                          # text_input / text_output tensors)

Every run: synthetic prompts of a fixed length from the served model's tokenizer (--random-seed 0, the same
prompts for every system), a fixed number of output tokens (min = max), warm-up requests first. The figures
come from its profile_export_aiperf.json.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.sweeps.measure import llm_benchmark
from hotpath.sweeps.measure.llm_benchmark import BenchmarkStats, run_point, tool_venv  # noqa: F401

logger = logging.getLogger(__name__)

AIPERF_VERSION = "0.13.0"

# Triton's generate_stream body, as Triton's vLLM backend reads it (AIPerf's template endpoint renders it per
# request; `text` is the synthetic prompt). min_tokens = max_tokens: every request generates the same count.
TRITON_TEMPLATE = ('{"text_input": {{ text|tojson }}, "stream": true, "exclude_input_in_output": true, '
                   '"sampling_parameters": "{\\"max_tokens\\": %d, \\"min_tokens\\": %d, \\"temperature\\": 0}"}')


@dataclass
class Target:
    """What AIPerf talks to: its endpoint flags, and extra headers."""

    model: str
    url: str
    flags: list[str]
    headers: list[str] = field(default_factory=list)
    door: str = "openai"

    @classmethod
    def openai_chat(cls, model: str, http_url: str, api_key: str | None = None) -> "Target":
        """An OpenAI-compatible /v1/chat/completions server, streamed."""
        return cls(model, http_url, ["--endpoint-type", "chat"], [f"Authorization:Bearer {api_key}"] if api_key else [])

    @classmethod
    def openai_completions(cls, model: str, http_url: str) -> "Target":
        """An OpenAI-compatible /v1/completions server, streamed (the lab's llama.cpp server speaks this one)."""
        return cls(model, http_url, ["--endpoint-type", "completions"])

    @classmethod
    def triton_generate(cls, model: str, http_url: str) -> "Target":
        """A Triton model behind the KServe generate extension (POST /v2/models/<model>/generate_stream, SSE)."""
        return cls(model, http_url, ["--endpoint-type", "template", "--custom-endpoint",
                                     f"/v2/models/{model}/generate_stream"], door="triton")


def venv(log: Callable[[str], None] = logger.info) -> Path:
    """The AIPerf venv's executable, installed on first use (pinned)."""
    return tool_venv("aiperf-venv", "aiperf", f"aiperf=={AIPERF_VERSION}", log)


def command(exe: Path, target: Target, tokenizer: Path, concurrency: int, requests: int, input_tokens: int,
            output_tokens: int, artifact_dir: Path, warmup: int = 2) -> list[str]:
    """AIPerf's profile command line for one point."""
    cmd = [str(exe), "profile", "--model-names", target.model, *target.flags, "--streaming", "--url", target.url,
           "--tokenizer", str(tokenizer), "--concurrency", str(concurrency), "--request-count", str(requests),
           "--warmup-request-count", str(warmup), "--prompt-input-tokens-mean", str(input_tokens),
           "--prompt-input-tokens-stddev", "0", "--prompt-output-tokens-mean", str(output_tokens),
           "--prompt-output-tokens-stddev", "0", "--random-seed", "0", "--artifact-dir", str(artifact_dir),
           "--ui-type", "none", "--no-server-metrics", "--no-gpu-telemetry"]
    if target.door == "triton":
        cmd += ["--extra-inputs", json.dumps({"payload_template": TRITON_TEMPLATE % (output_tokens, output_tokens),
                                              "response_field": "text_output"})]
    else:
        cmd += ["--extra-inputs", f"min_tokens:{output_tokens}"]   # vLLM's extension; hotpath's API and llama.cpp take it
    for header in target.headers:
        cmd += ["--header", header]
    return cmd


def parse_export(data: dict, label: str, concurrency: int) -> BenchmarkStats:
    """BenchmarkStats from aiperf's JSON export."""
    return llm_benchmark.parse_export(data, label, concurrency, "aiperf")


def profile(target: Target, label: str, tokenizer: Path, concurrency: int, requests: int, input_tokens: int = 128,
            output_tokens: int = 48, artifact_dir: Path | None = None, timeout_s: float = 1200,
            log: Callable[[str], None] = logger.info) -> BenchmarkStats:
    """One AIPerf point; raises HotpathError with its output's tail when it fails."""
    exe = venv(log)
    artifact_dir = artifact_dir or paths.work_dir() / "aiperf" / f"{label.replace(' ', '_')}-c{concurrency}"
    cmd = command(exe, target, tokenizer, concurrency, requests, input_tokens, output_tokens, artifact_dir,
                  warmup=max(2, concurrency))
    return run_point("aiperf", cmd, artifact_dir, "profile_export_aiperf.json", label, concurrency, target.headers,
                     timeout_s=timeout_s)
