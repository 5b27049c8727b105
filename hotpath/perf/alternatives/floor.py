"""(f) The in-process floor: the pipeline in one process, no server, best batch size."""

from __future__ import annotations

import statistics
import time
from typing import Callable

import numpy as np

from hotpath.perf.alternatives.text_pipeline import TextPipeline

Runner = Callable[[int], None]  # run one batch of the given size


def time_batches(make_runner: Callable[[bool], Runner], batch_sizes, seconds: float, unit: str,
                 log=print) -> list[dict]:
    """Throughput and per-batch latency for each batch size, ORT spinning off and on.

    `make_runner(allow_spinning)` returns a callable that processes one batch of a given size.
    """
    rows = []
    for spinning in (False, True):
        run = make_runner(spinning)
        for bs in batch_sizes:
            run(bs)  # warm up this shape
            latencies, n, t0 = [], 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                t1 = time.perf_counter()
                run(bs)
                latencies.append(time.perf_counter() - t1)
                n += bs
            row = {"batch": bs, "spinning": spinning, "throughput": n / (time.perf_counter() - t0),
                   "p50_ms": statistics.median(latencies) * 1e3,
                   "p95_ms": float(np.percentile(latencies, 95)) * 1e3}
            rows.append(row)
            log(f"[perf]      floor batch {bs:2d} spinning {'on ' if spinning else 'off'}: {row['throughput']:6.1f} "
                f"{unit}/s, batch p95 {row['p95_ms']:.1f} ms")
    return rows


def measure_floor(texts: list[str], batch_sizes=(1, 4, 8, 16), seconds: float = 3.0, threads: int = 2,
                  log=print) -> list[dict]:
    """Tokenizer + ORT in one process over `texts`, cycling through them batch by batch."""
    def make_runner(spinning: bool) -> Runner:
        pipe = TextPipeline(threads, allow_spinning=spinning)
        position = [0]

        def run(bs: int) -> None:
            start = position[0] if position[0] + bs <= len(texts) else 0
            pipe(texts[start:start + bs])
            position[0] = start + bs
        return run

    return time_batches(make_runner, batch_sizes, seconds, "texts", log)
