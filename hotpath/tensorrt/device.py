"""The GPU and TensorRT version of this host, and the pip requirement of TensorRT's bindings for it.

GPU: `nvidia-smi --query-gpu=name,compute_cap` (first GPU). TensorRT: the `tensorrt` Python module,
else the version functions libnvinfer exports (`getInferLibMajorVersion` ... `getInferLibBuildVersion`),
so the container's checker needs no TensorRT Python package. HOTPATH_GPU_NAME, HOTPATH_COMPUTE_CAPABILITY
and HOTPATH_TENSORRT_VERSION override what is found (checks for another host, tests).
Standard library only (no tritonclient, no TensorRT needed): the container and scripts/gpu_check.py
run it on hosts that have neither.
"""

from __future__ import annotations

import ctypes
import json
import shutil
import subprocess
import sys

from hotpath import settings
from hotpath.tensorrt.compat import Target, version_tuple

LIBNVINFER = ("libnvinfer.so.10", "libnvinfer.so.11", "libnvinfer.so")
# From TensorRT 10.8 on, PyPI's tensorrt wheels carry the build number (10.8.0.43); before, only
# major.minor.patch (10.5.0, 10.7.0.post1), whatever build the libraries report.
PIP_BUILD_NUMBER_FROM = (10, 8)


def gpu() -> tuple[str, str]:
    """(name, compute capability) of GPU 0, or ('', '') without a usable nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return "", ""
    try:
        out = subprocess.run([smi, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return "", ""
    first = out.strip().splitlines()[0] if out.strip() else ""
    name, _, cc = first.rpartition(",")
    return name.strip(), cc.strip()


def _libnvinfer_version() -> str:
    for name in LIBNVINFER:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            parts = [getattr(lib, f"getInferLib{p}Version")() for p in ("Major", "Minor", "Patch")]
        except AttributeError:  # older libraries: one number, (major*100 + minor)*100 + patch from 10 on
            v = lib.getInferLibVersion()
            parts = [v // 10000, (v // 100) % 100, v % 100] if v >= 10000 else [v // 1000, (v // 100) % 10, v % 100]
        else:
            # The build number is part of a plan's version tag: two builds of 10.5.0 are two runtimes.
            build = getattr(lib, "getInferLibBuildVersion", None)
            if build is not None:
                parts.append(build())
        return ".".join(str(p) for p in parts)
    return ""


def tensorrt_version() -> str:
    """The TensorRT version usable here, or '' when there is none."""
    try:
        import tensorrt

        return str(tensorrt.__version__)
    except ImportError:
        return _libnvinfer_version()


def detect() -> Target:
    """This host as a compatibility target, with the environment's overrides applied."""
    name, cc = gpu()
    return Target(gpu_name=settings.gpu_name() or name, compute_capability=settings.compute_capability() or cc,
                  tensorrt_version=settings.tensorrt_version() or tensorrt_version())


def pip_requirement(version: str, package: str = "tensorrt-cu12") -> str:
    """The pip requirement for TensorRT's Python bindings matching runtime `version`.

    '10.8.0.43' -> 'tensorrt-cu12==10.8.0.43'; '10.5.0.18' -> 'tensorrt-cu12==10.5.0.*' (PyPI has 10.5.0
    only); '10.8.0' (build unknown) -> 'tensorrt-cu12==10.8.0.*'. Raises ValueError without a version.
    """
    if not version:
        raise ValueError("no TensorRT version to match (no libnvinfer or tensorrt module found; "
                         "set HOTPATH_TENSORRT_VERSION)")
    parts = version_tuple(version)
    release = ".".join(str(p) for p in parts[:3])
    if len(parts) == 4 and parts[:2] >= PIP_BUILD_NUMBER_FROM:
        return f"{package}=={release}.{parts[3]}"
    # A prefix match also takes a post release (10.7.0.post1: repackaged, same libraries).
    return f"{package}=={release}.*"


def main(argv: list[str] | None = None) -> int:
    """`python -m hotpath.tensorrt.device [--tensorrt-version | --pip-requirement]`: this host, as JSON.

    --pip-requirement prints the pip requirement of the bindings that match this host's libnvinfer
    (the image's rebuild step installs it); both flags exit 1 when no TensorRT is found.
    """
    args = sys.argv[1:] if argv is None else argv
    target = detect()
    if "--tensorrt-version" in args:
        print(target.tensorrt_version)
        return 0 if target.tensorrt_version else 1
    if "--pip-requirement" in args:
        try:
            print(pip_requirement(target.tensorrt_version))
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        return 0
    print(json.dumps(target.__dict__))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
