"""Run many Triton requests through one model call: concatenate, run once, split back."""

from __future__ import annotations

from typing import Callable

import numpy as np

Feeds = dict[str, np.ndarray]


def run_batched(run: Callable[[Feeds], list[np.ndarray]], output_names: list[str],
                requests: list[Feeds]) -> list[Feeds | Exception]:
    """One `run` call per group of requests whose inputs agree in per-item shape.

    Triton's dynamic batcher only groups same-shaped requests, so this is normally one call; the
    grouping keeps odd batches (e.g. warmup) correct. A failed call fails every request of its group,
    as Triton's native onnxruntime backend does with a batch: the local stand-in for that backend must
    not isolate requests that production would not (input validation belongs in the Python step in
    front of a native model).
    """
    results: list[Feeds | Exception] = [None] * len(requests)  # type: ignore[list-item]
    groups: dict[tuple, list[int]] = {}
    for i, feeds in enumerate(requests):
        key = tuple((name, arr.shape[1:], arr.dtype.str) for name, arr in sorted(feeds.items()))
        groups.setdefault(key, []).append(i)
    for members in groups.values():
        sizes = [len(next(iter(requests[i].values()))) for i in members]
        names = requests[members[0]].keys()
        batch = {n: requests[members[0]][n] if len(members) == 1
                 else np.concatenate([requests[i][n] for i in members]) for n in names}
        try:
            outputs = run(batch)
        except Exception as exc:
            for i in members:
                results[i] = exc
            continue
        offsets = np.cumsum([0] + sizes)
        for k, i in enumerate(members):
            results[i] = {name: out[offsets[k]:offsets[k + 1]] for name, out in zip(output_names, outputs)}
    return results
