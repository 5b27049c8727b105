"""The plan compatibility matrix, manifests on disk, and what this host reports (no TensorRT here)."""

import dataclasses
import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from hotpath.tensorrt import device
from hotpath.tensorrt.compat import Target, judge, same_version, version_tuple
from hotpath.tensorrt.manifest import Manifest, manifest_path, manifests_in, read_manifest, write_manifest
from hotpath.tensorrt.recipe import plan_filename

H100 = Manifest(model="m", plan="model.sm90.plan", plan_sha256="p", onnx_sha256="o",
                gpu_name="NVIDIA H100 80GB HBM3", compute_capability="9.0", tensorrt_version="10.5.0.18",
                precision="fp16")


def built(**changes) -> Manifest:
    return dataclasses.replace(H100, **changes)


@pytest.mark.parametrize("manifest, target, ok, words", [
    # same GPU, same TensorRT: the build number counts when both sides know it
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0.18"), True, "same TensorRT"),
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0"), True, "same TensorRT"),
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0.26"), False, "build number included"),
    (built(tensorrt_version="10.5.0"), Target("NVIDIA H100 80GB HBM3", "9.0", "10.5.0.26"), True, "same TensorRT"),
    # another GPU model of the same architecture: loads, with a note
    (built(), Target("NVIDIA H200", "9.0", "10.5.0"), True, "same compute capability"),
    # another architecture
    (built(), Target("NVIDIA A100-SXM4-80GB", "8.0", "10.5.0"), False, "compute capability 9.0"),
    (built(), Target("NVIDIA L4", "8.9", "10.5.0"), False, "this GPU is 8.9"),
    # another TensorRT, newer or older
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", "10.6.0"), False, "tied to their TensorRT version"),
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", "10.4.1"), False, "tied to their TensorRT version"),
    # version-compatible plans: later versions of the same major, and 10 -> 11, never older or 10 -> 12
    (built(version_compatible=True), Target("H100", "9.0", "10.8.0"), True, "version-compatible"),
    (built(version_compatible=True), Target("H100", "9.0", "10.5.0.26"), True, "version-compatible"),
    (built(version_compatible=True), Target("H100", "9.0", "10.5.0.9"), False, "older"),
    (built(version_compatible=True), Target("H100", "9.0", "11.0.0"), True, "version-compatible"),
    (built(version_compatible=True), Target("H100", "9.0", "10.4.0"), False, "older"),
    (built(version_compatible=True), Target("H100", "9.0", "12.0.0"), False, "do not cross"),
    (built(version_compatible=True, tensorrt_version="8.5.3"), Target("H100", "9.0", "8.6.1"), False, "8.6"),
    # hardware-compatible plans: any GPU of compute capability >= 8.0
    (built(hardware_compatibility="AMPERE_PLUS"), Target("NVIDIA A10", "8.6", "10.5.0"), True, "Ampere"),
    (built(hardware_compatibility="AMPERE_PLUS"), Target("Tesla T4", "7.5", "10.5.0"), False, ">= 8.0"),
    (built(hardware_compatibility="SAME_COMPUTE_CAPABILITY"), Target("NVIDIA H20", "9.0", "10.5.0"), True, "same"),
    # no GPU, or TensorRT unknown
    (built(), Target("", "", "10.5.0"), False, "no GPU"),
    (built(), Target("NVIDIA H100 80GB HBM3", "9.0", ""), False, "TensorRT version unknown"),
])
def test_compatibility_matrix(manifest, target, ok, words):
    verdict = judge(manifest, target)
    assert verdict.ok is ok, verdict
    assert words in verdict.reason


def test_other_gpu_model_of_same_architecture_is_noted():
    verdict = judge(built(), Target("NVIDIA H200", "9.0", "10.5.0"))
    assert verdict.ok and "NVIDIA H100" in verdict.note


def test_version_tuple_keeps_the_build_number_and_drops_suffixes():
    assert version_tuple("10.5.0.18") == (10, 5, 0, 18)
    assert version_tuple("10.14.1.48.post1") == (10, 14, 1, 48)
    assert version_tuple("10.7.0.post1") == (10, 7, 0)
    assert version_tuple("10.6") == (10, 6, 0)
    assert version_tuple("10.0.1b3") == (10, 0, 1)
    assert same_version("10.5.0.18", "10.5.0") and not same_version("10.5.0.18", "10.5.0.26")
    assert same_version("10.7.0.post1", "10.7.0") and not same_version("10.8.0.43", "10.9.0.34")


# tensorrt-cu12 on PyPI (pip index versions, 2026): no build number before 10.8, then always one.
PYPI = ["10.0.1", "10.1.0", "10.2.0", "10.2.0.post1", "10.3.0", "10.4.0", "10.5.0", "10.6.0", "10.6.0.post1",
        "10.6.0.post2", "10.7.0", "10.7.0.post1", "10.8.0.43", "10.9.0.34", "10.10.0.31", "10.11.0.33",
        "10.12.0.36", "10.13.0.35", "10.13.2.6", "10.13.3.9", "10.13.3.9.post1", "10.14.1.48", "11.0.0.114"]


@pytest.mark.parametrize("runtime, requirement, installs", [
    ("10.8.0.43", "tensorrt-cu12==10.8.0.43", "10.8.0.43"),    # the build number is on PyPI from 10.8
    ("10.13.3.9", "tensorrt-cu12==10.13.3.9", "10.13.3.9"),
    ("10.5.0.18", "tensorrt-cu12==10.5.0.*", "10.5.0"),        # NGC 24.10's libnvinfer; PyPI has 10.5.0
    ("10.7.0", "tensorrt-cu12==10.7.0.*", "10.7.0.post1"),
    ("10.9.0", "tensorrt-cu12==10.9.0.*", "10.9.0.34"),        # build number unknown
])
def test_pip_requirement_matches_a_wheel_of_the_same_runtime(runtime, requirement, installs):
    assert device.pip_requirement(runtime) == requirement
    spec = SpecifierSet(requirement.removeprefix("tensorrt-cu12"))
    matching = [v for v in PYPI if Version(v) in spec]
    assert matching and max(matching, key=Version) == installs  # what pip would pick
    assert all(same_version(v, runtime) for v in matching)
    # The old pin, major.minor.patch exactly, finds nothing from 10.8 on.
    old = SpecifierSet("==" + ".".join(runtime.split(".")[:3]))
    assert bool([v for v in PYPI if Version(v) in old]) == (version_tuple(runtime)[:2] < (10, 8))


def test_pip_requirement_cli(monkeypatch, capsys):
    monkeypatch.setenv("HOTPATH_TENSORRT_VERSION", "10.8.0.43")
    assert device.main(["--pip-requirement"]) == 0
    assert capsys.readouterr().out.strip() == "tensorrt-cu12==10.8.0.43"
    monkeypatch.setenv("HOTPATH_TENSORRT_VERSION", "")
    monkeypatch.setattr(device, "tensorrt_version", lambda: "")
    assert device.main(["--pip-requirement"]) == 1
    assert "no TensorRT version" in capsys.readouterr().err


def test_libnvinfer_version_includes_the_build_number(monkeypatch):
    class Lib:
        getInferLibMajorVersion = staticmethod(lambda: 10)
        getInferLibMinorVersion = staticmethod(lambda: 5)
        getInferLibPatchVersion = staticmethod(lambda: 0)
        getInferLibBuildVersion = staticmethod(lambda: 18)

    monkeypatch.setattr(device.ctypes, "CDLL", lambda name: Lib())
    assert device._libnvinfer_version() == "10.5.0.18"
    del Lib.getInferLibBuildVersion
    assert device._libnvinfer_version() == "10.5.0"


def test_device_detection_needs_no_tritonclient():
    # scripts/gpu_check.py and the container's checker run it where tritonclient is absent.
    probe = ("import sys; sys.modules['tritonclient'] = None; sys.modules['tensorrt'] = None\n"
             "from hotpath.tensorrt import compat, device, inventory, recipe\n"
             "print(device.pip_requirement('10.8.0.43'), device.detect().compute_capability or '-')")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                         env={"PATH": "/nonexistent", "PYTHONPATH": str(device.__file__).rsplit("/hotpath/", 1)[0]})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["tensorrt-cu12==10.8.0.43", "-"]


def test_manifest_round_trip_and_listing(tmp_path):
    manifest = built(profiles=[{"x": [[1, 16], [8, 32], [32, 256]]}], parity={"ok": True, "max_abs_diff": 1e-3})
    path = write_manifest(manifest, tmp_path)
    assert path == manifest_path(tmp_path / "model.sm90.plan")
    assert path.name == "model.sm90.plan.manifest.json"
    assert read_manifest(path) == manifest
    write_manifest(built(plan="model.sm80.plan", compute_capability="8.0"), tmp_path)
    assert [m.plan for m in manifests_in(tmp_path)] == ["model.sm80.plan", "model.sm90.plan"]
    assert manifests_in(tmp_path / "absent") == []


def test_plan_filenames_follow_compute_capability():
    assert plan_filename("9.0") == "model.sm90.plan"
    assert plan_filename("8.6") == "model.sm86.plan"
    assert plan_filename("12.0") == "model.sm120.plan"


def test_device_overrides_and_absence(monkeypatch):
    monkeypatch.setenv("HOTPATH_GPU_NAME", "NVIDIA L4")
    monkeypatch.setenv("HOTPATH_COMPUTE_CAPABILITY", "8.9")
    monkeypatch.setenv("HOTPATH_TENSORRT_VERSION", "10.5.0")
    assert device.detect() == Target("NVIDIA L4", "8.9", "10.5.0")
    for name in ("HOTPATH_GPU_NAME", "HOTPATH_COMPUTE_CAPABILITY", "HOTPATH_TENSORRT_VERSION"):
        monkeypatch.delenv(name)
    # This machine has neither nvidia-smi nor TensorRT (Python module or libnvinfer).
    monkeypatch.setenv("PATH", "/nonexistent")
    assert device.detect() == Target("", "", "")






