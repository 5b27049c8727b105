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
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import HotpathError

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


@dataclass
class AIPerfStats:
    """One AIPerf run's figures (ms, tokens/s) as its JSON export states them."""

    label: str
    concurrency: int
    requests: int
    output_tokens_per_s: float
    requests_per_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    itl_p50_ms: float
    itl_mean_ms: float
    itl_p95_ms: float
    latency_p95_ms: float
    output_tokens_mean: float


def venv(log: Callable[[str], None] = logger.info) -> Path:
    """The AIPerf venv's executable, installed on first use (pinned)."""
    root = paths.work_dir() / "aiperf-venv"
    exe = root / "bin" / "aiperf"
    if not exe.exists():
        log(f"[aiperf] installing aiperf=={AIPERF_VERSION} into {root} (first use only, ~2 min)")
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([str(root / "bin" / "pip"), "install", "-q", f"aiperf=={AIPERF_VERSION}"], check=True)
    return exe


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


def parse_export(data: dict, label: str, concurrency: int) -> AIPerfStats:
    """AIPerfStats from profile_export_aiperf.json's content."""
    def stat(metric: str, key: str) -> float:
        try:
            return float(data[metric][key])
        except (KeyError, TypeError, ValueError):
            raise HotpathError(f"AIPerf export has no {metric}.{key} (keys: {sorted(data)})") from None

    return AIPerfStats(
        label, concurrency, int(stat("request_count", "avg")), stat("output_token_throughput", "avg"),
        stat("request_throughput", "avg"), stat("time_to_first_token", "p50"), stat("time_to_first_token", "p95"),
        stat("inter_token_latency", "p50"), stat("inter_token_latency", "avg"), stat("inter_token_latency", "p95"),
        stat("request_latency", "p95"), stat("output_sequence_length", "avg"))


def profile(target: Target, label: str, tokenizer: Path, concurrency: int, requests: int, input_tokens: int = 128,
            output_tokens: int = 48, artifact_dir: Path | None = None, timeout_s: float = 1200,
            log: Callable[[str], None] = logger.info) -> AIPerfStats:
    """One AIPerf point; raises HotpathError with its output's tail when it fails."""
    exe = venv(log)
    artifact_dir = artifact_dir or paths.work_dir() / "aiperf" / f"{label.replace(' ', '_')}-c{concurrency}"
    shutil.rmtree(artifact_dir, ignore_errors=True)
    cmd = command(exe, target, tokenizer, concurrency, requests, input_tokens, output_tokens, artifact_dir,
                  warmup=max(2, concurrency))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=paths.work_dir())
    artifact_dir.mkdir(parents=True, exist_ok=True)
    (artifact_dir / "aiperf.log").write_text(done.stdout + done.stderr)
    found = sorted(artifact_dir.rglob("profile_export_aiperf.json"))
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        for header in target.headers:
            tail = tail.replace(header, "<header>")
        raise HotpathError(f"AIPerf failed for {label} at c={concurrency} (log {artifact_dir}/aiperf.log):\n" + tail)
    return parse_export(json.loads(found[0].read_text()), label, concurrency)
