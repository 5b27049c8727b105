"""Streaming metrics for generation endpoints: time to first token, inter-token latency, tokens/s.

perf_analyzer reports request latency only; a streaming endpoint is judged by when its first token
arrives (TTFT) and how steadily the rest follow (ITL). `run_load` drives any streaming target with
`concurrency` closed-loop workers, each sending `rounds` prompts; every request yields a
`StreamRecord` of per-token arrival times; `summarize` turns them into the numbers reports show
next to request latency. The SLO file holds TTFT and ITL targets under
`[profiles.<profile>.streaming.<endpoint>]`.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence
from urllib.parse import urlsplit

import numpy as np

from hotpath.sweeps.measure.workers import run_together
from hotpath.tuning.slo import StreamingSlo

# Chat prompts whose greedy replies run long enough (dozens of tokens) to show steady-state ITL.
PROMPTS = [
    "Write a short story about a lighthouse keeper.",
    "Explain how a CPU cache works.",
    "Describe a walk through a forest in autumn.",
    "Give me five tips for writing clean Python code.",
    "What are the main causes of the seasons on Earth?",
    "Tell me about the history of the bicycle.",
    "How do airplanes stay in the air?",
    "Describe your ideal weekend.",
]


@dataclass
class StreamRecord:
    """One streamed request: arrival of each token (seconds since the send), end, or an error."""

    token_times_s: list[float] = field(default_factory=list)
    total_s: float = 0.0
    error: str | None = None


@dataclass(frozen=True)
class StreamingStats:
    label: str
    concurrency: int
    requests: int
    errors: int
    tokens: int
    wall_s: float
    ttft_p50_ms: float
    ttft_p95_ms: float
    itl_p50_ms: float
    itl_p95_ms: float
    latency_p50_ms: float
    latency_p95_ms: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s else 0.0


def _pct(values: Sequence[float], q: float) -> float:
    return float(np.percentile(values, q) * 1000) if len(values) else float("nan")


def summarize(label: str, concurrency: int, records: list[StreamRecord], wall_s: float) -> StreamingStats:
    """Percentiles over requests (TTFT, latency) and over every gap between consecutive tokens (ITL)."""
    ok = [r for r in records if r.error is None and r.token_times_s]
    ttft = [r.token_times_s[0] for r in ok]
    gaps = [g for r in ok for g in np.diff(r.token_times_s)]
    total = [r.total_s for r in ok]
    return StreamingStats(label, concurrency, len(records), len(records) - len(ok), sum(len(r.token_times_s) for r in ok),
                          wall_s, _pct(ttft, 50), _pct(ttft, 95), _pct(gaps, 50), _pct(gaps, 95),
                          _pct(total, 50), _pct(total, 95))


def run_load(send: Callable[[str], StreamRecord], concurrency: int, rounds: int = 2,
             prompts: Sequence[str] = PROMPTS) -> tuple[list[StreamRecord], float]:
    """`concurrency` workers, each sending `rounds` prompts back to back; (records, wall seconds)."""
    records: list[StreamRecord] = []
    lock = threading.Lock()
    barrier = threading.Barrier(concurrency + 1)

    def worker(index: int) -> None:
        barrier.wait()
        for r in range(rounds):
            prompt = prompts[(index * rounds + r) % len(prompts)]
            try:
                record = send(prompt)
            except Exception as exc:  # one failed request is a data point, not the end of the run
                record = StreamRecord(error=str(exc))
            with lock:
                records.append(record)

    return records, run_together(worker, concurrency, barrier)


def triton_sender(url: str, model: str = "text_generation", max_tokens: int = 48) -> Callable[[str], StreamRecord]:
    """Send through hotpath's gRPC streaming client, one client (one stream) per worker thread."""
    from hotpath.client import GenerationClient

    local = threading.local()

    def send(prompt: str) -> StreamRecord:
        if not hasattr(local, "client"):
            local.client = GenerationClient(url, model=model, timeout_s=600)
        result = local.client.generate(prompt, max_tokens=max_tokens)
        return StreamRecord(list(result.token_times_s), result.total_s)

    return send


def ndjson_sender(host: str, port: int, max_tokens: int = 48, path: str = "/generate",
                  payload: Callable[[str], dict] | None = None) -> Callable[[str], StreamRecord]:
    """POST {"prompt", "max_tokens"} (or `payload(prompt)`); the reply streams one JSON line per token
    (chunked HTTP). The body is built before the clock starts."""
    def send(prompt: str) -> StreamRecord:
        body = json.dumps(payload(prompt) if payload else {"prompt": prompt, "max_tokens": max_tokens})
        conn = http.client.HTTPConnection(host, port, timeout=600)
        start = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                return StreamRecord(error=f"HTTP {response.status}: {response.read()[:200]!r}")
            times = []
            for line in response:
                if line.strip() and "token" in json.loads(line):
                    times.append(time.perf_counter() - start)
            return StreamRecord(times, time.perf_counter() - start)
        finally:
            conn.close()

    return send


def sse_sender(base_url: str, model: str, max_tokens: int = 48, chat: bool = True) -> Callable[[str], StreamRecord]:
    """POST an OpenAI `/v1/chat/completions` (or `/v1/completions`) request, streamed, greedy; a token time per
    SSE event that carries text (as a client sees a delta). One connection per request, as the openai SDK's
    default pool does per concurrent stream; the body is built before the clock starts."""
    url = urlsplit(base_url)
    path = "/v1/chat/completions" if chat else "/v1/completions"

    def send(prompt: str) -> StreamRecord:
        fields = {"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}
        body = json.dumps({"model": model, **fields, "max_tokens": max_tokens, "temperature": 0, "stream": True})
        conn = http.client.HTTPConnection(url.hostname, url.port, timeout=600)
        start = time.perf_counter()
        try:
            conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            if response.status != 200:
                return StreamRecord(error=f"HTTP {response.status}: {response.read()[:200]!r}")
            times = []
            for line in response:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                choices = json.loads(line[6:]).get("choices") or ()
                if any((c.get("delta") or {}).get("content") or c.get("text") for c in choices):
                    times.append(time.perf_counter() - start)
            return StreamRecord(times, time.perf_counter() - start)
        finally:
            conn.close()

    return send


def meets(stats: StreamingStats, slo: StreamingSlo) -> bool:
    return stats.errors == 0 and stats.ttft_p95_ms <= slo.ttft_p95_ms and stats.itl_p95_ms <= slo.itl_p95_ms


def markdown_table(rows: list[StreamingStats]) -> str:
    head = ("| system | concurrency | requests (errors) | TTFT p50 / p95 ms | ITL p50 / p95 ms | tokens/s "
            "| request latency p50 / p95 ms |\n|---|---|---|---|---|---|---|\n")
    return head + "\n".join(
        f"| {s.label} | {s.concurrency} | {s.requests} ({s.errors}) | {s.ttft_p50_ms:.0f} / {s.ttft_p95_ms:.0f} "
        f"| {s.itl_p50_ms:.0f} / {s.itl_p95_ms:.0f} | {s.tokens_per_s:.1f} "
        f"| {s.latency_p50_ms:.0f} / {s.latency_p95_ms:.0f} |" for s in rows) + "\n"
