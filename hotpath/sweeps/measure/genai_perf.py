"""genai-perf (Triton's LLM benchmark) with its stock flags, in a venv of its own.

genai-perf 0.0.16 pins versions that conflict with hotpath's (like Model Analyzer), so it lives in
.hotpath/genai-perf-venv, created on first use. It drives perf_analyzer from PATH: the project venv's
(tritonclient 2.50 ships it) goes first, with nvidia/cuda_runtime/lib on LD_LIBRARY_PATH.

    profile(Target.triton(...), concurrency=8, ...)   # --endpoint-type kserve --backend vllm --streaming
    profile(Target.openai(...), concurrency=8, ...)   # --endpoint-type completions --streaming (llama.cpp)

Every run: synthetic prompts of a fixed length from the served model's tokenizer (--random-seed 0, so both
systems get the same prompts), a fixed number of output tokens (max_tokens = min_tokens), warm-up requests
first. The figures come from its profile_export_genai_perf.json.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.sweeps.measure import llm_benchmark
from hotpath.sweeps.measure.llm_benchmark import BenchmarkStats, markdown_table, run_point, tool_venv  # noqa: F401

logger = logging.getLogger(__name__)

GENAI_PERF_VERSION = "0.0.16"


@dataclass
class Target:
    """What genai-perf talks to: its endpoint flags, and headers (the admin key for Triton's statistics)."""
    model: str
    url: str
    flags: list[str]
    headers: list[str] = field(default_factory=list)

    @classmethod
    def triton(cls, model: str, grpc_url: str, admin_key: str | None = None) -> "Target":
        """A Triton model speaking the vLLM backend's tensors, over gRPC streaming (its stock kserve flags)."""
        from hotpath.server.admin import GRPC_HEADER

        return cls(model, grpc_url, ["--endpoint-type", "kserve", "--backend", "vllm"],
                   [f"{GRPC_HEADER}:{admin_key}"] if admin_key else [])

    @classmethod
    def openai(cls, model: str, http_url: str) -> "Target":
        """An OpenAI-compatible /v1/completions server (llama.cpp)."""
        return cls(model, http_url, ["--endpoint-type", "completions"])


def venv(log: Callable[[str], None] = logger.info) -> Path:
    """The genai-perf venv's executable, installed on first use (pinned)."""
    return tool_venv("genai-perf-venv", "genai-perf", f"genai-perf=={GENAI_PERF_VERSION}", log)


def command(exe: Path, target: Target, tokenizer: Path, concurrency: int, requests: int, input_tokens: int,
            output_tokens: int, artifact_dir: Path, warmup: int = 2) -> list[str]:
    """genai-perf's stock profile command line for one point."""
    cmd = [str(exe), "profile", "-m", target.model, *target.flags, "--streaming", "-u", target.url,
           "--tokenizer", str(tokenizer), "--concurrency", str(concurrency), "--request-count", str(requests),
           "--warmup-request-count", str(warmup), "--synthetic-input-tokens-mean", str(input_tokens),
           "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(output_tokens),
           "--output-tokens-stddev", "0", "--random-seed", "0", "--artifact-dir", str(artifact_dir)]
    if "kserve" in target.flags:
        # sampling_parameters {"max_tokens": n, "min_tokens": n}: every request generates n tokens.
        cmd.append("--output-tokens-mean-deterministic")
    else:
        # The OpenAI converter sends max_tokens only; min_tokens travels as an extra body field.
        cmd += ["--extra-inputs", f"min_tokens:{output_tokens}"]
    for header in target.headers:
        cmd += ["-H", header]
    return cmd


def environment() -> dict[str, str]:
    """The project venv's bin (perf_analyzer) first on PATH, libcudart on LD_LIBRARY_PATH."""
    from hotpath.sweeps.measure.perf_analyzer import perf_analyzer_env

    env = perf_analyzer_env()
    env["PATH"] = os.pathsep.join([str(Path(sys.prefix) / "bin"), env.get("PATH", "")])
    return env


def parse_export(data: dict, label: str, concurrency: int) -> BenchmarkStats:
    """BenchmarkStats from genai-perf's JSON export."""
    return llm_benchmark.parse_export(data, label, concurrency, "genai-perf")


def profile(target: Target, label: str, tokenizer: Path, concurrency: int, requests: int, input_tokens: int = 128,
            output_tokens: int = 48, artifact_dir: Path | None = None, timeout_s: float = 1200,
            log: Callable[[str], None] = logger.info) -> BenchmarkStats:
    """One genai-perf point; raises HotpathError with its output's tail when it fails."""
    exe = venv(log)
    artifact_dir = artifact_dir or paths.work_dir() / "genai-perf" / f"{label.replace(' ', '_')}-c{concurrency}"
    cmd = command(exe, target, tokenizer, concurrency, requests, input_tokens, output_tokens, artifact_dir,
                  warmup=max(2, concurrency))
    return run_point("genai-perf", cmd, artifact_dir, "*_genai_perf.json", label, concurrency, target.headers,
                     env=environment(), timeout_s=timeout_s)
