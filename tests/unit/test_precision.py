"""The precision ladder: `[hotpath] precision`, its floors, the fingerprint and the INT8 gates."""

import dataclasses
import re

import numpy as np
import pytest

from hotpath import paths
from hotpath.errors import BuildError, SpecError
from hotpath.exporters import quantize
from hotpath.exporters.image_classifier import ImageClassifierExporter, gate_classifier
from hotpath.exporters.sentence_encoder import SentenceEncoderExporter
from hotpath.repository_build import _io_settings
from hotpath.spec import load_spec

CLASSIFIER = load_spec(paths.model_specs_dir() / "image_classifier.toml")
ENCODER = load_spec(paths.model_specs_dir() / "text_encoder.toml")
OUTPUTS = ["SCORES", "CLASS_IDS"]


def with_hotpath(spec, drop=(), **changes):
    hotpath = {k: v for k, v in {**spec.hotpath, **changes}.items() if k not in drop}
    return dataclasses.replace(spec, hotpath=hotpath)


@pytest.mark.parametrize("value", ["int4", "FP32", 8, ""])
def test_unknown_precision_is_a_spec_error_naming_the_field(value):
    with pytest.raises(SpecError) as exc:
        quantize.precision_of(with_hotpath(CLASSIFIER, precision=value))
    assert exc.value.model == "image_classifier" and exc.value.field == "hotpath.precision"
    assert repr(value) in str(exc.value)


def test_exporter_refuses_an_unknown_precision_before_exporting(tmp_path):
    with pytest.raises(SpecError, match="hotpath.precision"):
        ImageClassifierExporter().export(with_hotpath(CLASSIFIER, precision="fp16"), tmp_path, print)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("change, field", [
    (dict(drop=("int8_min_top5_overlap",)), "hotpath.int8_min_top5_overlap"),
    (dict(int8_min_top1_agreement=1.5), "hotpath.int8_min_top1_agreement"),
    (dict(int8_min_top1_agreement="high"), "hotpath.int8_min_top1_agreement"),
])
def test_int8_without_valid_floors_is_a_spec_error(change, field):
    spec = with_hotpath(CLASSIFIER, precision="int8", **change)
    with pytest.raises(SpecError) as exc:
        quantize.floors_of(spec, quantize.CLASSIFIER_FLOORS)
    assert exc.value.field == field


def test_int8_encoder_with_tensorrt_plans_is_refused(tmp_path):
    # TensorRT builds plans from model.onnx and cannot parse ONNX Runtime's dynamic-quantization ops.
    with pytest.raises(SpecError, match="hotpath.precision.*TensorRT"):
        SentenceEncoderExporter().export(with_hotpath(ENCODER, precision="int8"), tmp_path, print)
    assert not list(tmp_path.iterdir())


def test_precision_and_floors_are_part_of_the_export_fingerprint():
    fp32 = _io_settings(with_hotpath(CLASSIFIER, precision="fp32"))
    assert fp32 != _io_settings(with_hotpath(CLASSIFIER, precision="int8"))
    assert fp32 != _io_settings(with_hotpath(CLASSIFIER, precision="fp32", int8_min_top1_agreement=0.9))


def test_embedding_gate_names_the_model_the_floor_and_the_figures():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 384))
    got = ref.copy()
    got[7] = rng.normal(size=384)            # one vector scrambled: the mean stays high, the min does not
    figures = quantize.cosine_figures(ref, got)
    floors = {"int8_min_cosine": 0.97, "int8_min_mean_cosine": 0.9}
    with pytest.raises(BuildError) as exc:
        quantize.enforce_floors("sentence_embedder", "50 texts", figures, floors, quantize.EMBEDDING_FLOORS)
    message = str(exc.value)
    assert message.startswith("sentence_embedder: INT8 gate failed on 50 texts")
    assert f"min_cosine {figures['min_cosine']:.4f} < int8_min_cosine 0.97" in message
    assert "int8_min_mean_cosine" not in message.split("(")[0]   # the mean passed its floor
    assert figures["worst"] == 7


@pytest.fixture(scope="module")
def fp32_classifier(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fp32")
    report = ImageClassifierExporter().export(with_hotpath(CLASSIFIER, precision="fp32"), folder, lambda m: None)
    assert report.metrics["precision"] == "fp32"
    return folder / "model.onnx"


def test_gate_rejects_a_quantized_model_with_absurd_calibration(fp32_classifier, tmp_path):
    broken = tmp_path / "broken.onnx"
    # Calibrated on one black image: every activation range collapses, so real photos saturate.
    quantize.quantize_static_qdq(fp32_classifier, broken, "PIXELS", np.zeros((1, 224, 224, 3), np.uint8))
    floors = quantize.floors_of(with_hotpath(CLASSIFIER, precision="int8"), quantize.CLASSIFIER_FLOORS)
    with pytest.raises(BuildError) as exc:
        gate_classifier("image_classifier", fp32_classifier, broken, "PIXELS", OUTPUTS, floors, lambda m: None)
    message = str(exc.value)
    assert message.startswith("image_classifier: INT8 gate failed on 63 held-out photo crops")
    top1 = float(re.search(r"top1_agreement (\d\.\d+) < int8_min_top1_agreement", message).group(1))
    assert top1 < floors["int8_min_top1_agreement"]
    assert "heldout 63" in message


def test_int8_export_passes_the_committed_floors(tmp_path):
    spec = with_hotpath(CLASSIFIER, precision="int8")
    floors = quantize.floors_of(spec, quantize.CLASSIFIER_FLOORS)
    report = ImageClassifierExporter().export(spec, tmp_path, lambda m: None)
    metrics = report.metrics
    assert metrics["precision"] == "int8" and metrics["int8_heldout"] == 63
    assert metrics["int8_top1_agreement"] >= floors["int8_min_top1_agreement"]
    assert metrics["int8_top5_overlap"] >= floors["int8_min_top5_overlap"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.txt", "model.onnx"]   # no temporary left

    import onnx

    graph = onnx.load(str(tmp_path / "model.onnx")).graph
    assert sum(n.op_type == "QuantizeLinear" for n in graph.node) > 40
    assert [o.name for o in graph.output] == ["SCORES", "CLASS_IDS", "LABELS"]
