"""What the LLM benchmark tools (genai-perf, AIPerf) share: a pinned venv of their own, one point's run, the
figures of their JSON export (both name their metrics alike) and the table of them."""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import HotpathError

logger = logging.getLogger(__name__)


def tool_venv(folder: str, executable: str, requirement: str, log: Callable[[str], None] = logger.info) -> Path:
    """`executable` in .hotpath/<folder>, a venv with `requirement` installed on first use (its pins are not ours)."""
    root = paths.work_dir() / folder
    exe = root / "bin" / executable
    if not exe.exists():
        log(f"[{executable}] installing {requirement} into {root} (first use only)")
        subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
        subprocess.run([str(root / "bin" / "pip"), "install", "-q", requirement], check=True)
    return exe


@dataclass
class BenchmarkStats:
    """One point's figures (ms, tokens/s) as the tool's JSON export states them."""
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


def parse_export(data: dict, label: str, concurrency: int, tool: str) -> BenchmarkStats:
    """BenchmarkStats from the export's content (genai-perf's *_genai_perf.json, AIPerf's profile_export_aiperf.json)."""
    def stat(metric: str, key: str) -> float:
        try:
            return float(data[metric][key])
        except (KeyError, TypeError, ValueError):
            raise HotpathError(f"{tool} export has no {metric}.{key} (keys: {sorted(data)})") from None

    return BenchmarkStats(
        label, concurrency, int(stat("request_count", "avg")), stat("output_token_throughput", "avg"),
        stat("request_throughput", "avg"), stat("time_to_first_token", "p50"), stat("time_to_first_token", "p95"),
        stat("inter_token_latency", "p50"), stat("inter_token_latency", "avg"), stat("inter_token_latency", "p95"),
        stat("request_latency", "p95"), stat("output_sequence_length", "avg"))


def run_point(tool: str, cmd: list[str], artifact_dir: Path, export_glob: str, label: str, concurrency: int,
              headers: list[str], env: dict | None = None, timeout_s: float = 1200) -> BenchmarkStats:
    """Run one point's command into a fresh `artifact_dir` (its output kept as <tool>.log beside the export);
    raises HotpathError with the output's tail, headers masked, when it fails."""
    shutil.rmtree(artifact_dir, ignore_errors=True)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s, cwd=paths.work_dir())
    artifact_dir.mkdir(parents=True, exist_ok=True)
    (artifact_dir / f"{tool}.log").write_text(done.stdout + done.stderr)
    found = sorted(artifact_dir.rglob(export_glob))
    if done.returncode != 0 or not found:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-12:])
        for header in headers:
            tail = tail.replace(header, "<header>")
        raise HotpathError(f"{tool} failed for {label} at c={concurrency} (log {artifact_dir}/{tool}.log):\n" + tail)
    return parse_export(json.loads(found[0].read_text()), label, concurrency, tool)


def markdown_table(rows: list[BenchmarkStats]) -> str:
    lines = ["| system | concurrency | requests | output tok/s | TTFT p50 / p95 ms | ITL p50 / mean / p95 ms "
             "| request p95 ms | output tokens mean |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.label} | {r.concurrency} | {r.requests} | {r.output_tokens_per_s:.1f} "
                     f"| {r.ttft_p50_ms:.0f} / {r.ttft_p95_ms:.0f} | {r.itl_p50_ms:.1f} / {r.itl_mean_ms:.1f} / "
                     f"{r.itl_p95_ms:.1f} | {r.latency_p95_ms:.0f} | {r.output_tokens_mean:.1f} |")
    return "\n".join(lines)
