"""The container's start-up checker: per model, a fitting plan, a rebuild, the ONNX fallback or a clear failure."""

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.tensorrt.compat import Target
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
    assert (result.repository / "scaler").resolve() == (tmp_path / "models" / "scaler").resolve()
    assert any("serving its ONNX fallback" in m for m in messages)


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
