"""INT8 variants of exported ONNX graphs (onnxruntime.quantization) and the gates they must pass.

A spec's `[hotpath] precision` picks what its exporter writes: "fp32" (the exported graph, untouched)
or "int8" (that graph quantized for ONNX Runtime on CPU, then compared with it on held-out inputs;
the build fails below the spec's `int8_min_*` floors).

Both recipes keep weights at 7 bits (`reduce_range`): ONNX Runtime's u8 x s8 kernels on x86 CPUs
without VNNI (AVX2, AVX-512F) add pairs of products in int16 (VPMADDUBSW), which saturates with
full-range weights. Measured on this AVX2 host (EfficientNet-Lite0, the 63 held-out photo crops,
top-1 agreement / mean top-5 overlap with FP32): 8-bit weights 0.68 / 0.77 with the fused integer
kernels against 0.84 / 0.92 for the same graph run unfused (the arithmetic the QDQ graph specifies);
7-bit weights 0.81 / 0.82, the same fused or not. On VNNI hosts 8-bit weights would not saturate.
"""

from __future__ import annotations

import logging
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable

import numpy as np

from hotpath.errors import BuildError
from hotpath.specs.spec import ModelSpec

# Floors each gate reads from the spec ([hotpath] keys), with what they bound.
CLASSIFIER_FLOORS = {"int8_min_top1_agreement": "top1_agreement", "int8_min_top5_overlap": "top5_overlap"}
EMBEDDING_FLOORS = {"int8_min_cosine": "min_cosine", "int8_min_mean_cosine": "mean_cosine"}

# Never quantized in the classifier: the input cast and the post-processing (softmax, top-k, the
# string label lookup) must stay exact; they cost nothing next to the convolutions.
CLASSIFIER_EXACT_OPS = ("Cast", "Softmax", "TopK", "Gather")


def floors_of(spec: ModelSpec, floors: dict[str, str]) -> dict[str, float]:
    """The gate's floors from the spec (numbers in [0, 1], checked by hotpath.specs.build_options); an INT8 build
    without them would have no gate."""
    out = {}
    for key in floors:
        value = getattr(spec.hotpath, key)
        if value is None:
            raise spec.error(f"hotpath.{key}", "precision = \"int8\" needs this floor (the build's accuracy gate)")
        out[key] = value
    return out


def enforce_floors(model: str, what: str, figures: dict, floors: dict[str, float], names: dict[str, str]) -> None:
    """BuildError naming the model, each floor missed and the figures, if any figure is below its floor."""
    missed = [f"{names[key]} {figures[names[key]]:.4f} < {key} {floor:g}"
              for key, floor in floors.items() if not figures[names[key]] >= floor]
    if missed:
        shown = ", ".join(f"{k} {v:.4f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items())
        raise BuildError(f"{model}: INT8 gate failed on {what}: {'; '.join(missed)} ({shown})")


def quantize_static_qdq(fp32_path: Path, out_path: Path, input_name: str, calibration: np.ndarray,
                        exact_ops: Iterable[str] = CLASSIFIER_EXACT_OPS) -> None:
    """Static QDQ INT8 (u8 activations, per-channel 7-bit s8 weights, min-max ranges) calibrated on
    `calibration` (a batch of model inputs, run one at a time)."""
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader(CalibrationDataReader):
        def __init__(self):
            self._feeds = iter([{input_name: calibration[i:i + 1]} for i in range(len(calibration))])

        def get_next(self):
            return next(self._feeds, None)

    with tempfile.TemporaryDirectory(prefix="hotpath-quant-") as tmp:
        # ORT's recommended pre-pass: folds the shape arithmetic (the exporter's dynamic 'same' padding)
        # so each Conv is one QDQ unit.
        pre = Path(tmp) / "pre.onnx"
        quant_pre_process(str(fp32_path), str(pre), skip_symbolic_shape=True)
        exclude = [n.name for n in onnx.load(str(pre)).graph.node if n.op_type in set(exact_ops)]
        with _quiet_quantizer():
            quantize_static(str(pre), str(out_path), Reader(), quant_format=QuantFormat.QDQ,
                            activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8, per_channel=True,
                            reduce_range=True, calibrate_method=CalibrationMethod.MinMax, nodes_to_exclude=exclude)


def quantize_dynamic_int8(fp32_path: Path, out_path: Path, nodes_to_exclude: Iterable[str] = ()) -> None:
    """Dynamic INT8 of every weight MatMul (per-channel 7-bit s8 weights; activations quantized per run)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet_quantizer():
        quantize_dynamic(str(fp32_path), str(out_path), weight_type=QuantType.QInt8, per_channel=True,
                         reduce_range=True, op_types_to_quantize=["MatMul"], nodes_to_exclude=list(nodes_to_exclude))


def check_signature(model: str, fp32_path: Path, int8_path: Path) -> None:
    """BuildError unless the INT8 graph has the FP32 graph's input and output names and types."""
    import onnx

    def signature(path):
        graph = onnx.load(str(path), load_external_data=False).graph
        return [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output)]

    if signature(fp32_path) != signature(int8_path):
        raise BuildError(f"{model}: INT8 graph signature {signature(int8_path)} != FP32 {signature(fp32_path)}")


def topk_agreement(ref_ids: np.ndarray, got_ids: np.ndarray) -> dict:
    """Top-1 agreement and mean top-k overlap (shared ids / k) of two [N, k] id arrays, best first."""
    k = ref_ids.shape[1]
    overlap = [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(ref_ids, got_ids)]
    return {"heldout": int(len(ref_ids)), "top1_agreement": float(np.mean(ref_ids[:, 0] == got_ids[:, 0])),
            f"top{k}_overlap": float(np.mean(overlap))}


def cosine_figures(ref: np.ndarray, got: np.ndarray) -> dict:
    """Min and mean cosine between matching rows of two [N, d] arrays."""
    norms = np.linalg.norm(ref, axis=1) * np.linalg.norm(got, axis=1)
    cos = (ref * got).sum(axis=1) / np.maximum(norms, 1e-12)
    return {"texts": int(len(cos)), "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean()),
            "worst": int(np.argmin(cos))}


def run_batched(session, feeds: dict[str, np.ndarray], outputs: list[str] | None, batch: int = 8) -> list[np.ndarray]:
    """session.run over `feeds` in batches of `batch` rows; outputs concatenated."""
    n = len(next(iter(feeds.values())))
    parts = [session.run(outputs, {k: v[i:i + batch] for k, v in feeds.items()}) for i in range(0, n, batch)]
    return [np.concatenate([p[j] for p in parts]) for j in range(len(parts[0]))]


@contextmanager
def _quiet_quantizer():
    # onnxruntime.quantization logs through the root logger: per-tensor lines (e.g. int32 bias clipping
    # in dead channels, whose ReLU6 output is 0 either way) would bury the build log.
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        yield
    finally:
        root.setLevel(level)
