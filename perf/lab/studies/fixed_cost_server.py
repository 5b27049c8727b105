"""`python -m perf study fixed_cost_server`: a step's knob variants through one server, interleaved, with the floor beside.

One local server (explicit model control, response cache off). Each round reloads the step with every
variant in turn (A/B/A/B...), warms it, measures the endpoint at concurrency 1 (and at the SLO's load
with --load) with perf_analyzer, then the in-process floor (tokenizer + ORT, 2 threads, batch 1) in
this process while the server idles. Medians over the rounds; every round's figure is in the report,
so a variant that won only while another process used the CPU shows as such.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import time
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.exporters.samples import ensure_input
from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.measure.point import measure, response_cache_off
from hotpath.sweeps.measure.reconfigure import load_config, served_config
from hotpath.tuning.hardware_key import HardwareKey
from hotpath.tuning.knobs import apply_knobs
from hotpath.tuning.slo import load_slos

# A shared host rarely passes perf_analyzer's stability check; the rounds and their medians carry the
# comparison instead, and a point that still fails is recorded as missing, not a crash of the study.
MEASUREMENT = Measurement(2000, 100, 3)
TEXT_VARIANTS = {   # label -> sentence_embedder knobs
    "1 thread per text (before)": {"one_text_thread_count": 1, "spin_duration_us": 0},
    "2 threads per text, no spin (shipped)": {"one_text_thread_count": 2, "spin_duration_us": 0},
    "2 threads per text, spin 100 us": {"one_text_thread_count": 2, "spin_duration_us": 100},
}


def floor_p50_ms(n: int = 100) -> float:
    """The in-process floor's batch-1 p50: the fast tokenizer + the pooled graph in ORT, 2 threads."""
    from hotpath.exporters.sentence_encoder import minilm_tokenizer
    from hotpath.runtime.ort_session import make_session
    from hotpath.runtime.text import encode

    folder = paths.model_repository() / "sentence_embedder" / "1"
    tok = minilm_tokenizer()
    session = make_session(folder / "export" / "model.onnx", 2, 1)
    texts = [d["TEXT"][0] for d in json.loads((paths.ROOT / "perf/data/short_texts.json").read_text())["data"]]
    times = []
    for i in range(n + 5):
        t0 = time.perf_counter_ns()
        session.run(None, encode(tok, [texts[i % len(texts)]]))
        if i >= 5:
            times.append(time.perf_counter_ns() - t0)
        time.sleep(0.002)
    return statistics.median(times) / 1e6


def main(argv: list[str] | None = None) -> int:
    from hotpath.server.local_triton import local_server
    from perf.lab.studies.runner import parser

    p = parser("fixed_cost_server", __doc__, allow_busy=False)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--load", action="store_true", help="also measure at the SLO's declared concurrency")
    p.add_argument("--report", default=str(paths.ROOT / "perf" / "reports" / "fixed_cost_server.md"))
    args = p.parse_args(argv)
    slo = load_slos("cpu")["text_embedding"]
    data = ensure_input(slo.input_data)
    hw = HardwareKey.detect()
    loads = [1] + ([slo.concurrency] if args.load else [])
    rows: dict[str, dict[int, list[tuple[float, float, float]]]] = {v: {c: [] for c in loads} for v in TEXT_VARIANTS}
    floors: list[float] = []
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    with local_server(None) as server, response_cache_off(server.grpc_url, slo.endpoint):
        url = server.grpc_url
        client = grpcclient.InferenceServerClient(url)
        base = served_config(client, "sentence_embedder")
        for r in range(args.rounds):
            for label, knobs in TEXT_VARIANTS.items():
                load_config(client, "sentence_embedder", apply_knobs(base, knobs))
                with contextlib.suppress(HotpathError):   # warm: ORT plans per shape after a reload
                    measure(url, slo.endpoint, "concurrency", 1, data, Measurement(1000, 100, 2))
                for c in loads:
                    try:
                        pp = measure(url, slo.endpoint, "concurrency", c, data, MEASUREMENT)
                    except HotpathError as exc:
                        print(f"[fixed_cost_server] round {r} {label} c={c}: no measurement ({str(exc)[:120]})")
                        continue
                    step = pp.steps.get("sentence_embedder", {})
                    rows[label][c].append((pp.p50_ms, pp.p95_ms, step.get("compute_infer_us", 0.0) / 1e3))
                    print(f"[fixed_cost_server] round {r} {label} c={c}: p50 {pp.p50_ms:.2f} ms, p95 "
                          f"{pp.p95_ms:.2f} ms, step compute {rows[label][c][-1][2]:.2f} ms")
            floors.append(floor_p50_ms())
            print(f"[fixed_cost_server] round {r} floor p50 {floors[-1]:.2f} ms")
        load_config(client, "sentence_embedder", base)
    seconds = time.perf_counter() - t0
    floor = statistics.median(floors)
    out = ["# Fixed cost through the server: text_embedding's step layouts, interleaved", "",
           f"`python -m perf study fixed_cost_server --rounds {args.rounds}{' --load' if args.load else ''}` "
           f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {seconds:.0f} s) on {hw.describe()}; one "
           f"local server, sentence_embedder reloaded per variant in turn each round, response cache off, "
           f"perf_analyzer over gRPC, {MEASUREMENT.interval_ms} ms windows. Host load average {load0:.1f} at start, "
           f"{os.getloadavg()[0]:.1f} at end on {hw.cores} cores. In-process floor (tokenizer + ORT 2 threads, "
           f"batch 1) p50 per round: {' '.join(f'{f:.2f}' for f in floors)} ms (median {floor:.2f}).", "",
           "| variant | concurrency | client p50 ms | x floor | client p95 ms | step compute ms | rounds (p50) |",
           "|---|---:|---:|---:|---:|---:|---|"]
    for label, by_c in rows.items():
        for c, pts in by_c.items():
            if not pts:
                out.append(f"| {label} | {c} | - | - | - | - | no stable measurement |")
                continue
            p50 = statistics.median(x[0] for x in pts)
            out.append(f"| {label} | {c} | {p50:.2f} | {p50 / floor:.2f} | {statistics.median(x[1] for x in pts):.2f} | "
                       f"{statistics.median(x[2] for x in pts):.2f} | {' '.join(f'{x[0]:.2f}' for x in pts)} |")
    Path(args.report).write_text("\n".join(out) + "\n")
    print("\n".join(out))
    return 0
