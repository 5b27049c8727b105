"""The precision ladder: `[hotpath] precision`, its floors, the fingerprint and the INT8 gates."""

import copy

import numpy as np
import pytest

from hotpath import paths
from hotpath.errors import BuildError, SpecError
from hotpath.exporters import quantize
from hotpath.exporters.sentence_encoder import TextEncoderExporter
from hotpath.repository_build import _export_inputs
from hotpath.specs.spec import load_spec, spec_from_dict

CLASSIFIER = load_spec(paths.model_specs_dir() / "image_classifier.toml")
ENCODER = load_spec(paths.model_specs_dir() / "text_encoder.toml")


def with_hotpath(spec, drop=(), **changes):
    """`spec` loaded again with its [hotpath] table changed (parsed and checked as a spec file is)."""
    data = copy.deepcopy(spec.raw)
    data["hotpath"] = {k: v for k, v in {**data["hotpath"], **changes}.items() if k not in drop}
    return spec_from_dict(data, spec.name, spec.source)


@pytest.mark.parametrize("value", ["int4", "FP32", 8, ""])
def test_unknown_precision_is_a_spec_error_naming_the_file_and_the_field(value):
    with pytest.raises(SpecError) as exc:
        with_hotpath(CLASSIFIER, precision=value)
    assert exc.value.model == "image_classifier" and exc.value.field == "hotpath.precision"
    assert repr(value) in str(exc.value) and str(exc.value).startswith(str(CLASSIFIER.source))


def test_int8_without_its_floors_is_a_spec_error():
    spec = with_hotpath(CLASSIFIER, precision="int8", drop=("int8_min_top5_overlap",))
    with pytest.raises(SpecError) as exc:
        quantize.floors_of(spec, quantize.CLASSIFIER_FLOORS)
    assert exc.value.field == "hotpath.int8_min_top5_overlap"


@pytest.mark.parametrize("value", [1.5, -0.1, "high", True])
def test_a_floor_out_of_range_or_not_a_number_is_a_spec_error_at_load(value):
    with pytest.raises(SpecError) as exc:
        with_hotpath(CLASSIFIER, precision="int8", int8_min_top1_agreement=value)
    assert exc.value.field == "hotpath.int8_min_top1_agreement"


def test_int8_encoder_with_tensorrt_plans_is_refused(tmp_path):
    # TensorRT builds plans from model.onnx and cannot parse ONNX Runtime's dynamic-quantization ops.
    with pytest.raises(SpecError, match="hotpath.precision.*TensorRT"):
        TextEncoderExporter().export(with_hotpath(ENCODER, precision="int8"), tmp_path, print)
    assert not list(tmp_path.iterdir())


def test_precision_and_floors_are_part_of_the_export_fingerprint():
    fp32 = _export_inputs(with_hotpath(CLASSIFIER, precision="fp32"))
    assert fp32 != _export_inputs(with_hotpath(CLASSIFIER, precision="int8"))
    assert fp32 != _export_inputs(with_hotpath(CLASSIFIER, precision="fp32", int8_min_top1_agreement=0.9))


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






