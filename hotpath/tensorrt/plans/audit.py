"""`hotpath build --check`: which plans are missing, stale or incompatible, per model and target GPU."""

from __future__ import annotations

from pathlib import Path

from hotpath.specs.spec import ModelSpec
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import PlanStatus, plan_status, version_dirs
from hotpath.tensorrt.plans.options import recipe_for
from hotpath.tensorrt.recipe import read_recipe


def targets_for(recipe, target: Target) -> list[Target]:
    """The GPU given on the command line, else one target per compute capability the spec lists."""
    if target.compute_capability:
        return [target]
    return [Target("", cc, target.tensorrt_version) for cc in recipe.compute_capabilities]


def check_plans(repository: Path, specs: list[ModelSpec], target: Target) -> list[PlanStatus]:
    """One PlanStatus per model version and target; a committed recipe behind its spec counts as stale."""
    out = []
    for spec in specs:
        recipe = recipe_for(spec)
        if recipe is None:
            continue
        model_dir = Path(repository) / spec.name
        if read_recipe(model_dir) != recipe:
            out.append(PlanStatus(spec.name, "-", "stale", "configs/tensorrt.build.json differs from the spec "
                                                           "(run `make engines`)"))
        targets = targets_for(recipe, target)
        if not targets:
            out.append(PlanStatus(spec.name, "-", "missing", "no GPU given and the spec lists no "
                                                             "compute_capabilities (pass --compute-capability)"))
        for version_dir in version_dirs(model_dir) if model_dir.is_dir() else []:
            for t in targets:
                status = plan_status(model_dir, version_dir, recipe, t)
                if not t.tensorrt_version and status.status == "incompatible" and "TensorRT version" in status.reason:
                    status.status, status.reason = "ok", "fits this GPU (TensorRT version not checked: pass --tensorrt)"
                out.append(status)
    return out


def format_report(statuses: list[PlanStatus], target: Target) -> str:
    head = f"[build --check] target: {target.describe() if target.compute_capability else 'every listed GPU'}"
    if not target.compute_capability and target.tensorrt_version:
        head += f", TensorRT {target.tensorrt_version}"
    lines = [head] + [f"  {s.line()}" for s in statuses]
    bad = [s for s in statuses if not s.ok]
    lines.append(f"[build --check] {len(statuses) - len(bad)} ok, {len(bad)} missing, stale or incompatible")
    return "\n".join(lines)
