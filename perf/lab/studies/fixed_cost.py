"""`python -m perf study fixed_cost`: where one request's time goes inside a step, in process, variant by variant.

For text_embedding's step (sentence_embedder) it times each phase of one text the way execute() runs
it (UTF-8 checks, tokenizer, tensors, the ONNX Runtime run, the response slice) and the ORT run
under every thread/spinning layout; for image_classification the preprocess (decode, resize, crop)
and the classifier run the same way. Variants are interleaved round by round (A/B/A/B...) with a
2 ms gap between requests (a request at concurrency 1 arrives after the pool went idle), and the
report keeps each variant's per-round medians, so load from other processes hits all variants alike.
Idle CPU: process CPU seconds per wall second in the 0.5 s after a round (what spinning burns).
The server-side view of the same step is `hotpath perf --explain ENDPOINT` (perf/reports/explain-*.md).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import resource
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from hotpath import paths
from hotpath.tuning.hardware_key import HardwareKey

GAP_S = 0.002


@dataclass
class Variant:
    name: str
    run: Callable[[int], object]           # request index -> anything
    rounds: list[float] = field(default_factory=list)   # per-round median, ms
    idle: list[float] = field(default_factory=list)     # cores burnt while idle after a round

    @property
    def p50_ms(self) -> float:
        return statistics.median(self.rounds)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def interleave(variants: list[Variant], rounds: int, per_round: int, idle_s: float = 0.5) -> None:
    """Measure every variant `rounds` times in turn; each round `per_round` requests, GAP_S apart."""
    for v in variants:       # warm: ORT plans per shape, allocators grow
        for i in range(5):
            v.run(i)
    for _ in range(rounds):
        for v in variants:
            times = []
            for i in range(per_round):
                t0 = time.perf_counter_ns()
                v.run(i)
                times.append(time.perf_counter_ns() - t0)
                time.sleep(GAP_S)
            v.rounds.append(statistics.median(times) / 1e6)
            c0, w0 = _cpu_s(), time.perf_counter()
            time.sleep(idle_s)
            v.idle.append((_cpu_s() - c0) / (time.perf_counter() - w0))


def _texts() -> list[str]:
    data = json.loads((paths.ROOT / "perf" / "data" / "short_texts.json").read_text())["data"]
    return [d["TEXT"][0] for d in data]


def text_variants(layouts: list[tuple[str, int, str | None]]) -> tuple[list[Variant], list[Variant]]:
    """(phases of one text through the served path, ORT run variants [(label, threads, spin)]).
    spin: None = off, "default" = ORT's unbounded spin, "<N>" = spin_duration_us N."""
    from hotpath.runtime.embedder import INPUTS, Embedder
    from hotpath.runtime.ort_session import make_session
    from hotpath.runtime.text import encode, gather_texts
    from hotpath.specs.spec import load_spec

    folder = paths.model_repository() / "sentence_embedder" / "1"
    embedder = Embedder(folder, dataclasses.replace(load_spec(paths.model_specs_dir() / "sentence_embedder.toml").parameters,
                                                   intra_op_thread_count=1))
    texts = _texts()
    raw = [np.array([[t.encode()]], dtype=object) for t in texts]
    feeds = [encode(embedder.tokenizer, [t]) for t in texts]
    limits = {"max_bytes": 32768, "max_chars": 8192}
    n = len(texts)
    phases = [
        Variant("UTF-8 checks (gather_texts)", lambda i: gather_texts([raw[i % n]], limits)),
        Variant("tokenizer encode_batch, 1 text", lambda i: embedder.tokenizer.encode_batch([texts[i % n]])),
        Variant("tokenizer encode, 1 text", lambda i: embedder.tokenizer.encode(texts[i % n])),
        Variant("tokenizer + int64 tensors (encode)", lambda i: encode(embedder.tokenizer, [texts[i % n]])),
        Variant("whole embed() as served (1 thread)", lambda i: embedder.embed([texts[i % n]])),
    ]
    model = folder / "export" / "model.onnx"
    runs = []
    for label, threads, spin in layouts:
        session = make_session(model, threads, 1, allow_spinning=spin is not None,
                               spin_duration_us=None if spin in (None, "default") else int(spin))
        runs.append(Variant(label, lambda i, s=session: s.run(None, {k: feeds[i % n][k] for k in INPUTS})))
    return phases, runs


def image_variants(layouts: list[tuple[str, int, str | None]]) -> tuple[list[Variant], list[Variant]]:
    from hotpath.exporters.samples import payload_for
    from hotpath.runtime.images import PreprocessOptions, preprocess
    from hotpath.runtime.ort_session import make_session

    data = json.loads(Path(payload_for("image_classification")).read_text())["data"]
    # perf_analyzer's b64 BYTES item is a serialized tensor element: 4-byte length, then the file.
    images = [base64.b64decode(d["IMAGE"]["b64"])[4:] for d in data]
    opts = PreprocessOptions()
    pixels = [preprocess(b, opts)[None] for b in images]
    n = len(images)
    phases = [Variant("decode + resize + crop (preprocess)", lambda i: preprocess(images[i % n], opts))]
    model = paths.model_repository() / "image_classifier" / "1" / "model.onnx"
    runs = []
    for label, threads, spin in layouts:
        session = make_session(model, threads, 1, allow_spinning=spin is not None,
                               spin_duration_us=None if spin in (None, "default") else int(spin))
        runs.append(Variant(label, lambda i, s=session: s.run(None, {"PIXELS": pixels[i % n]})))
    return phases, runs


LAYOUTS = [("1 thread (no pool)", 1, None), ("2 threads, spinning off", 2, None),
           ("2 threads, spin 100 us", 2, "100"), ("2 threads, spin 1000 us", 2, "1000"),
           ("2 threads, ORT default spin", 2, "default")]


def _table(title: str, variants: list[Variant]) -> list[str]:
    lines = [f"| {title} | p50 ms (median of rounds) | rounds | idle cores after |", "|---|---:|---|---:|"]
    for v in variants:
        lines.append(f"| {v.name} | {v.p50_ms:.3f} | {' '.join(f'{r:.2f}' for r in v.rounds)} | "
                     f"{statistics.median(v.idle):.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    from perf.lab.studies.runner import parser

    p = parser("fixed_cost", __doc__, allow_busy=False)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per-round", type=int, default=50)
    p.add_argument("--endpoint", choices=("text_embedding", "image_classification", "both"), default="both")
    p.add_argument("--report", default=str(paths.ROOT / "perf" / "reports" / "fixed_cost_inprocess.md"))
    args = p.parse_args(argv)
    hw = HardwareKey.detect()
    load0 = os.getloadavg()
    out = ["# Fixed cost in process: one request's phases and ORT thread layouts", "",
           f"`python -m perf study fixed_cost --rounds {args.rounds} --per-round {args.per_round} --endpoint "
           f"{args.endpoint}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}) on {hw.describe()}. "
           f"Variants interleaved round by round, {GAP_S * 1000:g} ms between requests; p50 = median of the "
           f"rounds' medians. Host load average at start {load0[0]:.1f} on {hw.cores} cores.", ""]
    for endpoint, make in (("text_embedding", text_variants), ("image_classification", image_variants)):
        if args.endpoint not in (endpoint, "both"):
            continue
        phases, runs = make(LAYOUTS)
        interleave(phases + runs, args.rounds, args.per_round)
        out += [f"## {endpoint}", ""] + _table("phase (one request)", phases) + [""] + \
            _table("ORT run, one request", runs) + [""]
        print("\n".join(out[-(len(phases) + len(runs) + 6):]))
    out.append(f"Host load average at end {os.getloadavg()[0]:.1f}.")
    Path(args.report).write_text("\n".join(out) + "\n")
    print(f"[fixed_cost] report: {args.report}")
    return 0
