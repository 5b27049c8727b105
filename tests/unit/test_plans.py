"""The TensorRT path up to the builder call: options, profiles, plan configs, folding, parity, inventory."""

import copy
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
from google.protobuf import text_format
from polygraphy.exception import PolygraphyException
from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.errors import SpecError
from hotpath.plans import parity
from hotpath.plans.options import recipe_for, tensorrt_options
from hotpath.plans.plan_config import plan_config
from hotpath.plans.profiles import derive_profiles
from hotpath.plans.sanitize import ensure_sanitized, source_digest
from hotpath.plans.step import write_plan_files
from hotpath.spec import load_spec, spec_from_dict
from hotpath.tensorrt import builder
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import plan_status
from hotpath.tensorrt.manifest import read_manifest, write_manifest
from hotpath.tensorrt.recipe import config_path, read_recipe
from tests import planrepo


@pytest.fixture(scope="module")
def encoder():
    return load_spec(paths.model_specs_dir() / "text_encoder.toml")


def with_tensorrt(spec, **table):
    data = copy.deepcopy(spec.raw)
    data["hotpath"]["tensorrt"] = table
    return spec_from_dict(data, spec.name, spec.source)


def test_profiles_follow_batching_and_sequence_length(encoder):
    spec = with_tensorrt(encoder, sequence_length=[16, 48, 128])
    preferred = max(encoder.config.dynamic_batching.preferred_batch_size)
    top = encoder.config.max_batch_size
    profile = derive_profiles(spec, [16, 48, 128])
    assert set(profile) == {"input_ids", "attention_mask", "token_type_ids"}
    assert profile["input_ids"] == [[1, 16], [preferred, 48], [top, 128]]


def test_profiles_of_fixed_shapes_and_unbatched_models(encoder):
    data = copy.deepcopy(encoder.raw)
    data.update(max_batch_size=0, input=[{"name": "x", "data_type": "TYPE_FP32", "dims": [3, 224]}])
    data.pop("dynamic_batching"), data.pop("model_warmup")
    spec = spec_from_dict(data, encoder.name)
    assert derive_profiles(spec, None) == {"x": [[3, 224]] * 3}


def test_variable_dims_need_a_sequence_length(encoder):
    with pytest.raises(SpecError, match="hotpath.tensorrt.sequence_length.*input_ids"):
        recipe_for(with_tensorrt(encoder, precision="fp16"))


@pytest.mark.parametrize("table, field", [
    ({"precision": "bf8", "sequence_length": [1, 2, 3]}, "hotpath.tensorrt.precision"),
    ({"sequence_length": [64, 32, 256]}, "hotpath.tensorrt.sequence_length"),
    ({"sequence_length": [1, 2, 3], "compute_capabilities": ["sm90"]}, "hotpath.tensorrt.compute_capabilities"),
    ({"sequence_length": [1, 2, 3], "fp16": True}, "hotpath.tensorrt.fp16"),
])
def test_bad_options_name_the_field(encoder, table, field):
    with pytest.raises(SpecError) as err:
        tensorrt_options(with_tensorrt(encoder, **table))
    assert err.value.field == field


def test_string_tensors_keep_a_model_off_tensorrt():
    classifier = load_spec(paths.model_specs_dir() / "image_classifier.toml")
    with pytest.raises(SpecError, match="no string tensors.*LABELS"):
        tensorrt_options(with_tensorrt(classifier, precision="fp16"))


def test_recipe_defaults_tolerance_per_precision(encoder):
    fp32 = recipe_for(with_tensorrt(encoder, precision="fp32", sequence_length=[16, 32, 256]))
    int8 = recipe_for(with_tensorrt(encoder, precision="int8", sequence_length=[16, 32, 256]))
    assert fp32.parity_atol < recipe_for(encoder).parity_atol < int8.parity_atol
    assert int8.calibration_cache and fp32.calibration_cache is None


def test_plan_config_round_trips_through_model_config_pb2(encoder):
    recipe = recipe_for(encoder)
    config = plan_config(encoder, recipe, tensorrt_options(encoder))
    parsed = text_format.Parse(text_format.MessageToString(config), mc.ModelConfig())
    assert parsed == config
    assert parsed.platform == "tensorrt_plan" and not parsed.backend
    assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in parsed.instance_group)
    assert dict(parsed.cc_model_filenames) == {cc: f"model.sm{cc.replace('.', '')}.plan"
                                              for cc in recipe.compute_capabilities}
    assert parsed.default_model_filename == "model.plan"
    assert "intra_op_thread_count" not in parsed.parameters
    assert parsed.model_warmup == encoder.config.model_warmup
    graphs = parsed.optimization.cuda
    assert graphs.graphs
    opt_len = recipe.profiles[0]["input_ids"][1][1]
    assert [g.batch_size for g in graphs.graph_spec] == list(encoder.config.dynamic_batching.preferred_batch_size)
    assert all(list(g.input["input_ids"].dim) == [opt_len] for g in graphs.graph_spec)


def test_committed_plan_config_and_recipe_match_the_spec(encoder, tmp_path):
    committed = paths.model_repository() / "text_encoder"
    (tmp_path / "text_encoder").mkdir()
    assert write_plan_files(encoder, tmp_path / "text_encoder", lambda m: None)
    assert config_path(committed).read_text() == config_path(tmp_path / "text_encoder").read_text(), \
        "configs/tensorrt.pbtxt is stale: run `make engines`"
    assert read_recipe(committed) == recipe_for(encoder)


def test_builder_is_set_up_without_tensorrt_and_stops_at_the_build(tmp_path, encoder):
    recipe = recipe_for(encoder)
    job = builder.BuildJob(onnx=tmp_path / "model.trt.onnx", plan=tmp_path / "model.sm90.plan", recipe=recipe,
                           timing_cache=tmp_path / "timing.cache")
    config = builder.create_config(job)
    assert config.fp16 and not config.int8 and config.timing_cache_path == str(tmp_path / "timing.cache")
    (profile,) = config.profiles
    assert [tuple(s) for s in profile["input_ids"]] == [tuple(s) for s in recipe.profiles[0]["input_ids"]]
    loader = builder.plan_loader(job)
    assert loader.timing_cache_path == str(tmp_path / "timing.cache")
    assert "tensorrt" in builder.unavailable().lower()
    with pytest.raises(PolygraphyException, match="tensorrt"):
        builder.build(job, log=lambda m: None)
    assert not job.plan.exists()
    # Hardware compatibility and INT8 calibration need TensorRT's own types: they fail at set-up here.
    for variant in (dict(hardware_compatibility="AMPERE_PLUS"), dict(precision="int8")):
        other = builder.BuildJob(**{**job.__dict__, "recipe": type(recipe)(**{**recipe.__dict__, **variant})})
        with pytest.raises(PolygraphyException, match="tensorrt"):
            builder.create_config(other)


def test_constant_folding_is_checked_with_polygraphy_and_incremental(tmp_path):
    source = planrepo.scaler_onnx(tmp_path / "model.onnx")
    # Add a constant subgraph (k2 = k * 1) for the folder to remove.
    model = onnx.load(str(source))
    one = onnx.helper.make_tensor("one", onnx.TensorProto.FLOAT, [], [1.0])
    model.graph.initializer.append(one)
    model.graph.node.insert(0, onnx.helper.make_node("Mul", ["k", "one"], ["k2"]))
    model.graph.node[1].input[1] = "k2"
    onnx.save(model, str(source))
    folded = tmp_path / "model.trt.onnx"
    counts = ensure_sanitized(source, folded)
    assert counts == {"nodes_before": 2, "nodes_after": 1}
    assert source_digest(folded) and ensure_sanitized(source, folded) is None
    feeds = [{"X": np.random.default_rng(i).standard_normal((b, 4)).astype(np.float32)} for i, b in enumerate((1, 3))]
    same = parity.compare(parity.onnxrt_runner(source, "src"), parity.onnxrt_runner(folded, "folded"), feeds, 1e-6)
    assert same.ok and same.max_abs_diff == 0.0 and same.iterations == 2
    off = planrepo.scaler_onnx(tmp_path / "off.onnx", factor=2.01)
    drift = parity.compare(parity.onnxrt_runner(source, "src"), parity.onnxrt_runner(off, "off"), feeds, 1e-3)
    assert not drift.ok and drift.max_abs_diff > 1e-3


def test_inventory_finds_fresh_stale_incompatible_and_missing_plans(tmp_path):
    repo = planrepo.make_repository(tmp_path)
    model_dir, version = repo / "scaler", repo / "scaler" / "1"
    recipe = read_recipe(model_dir)
    assert plan_status(model_dir, version, recipe, planrepo.H100).status == "ok"
    a100 = plan_status(model_dir, version, recipe, Target("NVIDIA A100", "8.0", "10.5.0"))
    assert a100.status == "incompatible" and "9.0" in a100.reason
    # Settings changed in the spec -> stale
    changed = type(recipe)(**{**recipe.__dict__, "precision": "fp32"})
    assert plan_status(model_dir, version, changed, planrepo.H100).status == "stale"
    # ONNX changed since the build -> stale
    planrepo.scaler_onnx(version / recipe.onnx, factor=3.0)
    stale = plan_status(model_dir, version, recipe, planrepo.H100)
    assert stale.status == "stale" and "model.trt.onnx changed" in stale.reason
    # No manifest -> missing
    for f in version.glob("*.manifest.json"):
        f.unlink()
    assert plan_status(model_dir, version, recipe, planrepo.H100).status == "missing"


def test_plan_bytes_that_differ_from_the_manifest_are_stale(tmp_path):
    repo = planrepo.make_repository(tmp_path)
    version = repo / "scaler" / "1"
    (version / "model.sm90.plan").write_bytes(b"truncated")
    status = plan_status(repo / "scaler", version, read_recipe(repo / "scaler"), planrepo.H100)
    assert status.status == "stale" and "differs" in status.reason


def _hotpath(*args):
    return subprocess.run([sys.executable, "-m", "hotpath", *args], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_check_lists_every_missing_plan_and_fails():
    run = _hotpath("engines", "--check", "--model", "text_encoder", "--tensorrt", "10.5.0")
    assert run.returncode == 1, run.stdout + run.stderr
    recipe = read_recipe(paths.model_repository() / "text_encoder")
    for cc in recipe.compute_capabilities:
        assert f"text_encoder/1: missing: no plan built for GPU ? (cc {cc}), TensorRT 10.5.0" in run.stdout
    assert f"0 ok, {len(recipe.compute_capabilities)} missing" in run.stdout


def test_check_against_a_named_gpu(tmp_path):
    repo = planrepo.make_repository(tmp_path)
    manifest = read_manifest(repo / "scaler" / "1" / "model.sm90.plan.manifest.json")
    assert manifest.compute_capability == "9.0"
    # Copy the scaler's plan into a repository laid out like the real one, under the encoder's name,
    # so --check compares a real spec's recipe against it: the recipe differs, so the plan is stale.
    enc_repo = tmp_path / "repo"
    (enc_repo / "text_encoder" / "1").mkdir(parents=True)
    write_manifest(manifest, enc_repo / "text_encoder" / "1")
    run = _hotpath("engines", "--check", "--model", "text_encoder", "--repository", str(enc_repo),
                   "--gpu", "NVIDIA H100 80GB HBM3", "--compute-capability", "9.0", "--tensorrt", "10.5.0")
    assert run.returncode == 1
    assert "configs/tensorrt.build.json differs from the spec" in run.stdout
    assert "text_encoder/1 model.sm90.plan: stale" in run.stdout


def test_engines_without_tensorrt_says_so_in_one_line_and_builds_onnx():
    run = _hotpath("engines", "--model", "text_encoder")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "TensorRT" in line]
    assert len(lines) == 1 and lines[0].startswith("[engines] TensorRT plans skipped: no TensorRT")
    assert (paths.model_repository() / "text_encoder" / "1" / "model.onnx").is_file()
    assert json.loads((paths.model_repository() / "text_encoder" / "configs" / "tensorrt.build.json").read_text())


def test_record_writes_the_manifest_a_fresh_plan_is_judged_by(tmp_path):
    repo = planrepo.make_repository(tmp_path)
    model_dir, version = repo / "scaler", repo / "scaler" / "1"
    for f in version.glob("*.plan*"):
        f.unlink()
    recipe = read_recipe(model_dir)
    job = builder.BuildJob(onnx=version / recipe.onnx, plan=version / "model.sm89.plan", recipe=recipe,
                           timing_cache=tmp_path / "timing.cache")
    job.plan.write_bytes(b"engine bytes as the builder would write them")
    l4 = Target("NVIDIA L4", "8.9", "10.5.0.18")
    manifest = builder.record(job, l4, 12.34, {"ok": True, "max_abs_diff": 2e-3})
    assert (version / "model.sm89.plan.manifest.json").is_file()
    assert (manifest.gpu_name, manifest.compute_capability, manifest.tensorrt_version) == ("NVIDIA L4", "8.9", "10.5.0.18")
    assert manifest.precision == "fp16" and manifest.profiles == recipe.profiles and manifest.build_seconds == 12.3
    status = plan_status(model_dir, version, recipe, Target("NVIDIA L4", "8.9", "10.5.0"))
    assert status.ok and status.manifest == manifest
    assert plan_status(model_dir, version, recipe, planrepo.H100).status == "incompatible"
