"""The GPU and TensorRT version of this host.

GPU: `nvidia-smi --query-gpu=name,compute_cap` (first GPU). TensorRT: the `tensorrt` Python module,
else the version functions libnvinfer exports (`getInferLibMajorVersion` ...), so the container's
checker needs no TensorRT Python package. HOTPATH_GPU_NAME, HOTPATH_COMPUTE_CAPABILITY and
HOTPATH_TENSORRT_VERSION override what is found (checks for another host, tests).
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys

from hotpath.tensorrt.compat import Target

LIBNVINFER = ("libnvinfer.so.10", "libnvinfer.so.11", "libnvinfer.so")


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
    return Target(gpu_name=os.environ.get("HOTPATH_GPU_NAME", name),
                  compute_capability=os.environ.get("HOTPATH_COMPUTE_CAPABILITY", cc),
                  tensorrt_version=os.environ.get("HOTPATH_TENSORRT_VERSION") or tensorrt_version())


def main(argv: list[str] | None = None) -> int:
    """`python -m hotpath.tensorrt.device [--tensorrt-version]`: what this host offers, as JSON."""
    args = sys.argv[1:] if argv is None else argv
    target = detect()
    if "--tensorrt-version" in args:
        print(target.tensorrt_version)
        return 0 if target.tensorrt_version else 1
    print(json.dumps(target.__dict__))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
