"""`hotpath build` run for real on a host without TensorRT: it says so in one line and builds the ONNX model
into model_repository/ (a build step: minutes on a fresh clone, an incremental no-op after `make engines`);
`build --check` (here by its old spelling, `engines --check`) over the built version folders lists every
missing plan. text_generation's build gates the precision it is served with here (the real gate: measured once
by the session's build, cached after)."""

import json
import subprocess
import sys

from hotpath import paths
from hotpath.tensorrt.recipe import read_recipe


def _hotpath(*args):
    return subprocess.run([sys.executable, "-m", "hotpath", *args], capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})


def test_build_without_tensorrt_says_so_in_one_line_and_builds_onnx():
    run = _hotpath("build", "--model", "text_encoder")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "TensorRT" in line]
    assert len(lines) == 1 and lines[0].startswith("[build] TensorRT plans skipped: no TensorRT")
    assert (paths.model_repository() / "text_encoder" / "1" / "model.onnx").is_file()
    assert json.loads((paths.model_repository() / "text_encoder" / "configs" / "tensorrt.build.json").read_text())


def test_check_lists_every_missing_plan_and_fails(built_repository):
    run = _hotpath("build", "--check", "--model", "text_encoder", "--tensorrt", "10.5.0")
    assert run.returncode == 1, run.stdout + run.stderr
    recipe = read_recipe(built_repository / "text_encoder")
    for cc in recipe.compute_capabilities:
        assert f"text_encoder/1: missing: no plan built for GPU ? (cc {cc}), TensorRT 10.5.0" in run.stdout
    assert f"0 ok, {len(recipe.compute_capabilities)} missing" in run.stdout


def test_text_generation_build_gates_the_served_precision_in_one_line(built_repository):
    from hotpath.exporters.smollm2 import served_dtype
    from hotpath.specs.spec import load_spec

    run = _hotpath("build", "--model", "text_generation")
    assert run.returncode == 0, run.stdout + run.stderr
    lines = [line for line in run.stdout.splitlines() if "precision gate:" in line]
    dtype, why = served_dtype(load_spec(paths.model_specs_dir() / "text_generation.toml").parameters)
    assert len(lines) == 1 and lines[0].startswith(f"[build] text_generation: served as {dtype} ({why}); "), lines
    # The session's build measured it (or an earlier one did): this unchanged rebuild measures nothing.
    assert "vs llama.cpp Q4_1" in lines[0] and lines[0].endswith(": pass (cached)"), lines
