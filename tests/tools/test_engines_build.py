"""`hotpath engines` run for real on a host without TensorRT: it says so in one line and builds the ONNX model
into model_repository/ (a build step: minutes on a fresh clone, an incremental no-op after `make engines`)."""

import json
import subprocess
import sys

from hotpath import paths


def _hotpath(*args):
    return subprocess.run([sys.executable, "-m", "hotpath", *args], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_engines_without_tensorrt_says_so_in_one_line_and_builds_onnx():
    run = _hotpath("engines", "--model", "text_encoder")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "TensorRT" in line]
    assert len(lines) == 1 and lines[0].startswith("[engines] TensorRT plans skipped: no TensorRT")
    assert (paths.model_repository() / "text_encoder" / "1" / "model.onnx").is_file()
    assert json.loads((paths.model_repository() / "text_encoder" / "configs" / "tensorrt.build.json").read_text())
