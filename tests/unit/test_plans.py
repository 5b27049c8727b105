"""The TensorRT path up to the builder call: options, profiles, plan configs, folding, parity, inventory."""

import copy
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
from hotpath.specs.spec import load_spec, load_specs, spec_from_dict
from hotpath.tensorrt import builder, parity
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import built_plans, plan_status
from hotpath.tensorrt.manifest import Manifest, read_manifest, recipe_digest, sha256, write_manifest
from hotpath.tensorrt.plans import calibration
from hotpath.tensorrt.plans.options import recipe_for, tensorrt_options
from hotpath.tensorrt.plans.plan_config import plan_config
from hotpath.tensorrt.plans.profiles import derive_profiles
from hotpath.tensorrt.plans.sanitize import ensure_sanitized, source_digest
from hotpath.tensorrt.plans.step import PlanStep, parity_feeds, write_plan_files
from hotpath.tensorrt.recipe import config_path, feeds_path, read_feeds, read_recipe
from hotpath.tuning.knobs import knob
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
    fp32 = recipe_for(with_tensorrt(encoder, precision="fp32", sequence_length=[1, 32, 256]))
    int8 = recipe_for(with_tensorrt(encoder, precision="int8", sequence_length=[1, 32, 256]))
    assert fp32.parity_atol < recipe_for(encoder).parity_atol < int8.parity_atol
    assert int8.calibration_cache and fp32.calibration_cache is None


def test_plan_config_round_trips_through_model_config_pb2(encoder):
    recipe = recipe_for(encoder)
    config = plan_config(encoder, recipe, tensorrt_options(encoder))
    parsed = text_format.Parse(text_format.MessageToString(config), mc.ModelConfig())
    assert parsed == config
    assert parsed.platform == "tensorrt_plan" and not parsed.backend
    assert all(g.kind == mc.ModelInstanceGroup.KIND_GPU for g in parsed.instance_group)
    assert not parsed.cc_model_filenames  # no plan built here
    assert parsed.default_model_filename == "model.plan"
    assert "intra_op_thread_count" not in parsed.parameters
    assert list(parsed.model_warmup)[:len(encoder.config.model_warmup)] == list(encoder.config.model_warmup)
    graphs = parsed.optimization.cuda
    assert graphs.graphs
    opt_len = recipe.profiles[0]["input_ids"][1][1]
    assert [g.batch_size for g in graphs.graph_spec] == list(encoder.config.dynamic_batching.preferred_batch_size)
    assert all(list(g.input["input_ids"].dim) == [opt_len] for g in graphs.graph_spec)


def test_cuda_graphs_serve_every_batch_size_up_to_theirs(encoder):
    """Triton's TensorRT backend replays a graph for smaller batches only with graph_lower_bound."""
    recipe = recipe_for(encoder)
    config = plan_config(encoder, recipe, tensorrt_options(encoder))
    opt_len = recipe.profiles[0]["input_ids"][1][1]
    graphs = list(config.optimization.cuda.graph_spec)
    assert [(g.graph_lower_bound.batch_size, g.batch_size) for g in graphs] == [(1, 8), (9, 16)]
    for graph in graphs:
        assert graph.HasField("graph_lower_bound")
        # Every input bounded (Triton refuses a lower bound missing one); the length stays exact.
        assert set(graph.graph_lower_bound.input) == set(graph.input) == {t.name for t in encoder.config.input}
        assert all(list(graph.graph_lower_bound.input[n].dim) == list(graph.input[n].dim) == [opt_len]
                   for n in graph.input)
        # Each captured shape is warmed (zeros) so rows past a smaller batch hold valid token ids.
        assert any(w.batch_size == graph.batch_size and list(w.inputs["input_ids"].dims) == [opt_len]
                   for w in config.model_warmup)
    # A batch of 5 at the opt length falls in the first graph's closed interval, 12 in the second's.
    covering = [[g.batch_size for g in graphs if g.graph_lower_bound.batch_size <= b <= g.batch_size] for b in (5, 12)]
    assert covering == [[8], [16]]


def _built(model_dir, cc, recipe, **fields):
    """A plan with a fresh manifest for `cc` in every version directory of `model_dir`."""
    name = f"model.sm{cc.replace('.', '')}.plan"
    for version in sorted(p for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit()):
        (version / name).write_bytes(f"engine {cc}".encode())
        write_manifest(Manifest(model=recipe.model, plan=name, plan_sha256=sha256(version / name), onnx_sha256="",
                                gpu_name="GPU", compute_capability=cc, tensorrt_version="10.5.0.18",
                                precision=recipe.precision, profiles=recipe.profiles,
                                recipe_digest=recipe_digest(recipe.digest_fields()), **fields), version)
    return name


def test_plan_config_names_only_the_plans_built(encoder, tmp_path):
    model_dir, recipe = tmp_path / "text_encoder", recipe_for(encoder)
    (model_dir / "1").mkdir(parents=True)
    assert write_plan_files(encoder, model_dir)
    config = text_format.Parse(config_path(model_dir).read_text(), mc.ModelConfig())
    assert not config.cc_model_filenames and config.default_model_filename == "model.plan"
    sm90 = _built(model_dir, "9.0", recipe)
    stale = _built(model_dir, "8.6", recipe)
    (model_dir / "1" / stale).write_bytes(b"not the plan its manifest describes")
    assert write_plan_files(encoder, model_dir)
    config = text_format.Parse(config_path(model_dir).read_text(), mc.ModelConfig())
    assert dict(config.cc_model_filenames) == {"9.0": sm90}
    for name in [config.default_model_filename, *config.cc_model_filenames.values()]:
        assert name == "model.plan" or (model_dir / "1" / name).is_file()
    # A plan in one version directory only is not named: cc_model_filenames covers every version.
    (model_dir / "2").mkdir()
    assert built_plans(model_dir, recipe) == []
    # A hardware-compatible plan serves every GPU of cc >= 8.0 as the default file.
    (model_dir / "2").rmdir()
    for f in (model_dir / "1").glob("*.plan*"):
        f.unlink()
    ampere = _built(model_dir, "8.0", recipe, hardware_compatibility="AMPERE_PLUS")
    config = plan_config(encoder, recipe, tensorrt_options(encoder), built_plans(model_dir, recipe))
    assert config.default_model_filename == ampere and not config.cc_model_filenames


def test_committed_plan_config_and_recipe_match_the_spec(encoder, tmp_path):
    committed = paths.model_repository() / "text_encoder"
    (tmp_path / "text_encoder").mkdir()
    built = built_plans(committed, recipe_for(encoder))  # what this host built, if anything
    assert write_plan_files(encoder, tmp_path / "text_encoder", built=built)
    assert config_path(committed).read_text() == config_path(tmp_path / "text_encoder").read_text(), \
        "configs/tensorrt.pbtxt is stale: run `make engines`"
    assert read_recipe(committed) == recipe_for(encoder)
    assert feeds_path(committed).read_text() == feeds_path(tmp_path / "text_encoder").read_text(), \
        "configs/tensorrt.feeds.json is stale: run `make engines`"


def _specs_with(tokenizer_parameters: dict | None = None, **tensorrt) -> tuple:
    """The real specs, with the tokenizer's [parameters] and the encoder's [hotpath.tensorrt] changed."""
    specs = {s.name: s for s in load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())}
    tok = specs["tokenizer"]
    data = copy.deepcopy(tok.raw)
    data["parameters"].update(tokenizer_parameters or {})
    data["parameters"] = {k: v for k, v in data["parameters"].items() if v is not None}
    specs["tokenizer"] = spec_from_dict(data, tok.name, tok.source)
    encoder = specs["text_encoder"]
    if tensorrt:
        encoder = specs["text_encoder"] = with_tensorrt(encoder, **{**encoder.hotpath.tensorrt, **tensorrt})
    return encoder, list(specs.values())


@pytest.mark.parametrize("pad", knob("pad_to_multiple_of").ladder_values)
def test_committed_profile_takes_what_the_tokenizer_emits_at_every_padding_the_tuner_may_choose(pad):
    encoder, specs = _specs_with({"pad_to_multiple_of": pad})
    (profile,) = recipe_for(encoder, specs).profiles
    shortest = pad or 1
    assert all(lo[1] <= shortest and hi[1] >= 256 for lo, _, hi in profile.values())


@pytest.mark.parametrize("pad, lo", [(0, 2), (8, 16), (16, 32)])
def test_profile_above_the_shortest_tokenized_length_fails_the_build_naming_both_files(pad, lo):
    encoder, specs = _specs_with({"pad_to_multiple_of": pad}, sequence_length=[lo, 32, 256])
    with pytest.raises(SpecError) as err:
        recipe_for(encoder, specs)
    message = str(err.value)
    assert err.value.field == "hotpath.tensorrt.sequence_length" and "build/text_encoder.toml" in message
    assert "build/tokenizer.toml" in message and f"pad_to_multiple_of = {pad}" in message
    assert f"as short as {pad or 1}" in message and "text_embedding_exact" in message


def test_profile_below_the_tokenizer_max_length_fails_the_build():
    encoder, specs = _specs_with(sequence_length=[1, 32, 128])
    with pytest.raises(SpecError, match=r"ends at 128 tokens.*build/tokenizer.toml.*up to 256"):
        recipe_for(encoder, specs)
    # Left out, max_length is the recipe's default (all-MiniLM-L6-v2's 256), as the served tokenizer reads it.
    encoder, specs = _specs_with({"max_length": None}, sequence_length=[1, 32, 128])
    with pytest.raises(SpecError, match=r"ends at 128 tokens.*max_length = 256"):
        recipe_for(encoder, specs)


def test_the_build_checks_the_profile_against_the_tokenizer(encoder, tmp_path, monkeypatch):
    """`hotpath build` (write_plan_files, the --check path through recipe_for) reads the tokenizer spec
    from build/: a tuner that writes pad_to_multiple_of = 8 back makes the next build fail clearly."""
    for name in ("build", "ensembles"):
        (tmp_path / name).mkdir()
        for f in getattr(paths, f"{'model' if name == 'build' else 'ensemble'}_specs_dir")().glob("*.toml"):
            (tmp_path / name / f.name).write_text(f.read_text())
    tok = tmp_path / "build" / "tokenizer.toml"
    tok.write_text(tok.read_text().replace("pad_to_multiple_of = 16", "pad_to_multiple_of = 8"))
    enc = tmp_path / "build" / "text_encoder.toml"
    enc.write_text(enc.read_text().replace("sequence_length = [1, 32, 256]", "sequence_length = [16, 32, 256]"))
    monkeypatch.setenv("HOTPATH_BUILD_DIR", str(tmp_path / "build"))
    monkeypatch.setenv("HOTPATH_ENSEMBLES_DIR", str(tmp_path / "ensembles"))
    (tmp_path / "repo" / "text_encoder").mkdir(parents=True)
    with pytest.raises(SpecError, match="starts at 16 tokens.*tokenizer.toml.*pad_to_multiple_of = 8"):
        write_plan_files(load_spec(enc), tmp_path / "repo" / "text_encoder")
    assert not config_path(tmp_path / "repo" / "text_encoder").exists()


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
        builder.build(job)
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


def test_check_against_a_named_gpu(tmp_path):
    repo = planrepo.make_repository(tmp_path)
    manifest = read_manifest(repo / "scaler" / "1" / "model.sm90.plan.manifest.json")
    assert manifest.compute_capability == "9.0"
    # Copy the scaler's plan into a repository laid out like the real one, under the encoder's name,
    # so --check compares a real spec's recipe against it: the recipe differs, so the plan is stale.
    enc_repo = tmp_path / "repo"
    (enc_repo / "text_encoder" / "1").mkdir(parents=True)
    write_manifest(manifest, enc_repo / "text_encoder" / "1")
    run = _hotpath("build", "--check", "--model", "text_encoder", "--repository", str(enc_repo),
                   "--gpu", "NVIDIA H100 80GB HBM3", "--compute-capability", "9.0", "--tensorrt", "10.5.0")
    assert run.returncode == 1
    assert "configs/tensorrt.build.json differs from the spec" in run.stdout
    assert "text_encoder/1 model.sm90.plan: stale" in run.stdout


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


def test_calibration_feeds_have_exactly_the_opt_shape():
    feeds = [{"ids": np.arange(1, 17).reshape(1, 16), "mask": np.ones((1, 16), np.int64)},
             {"ids": np.arange(1, 49).reshape(1, 48), "mask": np.ones((1, 48), np.int64)},
             {"ids": np.full((3, 32), 7), "mask": np.ones((3, 32), np.int64)}]
    out = calibration.at_shape(feeds, {"ids": [4, 32], "mask": [4, 32]})
    assert [b["ids"].shape for b in out] == [(4, 32), (4, 32)] and all(b["mask"].shape == (4, 32) for b in out)
    first = out[0]
    assert first["ids"][0, :16].tolist() == list(range(1, 17)) and not first["ids"][0, 16:].any()  # padded
    assert first["mask"][0].sum() == 16  # padding is masked out
    assert first["ids"][1].tolist() == list(range(1, 33))  # truncated to 32
    assert (first["ids"][2:] == 7).all() and (out[1]["ids"][0] == 7).all()
    assert out[1]["ids"][1].tolist() == first["ids"][0].tolist()  # the last batch filled from the start
    assert calibration.opt_shapes({"ids": [[1, 1], [16, 32], [32, 256]]}) == {"ids": [16, 32]}


def test_int8_build_calibrates_at_the_profile_opt_shape(encoder, tmp_path, monkeypatch):
    spec = with_tensorrt(encoder, **{**encoder.hotpath.tensorrt, "precision": "int8"})
    recipe = recipe_for(spec)
    jobs = []
    monkeypatch.setattr(builder, "build", lambda job: jobs.append(job) or job.plan.write_bytes(b"plan") or 1.0)
    monkeypatch.setattr(builder, "record", lambda *a, **k: None)
    monkeypatch.setattr(parity, "trt_runner", lambda plan, name: None)
    monkeypatch.setattr(parity, "compare", lambda *a, **k: parity.Parity(True, 0.0, 0.05, 0.0, 1))
    step = PlanStep(Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0.18"))
    assert step._build_plan(spec, recipe, tmp_path) == "built"
    (job,) = jobs
    opt = {name: opt for name, (_, opt, _) in recipe.profiles[0].items()}
    assert opt["input_ids"] == [16, 32]
    batches = list(job.calibration)
    assert batches and all({n: list(a.shape) for n, a in b.items()} == opt for b in batches)
    rows = sum(f["input_ids"].shape[0] for f in parity_feeds(spec))
    assert len(batches) == -(-rows // 16)  # every payload row calibrates, in full batches


def test_parity_inputs_written_for_the_container_are_the_build_s(encoder, tmp_path):
    (tmp_path / "text_encoder").mkdir()
    write_plan_files(encoder, tmp_path / "text_encoder")
    written, expected = read_feeds(tmp_path / "text_encoder"), parity_feeds(encoder)
    assert len(written) == len(expected) > 1
    for got, want in zip(written, expected):
        assert set(got) == set(want) and all(np.array_equal(got[n], want[n]) and got[n].dtype == want[n].dtype
                                             for n in want)


def test_nothing_here_references_onnxruntime_extensions():
    """The in-graph tokenizer and onnxruntime-extensions are gone; the TensorRT path never needs them."""
    files = list((paths.ROOT / "hotpath" / "tensorrt").rglob("*.py"))
    files += [paths.ROOT / p for p in ("scripts/gpu_check.py", "tests/planrepo.py", "build/text_encoder.toml",
                                       "docker/requirements-rebuild.txt")]
    files += list((paths.model_repository() / "text_encoder" / "configs").iterdir())
    hits = [f for f in files if any(w in f.read_text().lower() for w in ("onnxruntime_extensions",
                                                                         "onnxruntime-extensions", "ortextensions"))]
    assert len(files) > 20 and hits == []
