"""The in-process floor: an endpoint's pipeline in one process, no server, best batch size.

Measured in the same run as the server it is compared with, so a report's ratios to it can be
read side by side across machines.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

logger = logging.getLogger(__name__)

Runner = Callable[[int], None]  # run one batch of the given size


def time_batches(make_runner: Callable[[bool], Runner], batch_sizes, seconds: float, unit: str,
                 log=logger.info) -> list[dict]:
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
                f"{unit}/s, batch p50 {row['p50_ms']:.1f} ms, p95 {row['p95_ms']:.1f} ms")
    return rows


@dataclass(frozen=True)
class Floor:
    """The floor's rows (one per batch size and spinning setting) and what reports compare with."""

    unit: str
    rows: list[dict]

    def best(self, p95_ms: float) -> dict | None:
        """The highest-throughput row whose batch p95 meets the target."""
        ok = [r for r in self.rows if r["p95_ms"] <= p95_ms]
        return max(ok, key=lambda r: r["throughput"]) if ok else None

    def throughput(self, p95_ms: float) -> float:
        best = self.best(p95_ms)
        return best["throughput"] if best else 0.0

    def single_p50_ms(self) -> float:
        """p50 of one input alone (batch 1), the better spinning setting."""
        return min((r["p50_ms"] for r in self.rows if r["batch"] == 1), default=0.0)

    def describe(self, p95_ms: float) -> str:
        best = self.best(p95_ms)
        peak = max(self.rows, key=lambda r: r["throughput"])
        within = (f"{best['throughput']:.1f} {self.unit}/s at batch {best['batch']} (spinning "
                  f"{'on' if best['spinning'] else 'off'})" if best else f"nothing within p95 {p95_ms:g} ms")
        return (f"{within}; batch-1 p50 {self.single_p50_ms():.2f} ms; peak {peak['throughput']:.1f} {self.unit}/s "
                f"at batch {peak['batch']}")


def measure_floor(make_pipeline: Callable[[int, bool], Callable], samples: list, batch_sizes=(1, 4, 8, 16),
                  seconds: float = 3.0, threads: int = 2, unit: str = "inputs", log=logger.info) -> Floor:
    """`make_pipeline(threads, allow_spinning)` over `samples`, cycling through them batch by batch."""
    def make_runner(spinning: bool) -> Runner:
        pipe = make_pipeline(threads, spinning)
        position = [0]

        def run(bs: int) -> None:
            start = position[0] if position[0] + bs <= len(samples) else 0
            batch = samples[start:start + bs]
            pipe((batch * (bs // len(batch) + 1))[:bs])  # fewer samples than the batch: repeat them
            position[0] = start + bs
        return run

    return Floor(unit, time_batches(make_runner, batch_sizes, seconds, unit, log))
