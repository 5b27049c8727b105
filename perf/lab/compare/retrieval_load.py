"""Closed-loop load for search systems that perf_analyzer cannot drive (a client doing two hops).

Every system in the retrieval comparison is driven by this same harness, so their figures compare:
`concurrency` threads, each with its own client from `connect()`, send queries back to back for
`duration_s`; a request is one query in, top-k ids out. Queries are real sentences (the one-line
synopses of Python's standard library modules, read from their source files, never imported):
short search phrases that are not in any document corpus.
"""

from __future__ import annotations

import pydoc
import sysconfig
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from hotpath.sweeps.measure.workers import run_together

Search = Callable[[str], list[str]]   # one query -> its top-k ids, best first


def query_texts(limit: int = 0) -> list[str]:
    """Distinct synopses of the standard library's modules, sorted by file (stable across runs)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    seen: dict[str, None] = {}
    for path in sorted(root.rglob("*.py")):
        if {"site-packages", "test", "tests", "idlelib", "lib2to3", "encodings"} & set(path.relative_to(root).parts):
            continue
        try:
            line = (pydoc.synopsis(str(path)) or "").strip()
        except (OSError, SyntaxError, UnicodeDecodeError):
            continue
        if 16 <= len(line) <= 200 and line[-1] in ".)" and line not in seen:   # whole sentences
            seen[line] = None
    texts = list(seen)
    return texts[:limit] if limit else texts


@dataclass(frozen=True)
class Point:
    system: str
    concurrency: int
    requests: int
    errors: int
    wall_s: float
    p50_ms: float
    p95_ms: float
    first_error: str = ""
    others_cores: float | None = None   # CPU other processes used just before the point (None: not read)

    @property
    def throughput(self) -> float:
        return (self.requests - self.errors) / self.wall_s if self.wall_s else 0.0


def closed_loop(system: str, connect: Callable[[], Search], queries: Sequence[str], concurrency: int,
                duration_s: float, warmup: int = 3) -> Point:
    """Run `concurrency` clients for `duration_s` (after `warmup` requests each, not recorded)."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    ready = threading.Barrier(concurrency + 1)
    stop = threading.Event()

    def worker(index: int) -> None:
        try:
            search = connect()
            for i in range(warmup):
                search(queries[(index + i) % len(queries)])
        except Exception as exc:   # a client that cannot start is reported; the others still run
            with lock:
                errors.append(f"client start: {type(exc).__name__}: {exc}")
            ready.wait()
            return
        ready.wait()
        i = index * 7919   # each thread walks the queries from its own offset
        mine, failed = [], []
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                search(queries[i % len(queries)])
                mine.append(time.perf_counter() - t0)
            except Exception as exc:   # a failed request is a data point, not the end of the run
                failed.append(f"{type(exc).__name__}: {exc}")
            i += 1
        with lock:
            latencies.extend(mine)
            errors.extend(failed)

    wall = run_together(worker, concurrency, ready, duration_s, stop)
    ms = np.array(latencies) * 1000 if latencies else np.array([np.nan])
    return Point(system, concurrency, len(latencies) + len(errors), len(errors), wall,
                 float(np.percentile(ms, 50)), float(np.percentile(ms, 95)), errors[0] if errors else "")


def throughput_at(points: Sequence[Point], system: str, p95_ms: float) -> tuple[float, int | None]:
    """Best throughput among `system`'s error-free points whose p95 meets `p95_ms`, and its concurrency."""
    ok = [p for p in points if p.system == system and not p.errors and p.p95_ms <= p95_ms]
    best = max(ok, key=lambda p: p.throughput, default=None)
    return (best.throughput, best.concurrency) if best else (0.0, None)


def recall_at_k(found: Sequence[Sequence[str]], truth: Sequence[Sequence[str]]) -> float:
    """Mean share of each query's true top-k that was found."""
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def exact_top_k(vectors: np.ndarray, ids: Sequence[str], queries: np.ndarray, k: int) -> list[list[str]]:
    """Exact inner-product top-k over the whole corpus (the recall reference)."""
    out = []
    for start in range(0, len(queries), 256):
        scores = queries[start:start + 256] @ vectors.T
        top = np.argpartition(-scores, k, axis=1)[:, :k]
        order = np.take_along_axis(top, np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1), axis=1)
        out += [[ids[j] for j in row] for row in order]
    return out
