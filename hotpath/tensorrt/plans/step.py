"""The TensorRT part of `hotpath build`: plan config and recipe always; plans where TensorRT and a GPU are.

Per model with `[hotpath.tensorrt]`: write `configs/tensorrt.pbtxt` (naming the plans built),
`configs/tensorrt.build.json` and `configs/tensorrt.feeds.json` (the parity inputs, on which the
container also checks a plan it rebuilds), fold constants of the exported ONNX (checked against it
with polygraphy on ONNX Runtime), then, on a GPU host with TensorRT, build the plan for this GPU
(skipped while its manifest is fresh), compare it with ONNX Runtime and write its manifest. Without TensorRT or a GPU it says so once and goes on.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hotpath import paths
from hotpath.errors import BuildError
from hotpath.specs.config_pbtxt import HEADER, to_pbtxt
from hotpath.specs.spec import ModelSpec
from hotpath.tensorrt import builder, device, parity
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import built_plans, plan_status
from hotpath.tensorrt.plans import calibration
from hotpath.tensorrt.plans.options import recipe_for, tensorrt_options
from hotpath.tensorrt.plans.plan_config import plan_config
from hotpath.tensorrt.plans.sanitize import ensure_sanitized
from hotpath.tensorrt.recipe import (
    EXPORTED_ONNX,
    config_path,
    feeds_path,
    feeds_to_json,
    plan_filename,
    recipe_path,
)

log = logging.getLogger(__name__)


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def parity_feeds(spec: ModelSpec) -> list:
    """The batches parity is checked on: the perf payload, same-shaped entries batched by up to 8."""
    batch = spec.config.max_batch_size or 1
    return calibration.batched(calibration.payload_feeds(spec), min(batch, 8))


def write_plan_files(spec: ModelSpec, model_dir: Path, built: list | None = None) -> bool:
    """configs/tensorrt.pbtxt (round-tripped through model_config_pb2), the recipe and the parity inputs;
    True when written. The config names the plans `built` (default: those fresh in `model_dir`)."""
    recipe = recipe_for(spec)
    if recipe is None:
        return False
    built = built_plans(model_dir, recipe) if built is None else built
    source = spec.source.relative_to(spec.source.parent.parent) if spec.source else "<memory>"
    text = HEADER.format(source=source) + to_pbtxt(plan_config(spec, recipe, tensorrt_options(spec), built))
    wrote = _write_if_changed(config_path(model_dir), text)
    wrote |= _write_if_changed(recipe_path(model_dir), recipe.to_json())
    wrote |= _write_if_changed(feeds_path(model_dir), feeds_to_json(parity_feeds(spec)))
    if wrote:
        plans = ", ".join(m.plan for m in built) or "none built yet"
        log.info(f"  wrote configs/tensorrt.pbtxt (plans: {plans}), configs/{recipe_path(model_dir).name} and "
            f"configs/{feeds_path(model_dir).name} ({recipe.precision}, cc "
            f"{', '.join(recipe.compute_capabilities) or 'this GPU'})")
    return wrote


class PlanStep:
    """Builds plans for the specs that ask for them, on this host's GPU; decides once whether it can."""

    def __init__(self, target: Target | None = None):
        self.target = target or device.detect()
        why = builder.unavailable()
        self.unavailable = why or ("" if self.target.compute_capability else "no GPU (nvidia-smi found none)")
        self._told = False

    def _tell_once(self) -> None:
        if not self._told:
            log.info(f"[build] TensorRT plans skipped: {self.unavailable}; building the ONNX repository "
                     f"(`hotpath build --check` lists the plans each GPU needs)")
            self._told = True

    def build(self, spec: ModelSpec, version_dir: Path, force: bool = False) -> str:
        """'built', 'skipped' (fresh), 'unavailable' or '' (no plans asked for)."""
        recipe = recipe_for(spec)
        if recipe is None:
            return ""
        folded = ensure_sanitized(version_dir / EXPORTED_ONNX, version_dir / recipe.onnx)
        if folded is not None:
            check = parity.compare(parity.onnxrt_runner(version_dir / EXPORTED_ONNX, "onnx"),
                                   parity.onnxrt_runner(version_dir / recipe.onnx, "folded"),
                                   self._feeds(spec), atol=1e-5)
            if not check.ok:
                raise BuildError(f"{spec.name}: constant-folded ONNX differs from the export "
                                 f"(max abs diff {check.max_abs_diff:.2e})")
            log.info(f"  folded constants: {folded['nodes_before']} -> {folded['nodes_after']} nodes "
                     f"({recipe.onnx}; polygraphy parity vs {EXPORTED_ONNX}: max abs diff {check.max_abs_diff:.1e})")
        if self.unavailable:
            self._tell_once()
            return "unavailable"
        status = plan_status(version_dir.parent, version_dir, recipe, self.target)
        if status.ok and not force and status.manifest.compute_capability == self.target.compute_capability:
            log.info(f"  skip plan: {status.manifest.plan} fresh for {self.target.describe()}")
            return "skipped"
        return self._build_plan(spec, recipe, version_dir)

    def _feeds(self, spec: ModelSpec) -> list:
        return parity_feeds(spec)

    def _build_plan(self, spec: ModelSpec, recipe, version_dir: Path) -> str:
        feeds = self._feeds(spec)
        calibration_feeds = None
        if recipe.precision == "int8":
            # Calibration runs at the profile's opt shape only; parity keeps the payload's shapes.
            calibration_feeds = calibration.at_shape(feeds, calibration.opt_shapes(recipe.profiles[0]),
                                                     batched=spec.config.max_batch_size > 0)
        job = builder.BuildJob(
            onnx=version_dir / recipe.onnx, plan=version_dir / plan_filename(self.target.compute_capability),
            recipe=recipe, timing_cache=paths.work_dir() / "tensorrt" / "timing.cache",
            calibration=calibration_feeds,
            calibration_cache=version_dir / recipe.calibration_cache if recipe.calibration_cache else None)
        seconds = builder.build(job)
        check = parity.compare(parity.onnxrt_runner(version_dir / EXPORTED_ONNX, "onnxruntime"),
                               parity.trt_runner(job.plan, "tensorrt"), feeds, recipe.parity_atol, recipe.parity_rtol)
        log.info(f"  parity TensorRT vs ONNX Runtime ({recipe.precision}, {check.iterations} batches): "
                 f"max abs diff {check.max_abs_diff:.2e} (tolerance {recipe.parity_atol:g})")
        if not check.ok:
            job.plan.unlink()
            raise BuildError(f"{spec.name}: TensorRT plan outside tolerance: max abs diff "
                             f"{check.max_abs_diff:.2e} > {recipe.parity_atol:g} ({recipe.precision}); plan removed")
        builder.record(job, self.target, seconds, check.as_dict())
        return "built"
