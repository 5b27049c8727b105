"""The container's start-up checker: per model, a fitting plan, a rebuild, the ONNX fallback or a clear failure."""

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.tensorrt import builder, parity
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.manifest import read_manifest
from hotpath.tensorrt.recipe import feeds_path
from hotpath.tensorrt.startup import main, prepare
from tests import planrepo

A100 = Target("NVIDIA A100-SXM4-80GB", "8.0", "10.5.0")


def run(tmp_path, target, mode="rebuild", **repo):
    messages = []
    result = prepare(planrepo.make_repository(tmp_path, **repo), tmp_path / "cache", target, mode, messages.append)
    return result, messages


def test_matching_gpu_serves_the_plan_by_name(tmp_path):
    result, _ = run(tmp_path, planrepo.H100)
    assert not result.problems and result.decisions == {"scaler": "tensorrt model.sm90.plan"}
    served = result.repository / "scaler"
    config = text_format.Parse((served / "config.pbtxt").read_text(), mc.ModelConfig())
    assert config.platform == "tensorrt_plan" and not config.cc_model_filenames
    assert config.default_model_filename == "model.sm90.plan"
    plan = served / "1" / "model.sm90.plan"
    assert plan.resolve() == (tmp_path / "models" / "scaler" / "1" / "model.sm90.plan").resolve()
    assert (result.repository / "echo").resolve() == (tmp_path / "models" / "echo").resolve()
    assert result.args == [f"--model-repository={result.repository}"]


def test_version_compatible_plans_turn_on_the_backend_setting(tmp_path):
    result, _ = run(tmp_path, Target("NVIDIA H100 80GB HBM3", "9.0", "10.8.0"), version_compatible=True)
    assert result.decisions["scaler"].startswith("tensorrt")
    assert "--backend-config=tensorrt,version-compatible=true" in result.args


def test_incompatible_plan_fails_fast_with_the_reason(tmp_path):
    result, _ = run(tmp_path, A100, mode="fail", onnx_fallback=False)
    (problem,) = result.problems
    assert "scaler/1 model.sm90.plan: incompatible" in problem and "this GPU is 8.0" in problem


def test_rebuild_without_tensorrt_says_why(tmp_path):
    result, _ = run(tmp_path, Target("NVIDIA H100 80GB HBM3", "9.0", "10.6.0"), onnx_fallback=False)
    (problem,) = result.problems
    assert "tied to their TensorRT version" in problem and "cannot rebuild: no TensorRT" in problem


def test_onnx_fallback_where_the_spec_keeps_one(tmp_path):
    result, messages = run(tmp_path, A100, mode="fail")
    assert not result.problems and result.decisions["scaler"].startswith("onnx fallback")
    served, source = result.repository / "scaler", tmp_path / "models" / "scaler"
    assert (served / "config.pbtxt").resolve() == (source / "config.pbtxt").resolve()
    assert (served / "1").resolve() == (source / "1").resolve()
    # Without configs/: `--model-config-name=tensorrt` must not pick up a config naming absent plans.
    assert (source / "configs" / "tensorrt.pbtxt").is_file() and not (served / "configs").exists()
    assert any("serving its ONNX fallback" in m for m in messages)


def test_served_plan_model_names_only_the_plan_it_links(tmp_path):
    result, _ = run(tmp_path, planrepo.H100)
    served = result.repository / "scaler"
    config = text_format.Parse((served / "config.pbtxt").read_text(), mc.ModelConfig())
    named = [config.default_model_filename, *config.cc_model_filenames.values()]
    assert named == ["model.sm90.plan"] and (served / "1" / "model.sm90.plan").is_file()
    assert not (served / "configs").exists()


@pytest.fixture
def fake_rebuild(monkeypatch):
    """TensorRT faked at its boundary: the build writes bytes, and the 'TensorRT' runner the parity
    check activates is ONNX Runtime on a scaler with the factor the test chooses (2: the same model)."""
    built = []

    def build(job, log):
        job.plan.parent.mkdir(parents=True, exist_ok=True)
        job.plan.write_bytes(b"engine for " + job.plan.name.encode())
        built.append(job)
        return 1.5

    def use(factor: float, tmp_path):
        candidate = planrepo.scaler_onnx(tmp_path / f"candidate-{factor}.onnx", factor=factor)
        monkeypatch.setattr(parity, "trt_runner", lambda plan, name: parity.onnxrt_runner(candidate, name))
        return built

    monkeypatch.setattr(builder, "unavailable", lambda: "")
    monkeypatch.setattr(builder, "build", build)
    return use


def test_rebuilt_plan_is_checked_against_onnx_runtime_before_it_is_served(tmp_path, fake_rebuild):
    built = fake_rebuild(2.0, tmp_path)
    result, messages = run(tmp_path, A100)
    assert not result.problems and result.decisions == {"scaler": "tensorrt model.sm80.plan"}
    (job,) = built
    manifest = read_manifest(job.plan.with_name(job.plan.name + ".manifest.json"))
    assert manifest.parity["ok"] is True and manifest.parity["max_abs_diff"] == 0.0
    assert manifest.parity["iterations"] == len(planrepo.feeds()) and manifest.parity["where"] == "container start"
    assert "checked" not in manifest.parity
    assert any("parity of the rebuilt model.sm80.plan vs ONNX Runtime" in m for m in messages)


def test_rebuilt_plan_outside_tolerance_serves_the_onnx_fallback(tmp_path, fake_rebuild):
    built = fake_rebuild(2.5, tmp_path)
    repo, messages = planrepo.make_repository(tmp_path), []
    result = prepare(repo, tmp_path / "cache", A100, "rebuild", messages.append)
    assert not result.problems
    decision = result.decisions["scaler"]
    assert decision.startswith("onnx fallback") and "model.sm80.plan differs from ONNX Runtime" in decision
    (job,) = built
    assert not job.plan.exists() and not list(job.plan.parent.glob("*.manifest.json"))
    assert any("serving its ONNX fallback" in m and "differs" in m for m in messages)
    # The next start on the same cache rebuilds again instead of serving what failed the check.
    result = prepare(repo, tmp_path / "cache", A100, "rebuild", messages.append)
    assert result.decisions["scaler"].startswith("onnx fallback") and len(built) == 2


def test_rebuilt_plan_outside_tolerance_fails_the_start_without_a_fallback(tmp_path, fake_rebuild):
    fake_rebuild(2.5, tmp_path)
    result, _ = run(tmp_path, A100, onnx_fallback=False)
    (problem,) = result.problems
    assert problem.startswith("scaler/1") and "differs from ONNX Runtime" in problem and "plan removed" in problem
    assert "scaler" not in result.decisions


def test_rebuilt_plan_without_parity_inputs_is_not_served(tmp_path, fake_rebuild):
    fake_rebuild(2.0, tmp_path)
    repo = planrepo.make_repository(tmp_path, onnx_fallback=False)
    feeds_path(repo / "scaler").unlink()
    result = prepare(repo, tmp_path / "cache", A100, "rebuild", lambda m: None)
    (problem,) = result.problems
    assert "scaler/1" in problem and "no parity inputs (configs/tensorrt.feeds.json" in problem


def test_no_gpu(tmp_path):
    result, _ = run(tmp_path, Target())
    assert result.decisions == {"scaler": "onnx fallback (no GPU)"}
    result, _ = run(tmp_path / "strict", Target(), onnx_fallback=False)
    assert result.problems == ["scaler: needs a GPU (TensorRT plans only; its spec keeps no ONNX fallback)"]


def test_main_writes_server_arguments_or_exits_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", "/nonexistent")  # no nvidia-smi: no GPU
    repo = planrepo.make_repository(tmp_path)
    args_file = tmp_path / "args"
    assert main(["--repository", str(repo), "--cache", str(tmp_path / "cache"), "--args-file", str(args_file)]) == 0
    assert args_file.read_text().splitlines() == [f"--model-repository={(tmp_path / 'cache' / 'repository').resolve()}"]
    strict = planrepo.make_repository(tmp_path / "strict", onnx_fallback=False)
    assert main(["--repository", str(strict), "--cache", str(tmp_path / "c2"), "--args-file", str(tmp_path / "a2")]) == 2
    assert "error: scaler: needs a GPU" in capsys.readouterr().err
    assert not (tmp_path / "a2").exists()
