"""ONNX -> TensorRT plan through polygraphy's loaders: the only code here that needs TensorRT.

Everything up to the builder call (profiles, precision, compatibility flags, timing cache) is set
up without TensorRT; polygraphy imports it lazily when the loader runs, so `plan_loader` can be
built and inspected anywhere and `build` fails with one clear line where TensorRT is missing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from hotpath.tensorrt.recipe import Recipe

Log = Callable[[str], None]


@dataclass
class BuildJob:
    """One plan to build: the ONNX input, the plan path, the recipe, and the caches beside it."""

    onnx: Path
    plan: Path
    recipe: Recipe
    timing_cache: Path
    calibration: Iterable[dict] | None = None  # int8: feed dicts, all at the profile's opt shape
    calibration_cache: Path | None = None


def unavailable() -> str:
    """Why plans cannot be built here ('' when TensorRT imports)."""
    try:
        import tensorrt  # noqa: F401
    except ImportError as exc:
        return f"no TensorRT ({exc})"
    return ""


def profiles(recipe: Recipe) -> list:
    """The recipe's optimization profiles as polygraphy Profiles (min, opt, max per input)."""
    from polygraphy.backend.trt import Profile

    out = []
    for spec in recipe.profiles:
        profile = Profile()
        for name, (lo, opt, hi) in spec.items():
            profile.add(name, min=tuple(lo), opt=tuple(opt), max=tuple(hi))
        out.append(profile)
    return out


def create_config(job: BuildJob):
    """polygraphy CreateConfig for the job; TensorRT is needed here only for non-default enums/int8."""
    from polygraphy import mod
    from polygraphy.backend.trt import Calibrator, CreateConfig

    recipe = job.recipe
    trt = mod.lazy_import("tensorrt>=8.5")
    level = None
    if recipe.hardware_compatibility != "NONE":
        level = getattr(trt.HardwareCompatibilityLevel, recipe.hardware_compatibility)
    calibrator = None
    if recipe.precision == "int8":
        # Implicit (calibrated) INT8; TensorRT 10 still supports it though it prefers explicit Q/DQ.
        calibrator = Calibrator(list(job.calibration or []),
                                cache=str(job.calibration_cache) if job.calibration_cache else None)
    return CreateConfig(
        fp16=recipe.precision in ("fp16", "int8"),  # int8 keeps fp16 for layers that do not quantize
        int8=recipe.precision == "int8",
        calibrator=calibrator,
        profiles=profiles(recipe),
        load_timing_cache=str(job.timing_cache),
        hardware_compatibility_level=level,
        version_compatible=recipe.version_compatible or None,
    )


def plan_loader(job: BuildJob):
    """The polygraphy loader that, when called, parses the ONNX file and returns the serialized plan."""
    from polygraphy.backend.trt import EngineBytesFromNetwork, NetworkFromOnnxPath

    return EngineBytesFromNetwork(NetworkFromOnnxPath(str(job.onnx)), config=create_config(job),
                                  save_timing_cache=str(job.timing_cache))


def build(job: BuildJob, log: Log = logging.getLogger(__name__).info) -> float:
    """Build and write the plan; returns the build time in seconds."""
    recipe = job.recipe
    log(f"  TensorRT: building {job.plan.name} ({recipe.precision}, {len(recipe.profiles)} profile(s), "
        f"hardware {recipe.hardware_compatibility}, version-compatible {recipe.version_compatible}); "
        f"timing cache {job.timing_cache}")
    t0 = time.perf_counter()
    job.timing_cache.parent.mkdir(parents=True, exist_ok=True)
    data = plan_loader(job)()
    job.plan.parent.mkdir(parents=True, exist_ok=True)
    job.plan.write_bytes(bytes(data))
    seconds = time.perf_counter() - t0
    log(f"  TensorRT: wrote {job.plan.name} ({len(data) / 2**20:.1f} MiB) in {seconds:.0f}s")
    return seconds


def record(job: BuildJob, target, seconds: float, parity: dict | None = None):
    """Write the manifest of a freshly built plan beside it; returns the Manifest."""
    import datetime

    from hotpath.tensorrt.manifest import Manifest, recipe_digest, sha256, write_manifest

    recipe = job.recipe
    manifest = Manifest(
        model=recipe.model, plan=job.plan.name, plan_sha256=sha256(job.plan), onnx_sha256=sha256(job.onnx),
        gpu_name=target.gpu_name, compute_capability=target.compute_capability,
        tensorrt_version=target.tensorrt_version, precision=recipe.precision, profiles=recipe.profiles,
        hardware_compatibility=recipe.hardware_compatibility, version_compatible=recipe.version_compatible,
        recipe_digest=recipe_digest(recipe.digest_fields()), parity=parity or {},
        build_seconds=round(seconds, 1),
        built_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    write_manifest(manifest, job.plan.parent)
    return manifest
