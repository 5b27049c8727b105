"""(f) The in-process floor: tokenizer + ONNX Runtime in one process, no server, best batch size."""

from __future__ import annotations

import statistics
import time

import numpy as np

from hotpath.perf.alternatives.text_pipeline import TextPipeline


def measure_floor(texts: list[str], batch_sizes=(1, 4, 8, 16), seconds: float = 3.0, threads: int = 2,
                  log=print) -> list[dict]:
    """Throughput and per-batch latency percentiles for each batch size (spinning on and off)."""
    rows = []
    for spinning in (False, True):
        pipe = TextPipeline(threads, allow_spinning=spinning)
        for bs in batch_sizes:
            batches = [texts[i:i + bs] for i in range(0, len(texts) - bs + 1, bs)] or [texts[:bs]]
            pipe(batches[0])
            latencies, n, t0 = [], 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for b in batches:
                    t1 = time.perf_counter()
                    pipe(b)
                    latencies.append(time.perf_counter() - t1)
                    n += len(b)
            elapsed = time.perf_counter() - t0
            row = {"batch": bs, "spinning": spinning, "throughput": n / elapsed,
                   "p50_ms": statistics.median(latencies) * 1e3,
                   "p95_ms": float(np.percentile(latencies, 95)) * 1e3}
            rows.append(row)
            log(f"[perf]      floor batch {bs:2d} spinning {'on ' if spinning else 'off'}: {row['throughput']:6.1f} "
                f"texts/s, batch p95 {row['p95_ms']:.1f} ms")
    return rows
