"""Specs -> ModelConfig -> config.pbtxt: round trips, the committed repository, invalid specs."""

import copy
import tomllib

import pytest

from hotpath import paths
from hotpath.errors import SpecError
from hotpath.specs.config_pbtxt import render, to_pbtxt, validate, validate_all
from hotpath.specs.repository import parse_pbtxt
from hotpath.specs.spec import load_specs, spec_from_dict

SPECS = load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())
ENCODER = tomllib.loads((paths.model_specs_dir() / "text_encoder.toml").read_text())


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_config_round_trips_through_text_format(spec):
    validate(spec)
    assert parse_pbtxt(to_pbtxt(spec.config)) == spec.config


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_committed_config_matches_spec(spec):
    committed = paths.model_repository() / spec.name / "config.pbtxt"
    assert committed.read_text() == render(spec), f"{committed} is stale: run `make engines`"


def test_python_models_have_one_source():
    """model.py lives in python_backends/ only: the repository's copy is a build output, out of git."""
    import subprocess

    tracked = subprocess.run(["git", "ls-files", "model_repository"], cwd=paths.ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    assert not [f for f in tracked if f.endswith(".py")], "copies of python_backends/*/model.py are committed"
    for spec in (s for s in SPECS if s.kind == "python"):
        assert (paths.python_backends_dir() / spec.hotpath.python_backend / "model.py").is_file(), spec.name


def test_production_encoder_uses_native_onnxruntime_with_warmup():
    encoder = next(s for s in SPECS if s.name == "text_encoder").config
    assert encoder.backend == "onnxruntime"
    assert encoder.model_warmup and encoder.dynamic_batching.preferred_batch_size


def test_ensemble_wiring_validates():
    validate_all(SPECS)


def _mutated(mutate):
    data = copy.deepcopy(ENCODER)
    mutate(data)
    return data


BAD_SPECS = [
    ("misspelt field", lambda d: d.update(max_batch_siz=8), "max_batch_siz"),
    ("unknown data type", lambda d: d["input"][0].update(data_type="TYPE_FLOAT99"), "data_type"),
    ("missing dims", lambda d: d["output"][0].pop("dims"), "output[0].dims"),
    ("zero dim", lambda d: d["output"][0].update(dims=[0]), "output[0].dims"),
    ("duplicate input", lambda d: d["input"][1].update(name="input_ids"), "input[1].name"),
    ("preferred batch above max", lambda d: d["dynamic_batching"].update(preferred_batch_size=[8, 64]),
     "dynamic_batching.preferred_batch_size"),
    ("batching without max_batch_size", lambda d: d.update(max_batch_size=0), "dynamic_batching"),
    ("zero instances", lambda d: d["instance_group"][0].update(count=0), "instance_group[0].count"),
    ("warmup dims mismatch", lambda d: d["model_warmup"][0]["inputs"]["input_ids"].update(dims=[32, 2]),
     "model_warmup[0].inputs.input_ids.dims"),
    ("warmup dtype mismatch", lambda d: d["model_warmup"][0]["inputs"]["input_ids"].update(data_type="TYPE_INT32"),
     "model_warmup[0].inputs.input_ids.data_type"),
    ("warmup missing input", lambda d: d["model_warmup"][0]["inputs"].pop("token_type_ids"),
     "model_warmup[0].inputs"),
    ("warmup file not declared", lambda d: d["model_warmup"][0]["inputs"].update(input_ids={
        k: v for k, v in d["model_warmup"][0]["inputs"]["input_ids"].items() if k in ("data_type", "dims")}
        | {"input_data_file": "ids.bin"}), "model_warmup[0].inputs.input_ids.input_data_file"),
    ("no backend", lambda d: d.pop("backend"), "backend"),
    ("unknown kind", lambda d: d["hotpath"].update(kind="tensorflow"), "hotpath.kind"),
    ("unknown hotpath key", lambda d: d["hotpath"].update(exportr="text_encoder"), "hotpath.exportr"),
    ("name differs from file", lambda d: d.update(name="encoder2"), "name"),
]


@pytest.mark.parametrize("mutate,field", [(m, f) for _, m, f in BAD_SPECS], ids=[c for c, _, _ in BAD_SPECS])
def test_invalid_spec_names_model_and_field(mutate, field):
    with pytest.raises(SpecError) as info:
        validate(spec_from_dict(_mutated(mutate), "text_encoder"))
    assert info.value.model == "text_encoder"
    assert field in info.value.field, str(info.value)
    assert "text_encoder" in str(info.value) and field in str(info.value)


def _ensemble_with(mutate):
    specs = {s.name: s for s in SPECS}
    data = tomllib.loads((paths.ensemble_specs_dir() / "text_embedding_exact.toml").read_text())
    mutate(data)
    bad = spec_from_dict(data, "text_embedding_exact")
    return [bad if s.name == "text_embedding_exact" else specs[s.name] for s in SPECS]


BAD_ENSEMBLES = [
    ("unknown model", lambda d: d["ensemble_scheduling"]["step"][1].update(model_name="nope"),
     "ensemble_scheduling.step[1].model_name"),
    ("output type mismatch", lambda d: d["output"][0].update(data_type="TYPE_FP16"), "output[0]"),
    ("output dim mismatch", lambda d: d["output"][0].update(dims=[768]), "output[0]"),
    ("unfed input", lambda d: d["ensemble_scheduling"]["step"][1]["input_map"].pop("token_type_ids"),
     "ensemble_scheduling.step[1].input_map"),
    ("tensor not produced yet", lambda d: d["ensemble_scheduling"]["step"].reverse(),
     "ensemble_scheduling.step[0].input_map"),
    ("batch too large", lambda d: d.update(max_batch_size=128), "ensemble_scheduling.step[0].model_name"),
]


@pytest.mark.parametrize("mutate,field", [(m, f) for _, m, f in BAD_ENSEMBLES], ids=[c for c, _, _ in BAD_ENSEMBLES])
def test_invalid_ensemble_wiring_is_caught(mutate, field):
    with pytest.raises(SpecError) as info:
        validate_all(_ensemble_with(mutate))
    assert info.value.model == "text_embedding_exact"
    assert info.value.field.startswith(field), str(info.value)


def test_warmup_files_are_written_as_serialized_bytes_tensors(tmp_path):
    """image_preprocess warms up on a real JPEG: <model>/warmup/<name> holds it as Triton's BYTES tensor."""
    import numpy as np
    from tritonclient.utils import deserialize_bytes_tensor

    from hotpath.repository_build import WARMUP_DIR, _write_warmup_files, resolve_asset

    (spec,) = [s for s in SPECS if s.name == "image_preprocess"]
    files = spec.hotpath.warmup_files
    assert {i.input_data_file for w in spec.config.model_warmup for i in w.inputs.values()} <= set(files)
    assert _write_warmup_files(spec, tmp_path)
    for name, ref in files.items():
        (item,) = deserialize_bytes_tensor((tmp_path / WARMUP_DIR / name).read_bytes())
        assert item == resolve_asset(ref, spec).read_bytes()
    assert not _write_warmup_files(spec, tmp_path), "unchanged files are not rewritten"
    np.testing.assert_equal(len(list((tmp_path / WARMUP_DIR).iterdir())), len(files))


def test_a_single_model_may_not_enable_the_response_cache():
    # tritonserver caches a single model's error responses and replays them as empty successes.
    data = copy.deepcopy(ENCODER)
    data["response_cache"] = {"enable": True}
    with pytest.raises(SpecError) as info:
        validate(spec_from_dict(data, "text_encoder"))
    assert info.value.field == "response_cache.enable" and "ensemble" in str(info.value)
    cached = [s.name for s in SPECS if s.config.response_cache.enable]
    assert cached and all(s.kind == "ensemble" for s in SPECS if s.config.response_cache.enable), cached


def test_an_onnx_model_may_not_take_text():
    # The native onnxruntime backend validates nothing per request: text goes through a Python step.
    data = copy.deepcopy(ENCODER)
    data["input"] = [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}]
    data.pop("model_warmup", None)
    with pytest.raises(SpecError) as info:
        validate(spec_from_dict(data, "text_encoder"))
    assert info.value.field == "input" and "Python step" in str(info.value)
    for spec in SPECS:   # so every text input of the repository is validated by hotpath's own code
        if any(t.data_type == 13 for t in spec.config.input):   # TYPE_STRING
            assert spec.kind in ("python", "ensemble"), spec.name
