"""FP32 vs INT8 per model: in-process ONNX Runtime speed and the INT8 gate's figures ->
perf/reports/precision.md.

    flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study precision [--runs 40]

Builds both precisions in a temporary folder with the exporters' own code (the repository is not
touched): EfficientNet-Lite0 (image_classifier) and the pooled MiniLM encoder (the same graph serves
text_encoder and sentence_embedder's export/model.onnx). Speed: sessions as
hotpath.runtime.ort_session.make_session makes them (spinning off), 2 and 1 intra-op threads,
batch 1 and 8 of real inputs, FP32 and INT8 runs interleaved so that load on the host hits both
alike; medians. Takes ~3 minutes on an idle 2-core host.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from hotpath import paths
from hotpath.exporters import quantize
from hotpath.exporters.image_classifier import (
    CALIBRATION_PHOTOS,
    HELDOUT_PHOTOS,
    ImageClassifierExporter,
    heldout_batch,
    int8_classifier,
)
from hotpath.exporters.sentence_encoder import export_pooled_encoder, int8_encoder, minilm_dir
from hotpath.runtime.ort_session import make_session
from hotpath.specs.spec import load_spec
from perf.lab.studies import runner

REPORT = paths.ROOT / "perf" / "reports" / "precision.md"
COMMAND = "flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study precision"
THREADS = (2, 1)
BATCHES = (1, 8)


def log(message: str) -> None:
    print(message, flush=True)


def build_classifier(folder: Path) -> tuple[dict, Path, Path, dict]:
    spec = load_spec(paths.model_specs_dir() / "image_classifier.toml")
    fp32_spec = dataclasses.replace(spec, hotpath=dataclasses.replace(spec.hotpath, precision="fp32"))
    ImageClassifierExporter().export(fp32_spec, folder, lambda m: log(f"  {m}"))
    fp32, int8 = folder / "model.onnx", folder / "model.int8.onnx"
    # No floors here: the report shows the figures whatever they are and compares them with the spec's.
    figures = _unprefixed(int8_classifier(spec.name, fp32, int8, "PIXELS", ["SCORES", "CLASS_IDS"], {},
                                          lambda m: log(f"  {m}")))
    figures.update(_confident_agreement(fp32, int8))
    return spec.hotpath, fp32, int8, figures


def _confident_agreement(fp32: Path, int8: Path) -> dict:
    """Top-1 agreement on the held-out inputs FP32 is sure of (top-1 score >= 0.5) and on the rest."""
    pixels = heldout_batch()
    (scores, ids), (_, int8_ids) = (quantize.run_batched(make_session(p, 2), {"PIXELS": pixels}, ["SCORES", "CLASS_IDS"])
                                    for p in (fp32, int8))
    sure = scores[:, 0] >= 0.5
    agree = ids[:, 0] == int8_ids[:, 0]
    return {"sure_n": int(sure.sum()), "sure_top1": float(agree[sure].mean()),
            "unsure_n": int((~sure).sum()), "unsure_top1": float(agree[~sure].mean())}


def build_encoder(folder: Path) -> tuple[dict, Path, Path, dict]:
    spec = load_spec(paths.model_specs_dir() / "sentence_embedder.toml")
    fp32, int8 = folder / "encoder.onnx", folder / "encoder.int8.onnx"
    export_pooled_encoder(fp32, spec.hotpath.opset, "embedding", lambda m: log(f"  {m}"))
    figures = _unprefixed(int8_encoder(spec.name, fp32, int8, {}, lambda m: log(f"  {m}")))
    return spec.hotpath, fp32, int8, figures


def _unprefixed(metrics: dict) -> dict:
    return {k.removeprefix("int8_"): v for k, v in metrics.items()}


def encoder_feeds() -> dict[str, np.ndarray]:
    """8 short texts of the perf payloads, tokenized as the tokenizer step serves them (padded to 16s)."""
    from hotpath.exporters.samples import short_texts
    from hotpath.runtime.text import encode, load_tokenizer

    return encode(load_tokenizer(minilm_dir() / "tokenizer.json", 256, pad_to_multiple_of=16), short_texts()[:8])


def interleaved_medians(paths_: dict[str, Path], feeds: dict[str, np.ndarray], runs: int) -> dict:
    """{(precision, threads, batch): median ms}, the precisions' runs alternating."""
    out = {}
    for threads in THREADS:
        sessions = {p: make_session(path, intra_op_threads=threads, inter_op_threads=1) for p, path in paths_.items()}
        for batch in BATCHES:
            feed = {k: v[:batch] for k, v in feeds.items()}
            times = {p: [] for p in sessions}
            for _ in range(3):
                for s in sessions.values():
                    s.run(None, feed)
            for _ in range(runs):
                for p, s in sessions.items():
                    t0 = time.perf_counter()
                    s.run(None, feed)
                    times[p].append(time.perf_counter() - t0)
            for p, t in times.items():
                out[(p, threads, batch)] = float(np.median(t) * 1e3)
            log(f"  threads {threads} batch {batch}: " + ", ".join(f"{p} {out[(p, threads, batch)]:.2f} ms" for p in sessions))
    return out


def host_state() -> dict:
    flags = set()
    model = platform.processor()
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
    import onnxruntime

    return {"uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
            "cpu": model, "cores": os.cpu_count(), "onnxruntime": onnxruntime.__version__,
            "int8 instructions": ", ".join(sorted(flags & {"avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8"}))}


def _speed_table(speed: dict) -> list[str]:
    rows = ["| intra-op threads | batch | FP32 ms | INT8 ms | INT8 speed-up |", "|---|---|---|---|---|"]
    for threads in THREADS:
        for batch in BATCHES:
            f, q = speed[("fp32", threads, batch)], speed[("int8", threads, batch)]
            rows.append(f"| {threads} | {batch} | {f:.2f} | {q:.2f} | {f / q:.2f}x |")
    return rows


def _passes(figures: dict, hotpath, names: dict[str, str]) -> str:
    checks = [(key, figures[field], getattr(hotpath, key)) for key, field in names.items()]
    if any(floor is None for _, _, floor in checks):
        return "no floors in the spec"
    return "passes" if all(v >= floor for _, v, floor in checks) else "FAILS"


def render(host: dict, image: tuple, encoder: tuple, runs: int, started: str, seconds: float) -> str:
    (ihp, _, _, ifig, ispeed), (ehp, _, _, efig, espeed) = image, encoder
    ifloors = ", ".join(f"`{k}` {getattr(ihp, k)}" for k in quantize.CLASSIFIER_FLOORS)
    efloors = ", ".join(f"`{k}` {getattr(ehp, k)}" for k in quantize.EMBEDDING_FLOORS)
    lines = [
        "# Precision ladder: FP32 vs INT8 (ONNX Runtime, CPU)",
        "",
        f"Generated {started} by `{COMMAND}` ({seconds:.0f} s, {runs} runs per median).",
        "",
        f"Host: {host['cpu']}, {host['cores']} cores, onnxruntime {host['onnxruntime']}, "
        f"int8-relevant instructions: {host['int8 instructions']}. `uptime` before: `{host['uptime']}`; after: "
        f"`{host['uptime_after']}` (a shared host; FP32 and INT8 runs alternate, so both see the same load).",
        "",
        "Speed: one `InferenceSession` per precision as `hotpath.runtime.ort_session.make_session` makes it (spinning "
        "off, inter-op 1), medians in ms of one `run()`.",
        "",
        "## image_classifier (EfficientNet-Lite0)",
        "",
        "INT8: static QDQ (`quantize_static`: u8 activations, per-channel s8 weights at 7 bits, min-max ranges), "
        f"calibrated on {len(CALIBRATION_PHOTOS) * 7} crops of scikit-image's grayscale photos "
        f"({', '.join(CALIBRATION_PHOTOS)}); cast, softmax, top-5 and the label lookup stay exact.",
        "",
        f"Gate vs FP32 on {ifig['heldout']} held-out inputs (7 crops/rescales each of "
        f"{', '.join(HELDOUT_PHOTOS)}), all preprocessed as served:",
        "",
        "| figure | INT8 vs FP32 |",
        "|---|---|",
        f"| top-1 agreement | {ifig['top1_agreement']:.3f} |",
        f"| mean top-5 overlap | {ifig['top5_overlap']:.3f} |",
        f"| top-1 agreement where FP32's top-1 score >= 0.5 | {ifig['sure_top1']:.3f} ({ifig['sure_n']} inputs) |",
        f"| top-1 agreement where it is < 0.5 | {ifig['unsure_top1']:.3f} ({ifig['unsure_n']} inputs) |",
        "",
        f"Spec floors: {ifloors}: INT8 {_passes(ifig, ihp, quantize.CLASSIFIER_FLOORS)}. "
        f"Committed default: `precision = \"{ihp.precision}\"` (INT8 stays opt-in while it changes "
        "the top-1 class of held-out photos: the served answer comes first).",
        "",
        "Speed (batch 8 of the held-out photos):",
        "",
        *_speed_table(ispeed),
        "",
        "## text_encoder / sentence_embedder (all-MiniLM-L6-v2 pooled encoder; one graph)",
        "",
        "INT8: dynamic (`quantize_dynamic`: weight MatMuls with per-channel s8 weights at 7 bits, activations "
        "quantized per run); the six feed-forward output projections stay FP32 (their post-GELU inputs carry "
        "BERT's outlier features).",
        "",
        f"Gate vs FP32 on {efig['texts']} texts of the multilingual parity corpus (every edge case included), "
        "batched and padded as served:",
        "",
        "| figure | INT8 vs FP32 |",
        "|---|---|",
        f"| min cosine | {efig['min_cosine']:.4f} |",
        f"| mean cosine | {efig['mean_cosine']:.4f} |",
        "",
        f"Spec floors (sentence_embedder): {efloors}: INT8 "
        f"{_passes(efig, ehp, quantize.EMBEDDING_FLOORS)}. "
        "The text models' contract is cosine >= 0.9999 to sentence-transformers on every text, which INT8 "
        "cannot meet: `precision = \"fp32\"` stays their default and INT8 is opt-in.",
        "",
        "Speed (8 short texts of the perf payloads, padded to a multiple of 16: "
        f"{'x'.join(map(str, espeed['shape']))} tokens):",
        "",
        *_speed_table(espeed),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("precision", __doc__, allow_busy=False)
    parser.add_argument("--runs", type=int, default=40, help="timed runs per median (>= 30)")
    args = parser.parse_args(argv)
    if args.runs < 30:
        parser.error("--runs must be >= 30")
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    t0 = time.perf_counter()
    host = host_state()
    log(f"[precision] {host['uptime']}")
    with tempfile.TemporaryDirectory(prefix="hotpath-precision-") as tmp:
        folder = Path(tmp)
        log("[precision] image_classifier: FP32 export, INT8 quantization and gate")
        ihp, ifp32, iint8, ifig = build_classifier(folder)
        log("[precision] encoder: FP32 export, INT8 quantization and gate")
        ehp, efp32, eint8, efig = build_encoder(folder)
        log("[precision] speed")
        ispeed = interleaved_medians({"fp32": ifp32, "int8": iint8}, {"PIXELS": heldout_batch()[:8]}, args.runs)
        feeds = encoder_feeds()
        espeed = interleaved_medians({"fp32": efp32, "int8": eint8}, feeds, args.runs)
        espeed["shape"] = feeds["input_ids"].shape
    host["uptime_after"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    text = render(host, (ihp, ifp32, iint8, ifig, ispeed), (ehp, efp32, eint8, efig, espeed), args.runs, started,
                  time.perf_counter() - t0)
    REPORT.write_text(text)
    log(f"[precision] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
