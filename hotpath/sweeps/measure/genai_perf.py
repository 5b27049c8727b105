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

import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import HotpathError

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


@dataclass
class GenaiPerfStats:
    """One genai-perf run's figures (ms, tokens/s) as its JSON export states them."""
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
    """The genai-perf venv's executable, installed on first use (pinned)."""
    root = paths.work_dir() / "genai-perf-venv"
    exe = root / "bin" / "genai-perf"
    if not exe.exists():
        log(f"[genai-perf] installing genai-perf=={GENAI_PERF_VERSION} into {root} (first use only)")
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([str(root / "bin" / "pip"), "install", "-q", f"genai-perf=={GENAI_PERF_VERSION}"], check=True)
    return exe


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


def parse_export(data: dict, label: str, concurrency: int) -> GenaiPerfStats:
    """GenaiPerfStats from profile_export_genai_perf.json's content."""
    def stat(metric: str, key: str) -> float:
        try:
            return float(data[metric][key])
        except (KeyError, TypeError, ValueError):
            raise HotpathError(f"genai-perf export has no {metric}.{key} (keys: {sorted(data)})") from None

    return GenaiPerfStats(
        label, concurrency, int(stat("request_count", "avg")), stat("output_token_throughput", "avg"),
        stat("request_throughput", "avg"), stat("time_to_first_token", "p50"), stat("time_to_first_token", "p95"),
        stat("inter_token_latency", "p50"), stat("inter_token_latency", "avg"), stat("inter_token_latency", "p95"),
        stat("request_latency", "p95"), stat("output_sequence_length", "avg"))


def profile(target: Target, label: str, tokenizer: Path, concurrency: int, requests: int, input_tokens: int = 128,
            output_tokens: int = 48, artifact_dir: Path | None = None, timeout_s: float = 1200,
            log: Callable[[str], None] = logger.info) -> GenaiPerfStats:
    """One genai-perf point; raises HotpathError with its output's tail when it fails."""
    exe = venv(log)
    artifact_dir = artifact_dir or paths.work_dir() / "genai-perf" / f"{label.replace(' ', '_')}-c{concurrency}"
    shutil.rmtree(artifact_dir, ignore_errors=True)
    cmd = command(exe, target, tokenizer, concurrency, requests, input_tokens, output_tokens, artifact_dir,
                  warmup=max(2, concurrency))
    done = subprocess.run(cmd, env=environment(), capture_output=True, text=True, timeout=timeout_s,
                          cwd=paths.work_dir())
    (artifact_dir).mkdir(parents=True, exist_ok=True)
    (artifact_dir / "genai-perf.log").write_text(done.stdout + done.stderr)
    found = sorted(artifact_dir.rglob("*_genai_perf.json"))
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        for header in target.headers:
            tail = tail.replace(header, "<header>")
        raise HotpathError(f"genai-perf failed for {label} at c={concurrency} (log {artifact_dir}/genai-perf.log):\n"
                           + tail)
    return parse_export(json.loads(found[0].read_text()), label, concurrency)


def markdown_table(rows: list[GenaiPerfStats]) -> str:
    lines = ["| system | concurrency | requests | output tok/s | TTFT p50 / p95 ms | ITL p50 / mean / p95 ms "
             "| request p95 ms | output tokens mean |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.label} | {r.concurrency} | {r.requests} | {r.output_tokens_per_s:.1f} "
                     f"| {r.ttft_p50_ms:.0f} / {r.ttft_p95_ms:.0f} | {r.itl_p50_ms:.1f} / {r.itl_mean_ms:.1f} / "
                     f"{r.itl_p95_ms:.1f} | {r.latency_p95_ms:.0f} | {r.output_tokens_mean:.1f} |")
    return "\n".join(lines)
