"""The INT8 build steps on the real image classifier (tens of seconds of CPU: exports and ONNX Runtime
quantization): the int8 export passes the committed floors; the gate refuses a model quantized with
absurd calibration."""

import copy
import re

import numpy as np
import pytest

from hotpath import paths
from hotpath.errors import BuildError
from hotpath.exporters import quantize
from hotpath.exporters.image_classifier import ImageClassifierExporter, gate_classifier
from hotpath.specs.spec import load_spec, spec_from_dict

CLASSIFIER = load_spec(paths.model_specs_dir() / "image_classifier.toml")
OUTPUTS = ["SCORES", "CLASS_IDS"]


def with_hotpath(spec, drop=(), **changes):
    """`spec` loaded again with its [hotpath] table changed (parsed and checked as a spec file is)."""
    data = copy.deepcopy(spec.raw)
    data["hotpath"] = {k: v for k, v in {**data["hotpath"], **changes}.items() if k not in drop}
    return spec_from_dict(data, spec.name, spec.source)


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
