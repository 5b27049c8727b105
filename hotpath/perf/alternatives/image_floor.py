"""(f) for image_classification: decode + classifier in one process, no server."""

from __future__ import annotations

import statistics
import time

import numpy as np

from hotpath import paths
from hotpath.images import preprocess
from hotpath.ort_session import make_session
from hotpath.perf.payloads import jpeg_photo


def measure_image_floor(batch_sizes=(1, 4, 8), seconds: float = 3.0, threads: int = 2, log=print) -> list[dict]:
    data = jpeg_photo()
    rows = []
    for spinning in (False, True):
        session = make_session(paths.model_repository() / "image_classifier" / "1" / "model.onnx", threads, 1, spinning)
        for bs in batch_sizes:
            def run():
                session.run(None, {"PIXELS": np.stack([preprocess(data) for _ in range(bs)])})
            run()
            latencies, n, t0 = [], 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                t1 = time.perf_counter()
                run()
                latencies.append(time.perf_counter() - t1)
                n += bs
            row = {"batch": bs, "spinning": spinning, "throughput": n / (time.perf_counter() - t0),
                   "p50_ms": statistics.median(latencies) * 1e3, "p95_ms": float(np.percentile(latencies, 95)) * 1e3}
            rows.append(row)
            log(f"[perf]      floor batch {bs:2d} spinning {'on ' if spinning else 'off'}: {row['throughput']:6.1f} "
                f"images/s, batch p95 {row['p95_ms']:.1f} ms")
    return rows
