"""The TensorRT part of `hotpath engines`: plan config and recipe always; plans where TensorRT and a GPU are.

Per model with `[hotpath.tensorrt]`: write `configs/tensorrt.pbtxt` and `configs/tensorrt.build.json`,
fold constants of the exported ONNX (checked against it with polygraphy on ONNX Runtime), then, on a
GPU host with TensorRT, build the plan for this GPU (skipped while its manifest is fresh), compare it
with ONNX Runtime and write its manifest. Without TensorRT or a GPU it says so once and goes on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.config import HEADER, to_pbtxt
from hotpath.errors import BuildError
from hotpath.plans import calibration, parity
from hotpath.plans.options import recipe_for, tensorrt_options
from hotpath.plans.plan_config import plan_config
from hotpath.plans.sanitize import ensure_sanitized
from hotpath.spec import ModelSpec
from hotpath.tensorrt import builder, device
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import plan_status
from hotpath.tensorrt.recipe import config_path, plan_filename, recipe_path

Log = Callable[[str], None]
EXPORTED_ONNX = "model.onnx"


def _write_if_changed(path: Path, text: str) -> bool:
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def write_plan_files(spec: ModelSpec, model_dir: Path, log: Log) -> bool:
    """configs/tensorrt.pbtxt (round-tripped through model_config_pb2) and the recipe; True when written."""
    recipe = recipe_for(spec)
    if recipe is None:
        return False
    source = spec.source.relative_to(spec.source.parent.parent) if spec.source else "<memory>"
    text = HEADER.format(source=source) + to_pbtxt(plan_config(spec, recipe, tensorrt_options(spec)))
    wrote = _write_if_changed(config_path(model_dir), text)
    wrote |= _write_if_changed(recipe_path(model_dir), recipe.to_json())
    if wrote:
        log(f"  wrote configs/tensorrt.pbtxt and configs/{recipe_path(model_dir).name} "
            f"({recipe.precision}, cc {', '.join(recipe.compute_capabilities) or 'this GPU'})")
    return wrote


class PlanStep:
    """Builds plans for the specs that ask for them, on this host's GPU; decides once whether it can."""

    def __init__(self, log: Log, target: Target | None = None):
        self.log = log
        self.target = target or device.detect()
        why = builder.unavailable()
        self.unavailable = why or ("" if self.target.compute_capability else "no GPU (nvidia-smi found none)")
        self._told = False

    def _tell_once(self) -> None:
        if not self._told:
            self.log(f"[engines] TensorRT plans skipped: {self.unavailable}; building the ONNX repository "
                     f"(`hotpath engines --check` lists the plans each GPU needs)")
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
            self.log(f"  folded constants: {folded['nodes_before']} -> {folded['nodes_after']} nodes "
                     f"({recipe.onnx}; polygraphy parity vs {EXPORTED_ONNX}: max abs diff {check.max_abs_diff:.1e})")
        if self.unavailable:
            self._tell_once()
            return "unavailable"
        status = plan_status(version_dir.parent, version_dir, recipe, self.target)
        if status.ok and not force and status.manifest.compute_capability == self.target.compute_capability:
            self.log(f"  skip plan: {status.manifest.plan} fresh for {self.target.describe()}")
            return "skipped"
        return self._build_plan(spec, recipe, version_dir)

    def _feeds(self, spec: ModelSpec) -> list:
        batch = spec.config.max_batch_size or 1
        return calibration.batched(calibration.payload_feeds(spec), min(batch, 8))

    def _build_plan(self, spec: ModelSpec, recipe, version_dir: Path) -> str:
        feeds = self._feeds(spec)
        job = builder.BuildJob(
            onnx=version_dir / recipe.onnx, plan=version_dir / plan_filename(self.target.compute_capability),
            recipe=recipe, timing_cache=paths.work_dir() / "tensorrt" / "timing.cache", calibration=feeds,
            calibration_cache=version_dir / recipe.calibration_cache if recipe.calibration_cache else None)
        seconds = builder.build(job, self.log)
        check = parity.compare(parity.onnxrt_runner(version_dir / EXPORTED_ONNX, "onnxruntime"),
                               parity.trt_runner(job.plan, "tensorrt"), feeds, recipe.parity_atol, recipe.parity_rtol)
        self.log(f"  parity TensorRT vs ONNX Runtime ({recipe.precision}, {check.iterations} batches): "
                 f"max abs diff {check.max_abs_diff:.2e} (tolerance {recipe.parity_atol:g})")
        if not check.ok:
            job.plan.unlink()
            raise BuildError(f"{spec.name}: TensorRT plan outside tolerance: max abs diff "
                             f"{check.max_abs_diff:.2e} > {recipe.parity_atol:g} ({recipe.precision}); plan removed")
        builder.record(job, self.target, seconds, check.as_dict())
        return "built"
