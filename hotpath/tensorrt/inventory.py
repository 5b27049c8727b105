"""Which plan of a model serves a target, and why the others cannot: missing, stale or incompatible."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hotpath.tensorrt.compat import Target, judge
from hotpath.tensorrt.manifest import Manifest, manifests_in, recipe_digest, sha256
from hotpath.tensorrt.recipe import Recipe


@dataclass
class PlanStatus:
    """The outcome for one model version on one target."""

    model: str
    version: str
    status: str                 # ok | missing | stale | incompatible
    reason: str
    manifest: Manifest | None = None
    directory: Path | None = None  # where the chosen plan lies

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def line(self) -> str:
        plan = f" {self.manifest.plan}" if self.manifest else ""
        return f"{self.model}/{self.version}{plan}: {self.status}: {self.reason}"


def version_dirs(model_dir: Path) -> list[Path]:
    return sorted(p for p in Path(model_dir).iterdir() if p.is_dir() and p.name.isdigit())


def staleness(manifest: Manifest, directory: Path, recipe: Recipe, onnx_sha: str | None) -> str:
    """Why a built plan no longer matches its inputs ('' when it still does)."""
    plan = directory / manifest.plan
    if not plan.is_file():
        return f"{manifest.plan} is missing beside its manifest"
    if sha256(plan) != manifest.plan_sha256:
        return f"{manifest.plan} differs from the plan its manifest describes"
    if onnx_sha and onnx_sha != manifest.onnx_sha256:
        return f"{recipe.onnx} changed since the plan was built"
    if manifest.recipe_digest and manifest.recipe_digest != recipe_digest(recipe.digest_fields()):
        return "the spec's TensorRT settings changed since the plan was built"
    return ""


def plan_status(model_dir: Path, version_dir: Path, recipe: Recipe, target: Target,
                extra_dirs: tuple[Path, ...] = ()) -> PlanStatus:
    """The first fresh plan (version directory first, then `extra_dirs`) whose manifest fits `target`."""
    model, version = Path(model_dir).name, version_dir.name
    onnx = version_dir / recipe.onnx
    onnx_sha = sha256(onnx) if onnx.is_file() else None
    rejected = []
    for directory in (version_dir, *extra_dirs):
        for manifest in manifests_in(directory):
            stale = staleness(manifest, directory, recipe, onnx_sha)
            if stale:
                rejected.append(("stale", manifest, directory, stale))
                continue
            verdict = judge(manifest, target)
            if verdict.ok:
                reason = verdict.reason + (f" ({verdict.note})" if verdict.note else "")
                return PlanStatus(model, version, "ok", reason, manifest, directory)
            rejected.append(("incompatible", manifest, directory, verdict.reason))
    if not rejected:
        return PlanStatus(model, version, "missing", f"no plan built for {target.describe()}")
    # Prefer telling about a plan built for this GPU (stale beats incompatible there).
    same_cc = [r for r in rejected if r[1].compute_capability == target.compute_capability]
    status, manifest, directory, reason = (same_cc or rejected)[0]
    return PlanStatus(model, version, status, reason, manifest, directory)


def built_plans(model_dir: Path, recipe: Recipe) -> list[Manifest]:
    """The plans present and fresh in every version directory (the ones a config may name), by plan name."""
    model_dir = Path(model_dir)
    dirs = version_dirs(model_dir) if model_dir.is_dir() else []
    fresh = []
    for directory in dirs:
        manifests = manifests_in(directory)
        onnx = directory / recipe.onnx
        onnx_sha = sha256(onnx) if manifests and onnx.is_file() else None  # 90 MB: only when it matters
        fresh.append({m.plan: m for m in manifests if not staleness(m, directory, recipe, onnx_sha)})
    names = set.intersection(*(set(f) for f in fresh)) if fresh else set()
    return [fresh[0][name] for name in sorted(names)]
