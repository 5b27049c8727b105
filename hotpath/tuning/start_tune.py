"""Container first start (HOTPATH_TUNE_AT_START=quick): this host's low-load knobs, measured in process in seconds.

The image carries no load generator (perf_analyzer), so the tune it runs at start measures what sets one
request's latency on this hardware: how many ORT threads one text of text_embedding's step runs on and
whether they spin (`one_text_thread_count` x `spin_duration_us`), every layout interleaved round by round,
one text at a time with a 2 ms gap (as at concurrency 1). A layout replaces the committed one only when
its median beats it by more than the noise margin. The batching and instance knobs need the live search:
`hotpath tune --quick --url HOST:PORT` from a checkout against the running container. The result goes
to the cache volume's tuned.json with this host's key, once: a file already measured here is kept.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import time
from pathlib import Path

from hotpath.tuning.hardware_key import HardwareKey
from hotpath.tuning.tuned_values import TunedValues, default_path, load, stamp

logger = logging.getLogger(__name__)
MODEL = "sentence_embedder"
LAYOUTS = [(1, 0), (2, 0), (2, 100), (4, 0)]    # (one_text_thread_count, spin_duration_us)
MARGIN = 0.05


def _params(model_dir: Path) -> dict[str, str]:
    from hotpath.specs.repository import read_config

    return {k: v.string_value for k, v in read_config(model_dir).parameters.items()}


def measure_layouts(model_dir: Path, texts: list[str], cores: int, rounds: int = 5, per_round: int = 30
                    ) -> dict[tuple[int, int], float]:
    """Median one-text latency (ms) of each layout that fits `cores`, interleaved."""
    from hotpath.runtime.embedder import Embedder

    base = _params(model_dir)
    version = next(v for v in sorted(model_dir.iterdir()) if v.is_dir() and v.name.isdigit())
    embedders = {layout: Embedder(version, {**base, "one_text_thread_count": str(layout[0]),
                                            "spin_duration_us": str(layout[1])})
                 for layout in LAYOUTS if layout[0] <= cores}
    for e in embedders.values():
        for t in texts[:5]:
            e.embed([t])
    rounds_ms: dict[tuple[int, int], list[float]] = {k: [] for k in embedders}
    for _ in range(rounds):
        for layout, e in embedders.items():
            times = []
            for i in range(per_round):
                t0 = time.perf_counter_ns()
                e.embed([texts[i % len(texts)]])
                times.append(time.perf_counter_ns() - t0)
                time.sleep(0.002)
            rounds_ms[layout].append(statistics.median(times) / 1e6)
    return {k: statistics.median(v) for k, v in rounds_ms.items()}


def choose(results: dict[tuple[int, int], float], committed: tuple[int, int]) -> tuple[int, int]:
    """The fastest layout, unless the committed one is within MARGIN of it (noise keeps the default)."""
    best = min(results, key=results.get)
    if committed in results and results[committed] <= results[best] * (1 + MARGIN):
        return committed
    return best


def sample_texts(n: int = 30) -> list[str]:
    words = ("latency batching retrieval tuning inference production careful workloads moderation "
             "recommendations search augmented generation targets fast gpus").split()
    return [" ".join(words[(i * 7 + j) % len(words)] for j in range(8 + i % 24)) for i in range(n)]


def tune_at_start(served: Path, path: Path, log=logger.info) -> TunedValues | None:
    here = HardwareKey.detect()
    previous = load(path)
    if previous is not None and previous.hardware == here:
        log(f"[tune at start] {path} was measured on this host ({previous.measured_at}): kept")
        return previous
    model_dir = Path(served) / MODEL
    if not model_dir.exists():
        log(f"[tune at start] no {MODEL} in {served}: nothing to tune")
        return None
    t0 = time.perf_counter()
    params = _params(model_dir)
    committed = (int(params.get("one_text_thread_count", 0) or params.get("intra_op_thread_count", 1)),
                 int(params.get("spin_duration_us", 0) or 0))
    results = measure_layouts(model_dir, sample_texts(), here.cores)
    chosen = choose(results, committed)
    moved = {k: v for k, v, c in zip(("one_text_thread_count", "spin_duration_us"), chosen, committed) if v != c}
    seconds = time.perf_counter() - t0
    summary = ", ".join(f"threads {t} spin {s} us: {ms:.2f} ms" for (t, s), ms in results.items())
    tuned = TunedValues(here, {MODEL: moved} if moved else {}, stamp(), "HOTPATH_TUNE_AT_START=quick", seconds,
                        {"text_embedding": f"one text in process: {summary}; committed {committed}, kept {chosen}"})
    tuned.save(path)
    log(f"[tune at start] {seconds:.0f} s on {here.describe()}: {summary}; "
        + (f"{MODEL}: {json.dumps(moved)}" if moved else "the committed layout stays") + f" -> {path}")
    return tuned


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--served", required=True, help="the assembled repository (<cache>/repository)")
    p.add_argument("--file", default=None, help="tuned values (default <cache>/tuned.json)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    tune_at_start(Path(args.served), Path(args.file or default_path(container=True)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
