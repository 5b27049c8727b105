"""A small model repository with a TensorRT model, for the start-up checker and entrypoint tests.

`scaler` (Y = 2 * X) has a TensorRT config, recipe and parity inputs, a real ONNX file, and one plan
with its manifest, built (the bytes stand in for an engine) for an H100 with TensorRT 10.5.0. Its
config.pbtxt, the fallback, runs a Python model, so the local tritonserver can serve it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from google.protobuf import text_format
from onnx import TensorProto, helper
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.manifest import Manifest, recipe_digest, sha256, write_manifest
from hotpath.tensorrt.recipe import Recipe, config_path, feeds_path, feeds_to_json, recipe_path

H100 = Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0")
MODEL_PY = '''import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor(
            "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() * 2)]) for r in requests]
'''


def scaler_onnx(path: Path, factor: float = 2.0) -> Path:
    """Y = X * factor, batch and width dynamic."""
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])
    y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])
    k = helper.make_tensor("k", TensorProto.FLOAT, [], [factor])
    graph = helper.make_graph([helper.make_node("Mul", ["X", "k"], ["Y"])], "scaler", [x], [y], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def _config(name: str, **fields) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, max_batch_size=8, **fields)
    config.input.add(name="X", data_type=mc.TYPE_FP32, dims=[4])
    config.output.add(name="Y", data_type=mc.TYPE_FP32, dims=[4])
    config.instance_group.add(count=1, kind=mc.ModelInstanceGroup.KIND_CPU)
    return config


def _write(path: Path, config: mc.ModelConfig) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text_format.MessageToString(config))


def recipe(onnx_fallback: bool = True, version_compatible: bool = False) -> Recipe:
    return Recipe(model="scaler", onnx="model.trt.onnx", precision="fp16",
                  profiles=[{"X": [[1, 4], [4, 4], [8, 4]]}], compute_capabilities=["9.0"],
                  onnx_fallback=onnx_fallback, version_compatible=version_compatible)


def feeds() -> list[dict[str, np.ndarray]]:
    """The scaler's parity inputs: batches of 1, 4 and 8 (its profile's min, opt and max)."""
    return [{"X": np.random.default_rng(b).standard_normal((b, 4)).astype(np.float32)} for b in (1, 4, 8)]


def make_repository(root: Path, onnx_fallback: bool = True, built_for: Target = H100,
                    version_compatible: bool = False) -> Path:
    """The repository under `root`; returns its path."""
    repo = root / "models"
    echo = repo / "echo"
    _write(echo / "config.pbtxt", _config("echo", backend="python"))
    (echo / "1").mkdir()
    (echo / "1" / "model.py").write_text(MODEL_PY)

    scaler = repo / "scaler"
    _write(scaler / "config.pbtxt", _config("scaler", backend="python"))
    plan_cfg = _config("scaler", platform="tensorrt_plan", default_model_filename="model.plan")
    plan_cfg.instance_group[0].kind = mc.ModelInstanceGroup.KIND_GPU
    plan_cfg.cc_model_filenames["9.0"] = "model.sm90.plan"
    _write(config_path(scaler), plan_cfg)
    rec = recipe(onnx_fallback, version_compatible)
    recipe_path(scaler).write_text(rec.to_json())
    feeds_path(scaler).write_text(feeds_to_json(feeds()))
    version = scaler / "1"
    version.mkdir()
    (version / "model.py").write_text(MODEL_PY)
    scaler_onnx(version / "model.trt.onnx")
    plan = version / "model.sm90.plan"
    plan.write_bytes(np.arange(64, dtype=np.uint8).tobytes())
    write_manifest(Manifest(
        model="scaler", plan=plan.name, plan_sha256=sha256(plan), onnx_sha256=sha256(version / rec.onnx),
        gpu_name=built_for.gpu_name, compute_capability=built_for.compute_capability,
        tensorrt_version=built_for.tensorrt_version, precision=rec.precision, profiles=rec.profiles,
        version_compatible=version_compatible, recipe_digest=recipe_digest(rec.digest_fields())), version)
    return repo
