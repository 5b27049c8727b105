"""One encoder batch on a small host: all cores on one text at low load, one core per half at high load.

ONNX Runtime's intra-op threads speed one small batch up far less than they multiply cores (figures in
perf/reports/fixed_cost.md), and a batch padded to its longest text wastes the rest. So a batch of `split_from` texts or
more is sorted by length and cut into one part per core, each padded only to its own longest text and
run at the same time on its own single-thread session (ORT releases the GIL while it runs); a smaller
batch runs on one session using every thread. The result is the same as one padded run: attention
masks the padding, and every row is computed on its own.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from hotpath.runtime.core_gate import CoreGate
from hotpath.runtime.ort_session import make_session

Feeds = dict[str, np.ndarray]


def balanced_cut(lengths: np.ndarray, parts: int) -> list[np.ndarray]:
    """Row indices sorted by length and cut into `parts` runs. Two parts (the common case): the cut that
    minimizes the larger part's padded work (rows x its longest row); more parts: equal row counts."""
    order = np.argsort(lengths, kind="stable")
    ordered, n = lengths[order], len(order)
    if parts <= 1 or n < 2:
        return [order]
    if parts == 2:
        k = min(range(1, n), key=lambda k: max(k * ordered[k - 1], (n - k) * ordered[-1]))
        return [order[:k], order[k:]]
    return [c for c in np.array_split(order, parts) if len(c)]


class SplitRunner:
    """Sessions of one ONNX encoder: a wide one for a small batch (`wide_threads`, default every thread) and
    one single-thread session per thread for the parts of a larger batch. A model's values come from its
    parameters (hotpath.runtime.parameters.EmbedderParameters, which holds their defaults).

    `wide_threads` above `threads` is the latency-first layout of a host with more cores than instances:
    one text at low load uses several cores, a batch under load stays on this instance's share. Spinning
    (`spin_duration_us`) matters only where a session has a pool, i.e. the wide one."""

    def __init__(self, model_path: Path | str, threads: int, split_from: int, allow_spinning: bool = False,
                 wide_threads: int | None = None, spin_duration_us: int | None = None, gate: CoreGate | None = None):
        self.threads = max(1, int(threads))
        self.split_from = int(split_from)
        wide = max(1, int(wide_threads or self.threads))
        self.wide = make_session(model_path, intra_op_threads=wide, inter_op_threads=1,
                                 allow_spinning=allow_spinning, spin_duration_us=spin_duration_us)
        self.output = self.wide.get_outputs()[0].name
        self.narrow = [make_session(model_path, intra_op_threads=1, inter_op_threads=1)
                       for _ in range(self.threads)] if self.threads > 1 or wide > 1 else []
        # One part (threads 1, wide > 1): the batch runs on its single-thread session in the caller's thread.
        # Then `gate` (hotpath.runtime.core_gate) lets one text go wide only while the other instances idle.
        self.gate = gate if wide > self.threads == 1 else None
        self.pool = ThreadPoolExecutor(len(self.narrow), thread_name_prefix="ort-part") if len(self.narrow) > 1 else None

    def run(self, feeds: Feeds) -> np.ndarray:
        """The encoder's output for `feeds` (int64 arrays [n, length] with an `attention_mask`)."""
        n = len(feeds["attention_mask"])
        if self.gate is not None:
            wide = self.gate.enter()
            try:
                session = self.wide if wide and n < self.split_from else self.narrow[0]
                return session.run([self.output], feeds)[0]
            finally:
                self.gate.leave()
        if not self.narrow or n < self.split_from:
            return self.wide.run([self.output], feeds)[0]
        if len(self.narrow) == 1:
            return self.narrow[0].run([self.output], feeds)[0]
        lengths = feeds["attention_mask"].sum(axis=1)
        parts = balanced_cut(lengths, len(self.narrow))
        jobs = [self.pool.submit(self._part, session, feeds, rows, int(lengths[rows].max()))
                for session, rows in zip(self.narrow, parts)]
        results = [job.result() for job in jobs]
        out = np.empty((n, *results[0].shape[1:]), dtype=results[0].dtype)
        for rows, result in zip(parts, results):
            out[rows] = result
        return out

    def _part(self, session, feeds: Feeds, rows: np.ndarray, length: int) -> np.ndarray:
        return session.run([self.output], {k: np.ascontiguousarray(v[rows, :length]) for k, v in feeds.items()})[0]
