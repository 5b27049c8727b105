"""Closed-loop clients as threads released together, for loads perf_analyzer cannot drive."""

from __future__ import annotations

import threading
import time
from typing import Callable


def run_together(worker: Callable[[int], None], concurrency: int, release: threading.Barrier,
                 duration_s: float | None = None, stop: threading.Event | None = None) -> float:
    """Run `worker(index)` on `concurrency` threads that each wait at `release` (concurrency + 1 parties);
    with `duration_s`, set `stop` that long after the release. Returns seconds from release to the last join."""
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    release.wait()
    start = time.perf_counter()
    if duration_s is not None:
        time.sleep(duration_s)
        stop.set()
    for t in threads:
        t.join()
    return time.perf_counter() - start
