"""Can this plan run here? The compatibility matrix of a manifest against a GPU and a TensorRT version.

Rules, as TensorRT 10 documents them:
- Hardware: a plan runs only on the compute capability it was built on ("plan generated on an
  incompatible device"); another GPU model of the same compute capability loads with a warning.
  `SAME_COMPUTE_CAPABILITY` makes that explicit; `AMPERE_PLUS` runs on any GPU of compute
  capability 8.0 or later.
- Version: a plan runs only with the TensorRT version that built it, build number included
  ("Version tag does not match"): 10.5.0.18 and 10.5.0.26 are different runtimes. When one side
  knows only major.minor.patch (a `tensorrt` wheel older than 10.8 reports no build number), the
  three parts are compared. A version-compatible plan (built with 8.6 or later) also runs with later
  versions of the same major version, and across the major versions TensorRT names: 8 -> 9, 8 -> 10,
  10 -> 11.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hotpath.tensorrt.manifest import Manifest

CROSS_MAJOR = {(8, 9), (8, 10), (10, 11)}


@dataclass(frozen=True)
class Target:
    """Where a plan would run. Empty fields are unknown (no GPU, no TensorRT)."""

    gpu_name: str = ""
    compute_capability: str = ""
    tensorrt_version: str = ""

    def describe(self) -> str:
        gpu = f"{self.gpu_name or 'GPU ?'} (cc {self.compute_capability or '?'})"
        return f"{gpu}, TensorRT {self.tensorrt_version or '?'}"


@dataclass(frozen=True)
class Verdict:
    ok: bool
    reason: str
    note: str = ""


def version_tuple(version: str) -> tuple[int, ...]:
    """'10.5.0.18' -> (10, 5, 0, 18); '10.6' -> (10, 6, 0); suffixes ('b3', '.post1') dropped.

    At least three parts; the fourth, TensorRT's build number, only when the version has one.
    """
    parts = []
    for piece in str(version).split(".")[:4]:
        digits = re.match(r"\d*", piece).group()
        if not digits:  # 'post1', 'dev0': not part of the release number
            break
        parts.append(int(digits))
        if digits != piece:  # '1b3': a pre-release of 1; nothing after it is a release number
            break
    return tuple(parts + [0] * (3 - len(parts)))


def comparable(a: str, b: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Both versions as tuples of equal length: four parts when both carry a build number, else three."""
    ta, tb = version_tuple(a), version_tuple(b)
    n = min(len(ta), len(tb))
    return ta[:n], tb[:n]


def same_version(a: str, b: str) -> bool:
    """Whether two TensorRT versions are the same runtime (build numbers compared when both have one)."""
    ta, tb = comparable(a, b)
    return ta == tb


def cc_tuple(cc: str) -> tuple[int, int]:
    major, _, minor = str(cc).partition(".")
    return int(major), int(minor or 0)


def hardware_verdict(manifest: Manifest, target: Target) -> Verdict:
    if not target.compute_capability:
        return Verdict(False, "no GPU found")
    built, here = cc_tuple(manifest.compute_capability), cc_tuple(target.compute_capability)
    level = manifest.hardware_compatibility.upper()
    if level == "AMPERE_PLUS":
        if here >= (8, 0):
            return Verdict(True, "hardware-compatible plan (Ampere and later)")
        return Verdict(False, f"hardware-compatible plans need compute capability >= 8.0, this GPU has "
                              f"{target.compute_capability}")
    if built != here:
        return Verdict(False, f"built for compute capability {manifest.compute_capability} "
                              f"({manifest.gpu_name}), this GPU is {target.compute_capability}")
    note = ""
    if level == "NONE" and target.gpu_name and manifest.gpu_name and target.gpu_name != manifest.gpu_name:
        note = f"built on {manifest.gpu_name}; same compute capability, TensorRT warns across GPU models"
    return Verdict(True, "same compute capability", note)


def version_verdict(manifest: Manifest, target: Target) -> Verdict:
    if not target.tensorrt_version:
        return Verdict(False, "TensorRT version unknown")
    built, here = comparable(manifest.tensorrt_version, target.tensorrt_version)
    if built == here:
        return Verdict(True, "same TensorRT version")
    if not manifest.version_compatible:
        return Verdict(False, f"built with TensorRT {manifest.tensorrt_version}, runtime is "
                              f"{target.tensorrt_version} (plans are tied to their TensorRT version, build number "
                              f"included)")
    if built < (8, 6, 0):
        return Verdict(False, "version compatibility needs plans built with TensorRT 8.6 or later")
    if here < built:
        return Verdict(False, f"version-compatible plan from TensorRT {manifest.tensorrt_version} "
                              f"cannot run on the older {target.tensorrt_version}")
    if built[0] == here[0] or (built[0], here[0]) in CROSS_MAJOR:
        return Verdict(True, f"version-compatible plan ({manifest.tensorrt_version} -> {target.tensorrt_version})")
    return Verdict(False, f"version-compatible plans do not cross TensorRT {built[0]} -> {here[0]}")


def judge(manifest: Manifest, target: Target) -> Verdict:
    """Whether the plan of `manifest` can be deserialized on `target`; the reason either way."""
    hw, ver = hardware_verdict(manifest, target), version_verdict(manifest, target)
    if not hw.ok:
        return hw
    if not ver.ok:
        return ver
    return Verdict(True, f"{hw.reason}; {ver.reason}", hw.note)
