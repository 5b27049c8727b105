"""Container start: check every plan against this GPU and TensorRT, rebuild or fail, assemble the repository.

`python3 -m hotpath.tensorrt.startup --repository /models --cache /cache --args-file F` writes the
repository tritonserver serves (`<cache>/repository`: links into the read-only repository, plus
plans rebuilt into the cache volume) and the server arguments it needs into F, one per line.
A model with TensorRT plans is served:
- from a plan whose manifest fits this GPU and TensorRT version;
- else, with `--on-incompatible rebuild` (default), from a plan rebuilt now into `<cache>/plans`,
  once ONNX Runtime agrees with it on the inputs `hotpath build` wrote (configs/tensorrt.feeds.json)
  within the recipe's tolerance (a plan that does not is removed);
- else on its ONNX config, when its spec keeps an ONNX fallback;
- else the start fails, naming the model and the reason.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hotpath.specs.repository import Repository, read_config
from hotpath.tensorrt import builder, device, parity
from hotpath.tensorrt.compat import Target
from hotpath.tensorrt.inventory import PlanStatus, plan_status, version_dirs
from hotpath.tensorrt.recipe import (
    CONFIG_NAME,
    EXPORTED_ONNX,
    FEEDS_FILE,
    Recipe,
    plan_filename,
    read_feeds,
    read_recipe,
)

Log = Callable[[str], None]
logger = logging.getLogger(__name__)


def _say(message: str) -> None:
    logger.info(f"[startup] {message}")


@dataclass
class Startup:
    """What the start decided: the served repository, server arguments, and fatal problems."""

    repository: Path
    args: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    decisions: dict[str, str] = field(default_factory=dict)


def _rebuild(model_dir: Path, version_dir: Path, recipe: Recipe, target: Target, cache: Path,
             log: Log) -> PlanStatus:
    why = builder.unavailable()
    if why:
        raise RuntimeError(f"cannot rebuild: {why}")
    out_dir = cache / "plans" / model_dir.name / version_dir.name
    calibration_cache = version_dir / recipe.calibration_cache if recipe.calibration_cache else None
    if recipe.precision == "int8" and not (calibration_cache and calibration_cache.is_file()):
        raise RuntimeError("cannot rebuild an int8 plan without its calibration cache")
    job = builder.BuildJob(onnx=version_dir / recipe.onnx, plan=out_dir / plan_filename(target.compute_capability),
                           recipe=recipe, timing_cache=cache / "timing.cache",
                           calibration_cache=calibration_cache)
    seconds = builder.build(job, log)
    try:
        check = _check_rebuilt(model_dir, version_dir, recipe, job.plan)
    except Exception:
        # No manifest is written for it, so no start serves it; the file itself goes too.
        job.plan.unlink(missing_ok=True)
        raise
    log(f"{model_dir.name}/{version_dir.name}: parity of the rebuilt {job.plan.name} vs ONNX Runtime "
        f"({recipe.precision}, {check.iterations} batches): max abs diff {check.max_abs_diff:.2e} "
        f"(tolerance {recipe.parity_atol:g})")
    manifest = builder.record(job, target, seconds, {**check.as_dict(), "where": "container start"})
    return PlanStatus(model_dir.name, version_dir.name, "ok", "rebuilt for this GPU, parity checked", manifest,
                      out_dir)


def _check_rebuilt(model_dir: Path, version_dir: Path, recipe: Recipe, plan: Path) -> parity.Parity:
    """The rebuilt plan against ONNX Runtime on the build's parity inputs; raises when it cannot be
    checked or is outside the recipe's tolerance."""
    feeds = read_feeds(model_dir)
    if not feeds:
        raise RuntimeError(f"cannot check the rebuilt plan: no parity inputs (configs/{FEEDS_FILE}; "
                           f"run `make engines`)")
    reference = version_dir / EXPORTED_ONNX
    if not reference.is_file():
        reference = version_dir / recipe.onnx
    check = parity.compare(parity.onnxrt_runner(reference, "onnxruntime"), parity.trt_runner(plan, "tensorrt"),
                           feeds, recipe.parity_atol, recipe.parity_rtol)
    if not check.ok:
        raise RuntimeError(f"rebuilt {plan.name} differs from ONNX Runtime ({reference.name}): max abs diff "
                           f"{check.max_abs_diff:.2e} > {recipe.parity_atol:g} ({recipe.precision}); plan removed")
    return check


def _write_plan_model(model_dir: Path, dest: Path, chosen: dict[str, PlanStatus]) -> None:
    """`dest`: the TensorRT config naming the chosen plan, and links to every version file."""
    from google.protobuf import text_format

    config = read_config(model_dir, CONFIG_NAME)
    plans = {s.manifest.plan for s in chosen.values()}
    # One plan per version serves this GPU: name it directly rather than through cc_model_filenames,
    # which would miss a hardware-compatible plan built on another architecture.
    config.ClearField("cc_model_filenames")
    config.default_model_filename = sorted(plans)[0] if len(plans) == 1 else "model.plan"
    dest.mkdir(parents=True)
    (dest / "config.pbtxt").write_text(text_format.MessageToString(config))
    _link_model_files(model_dir, dest, skip={"config.pbtxt", *chosen})
    for version, status in chosen.items():
        vdir = dest / version
        vdir.mkdir()
        for f in (model_dir / version).iterdir():
            if not f.name.endswith(".plan"):
                (vdir / f.name).symlink_to(f.resolve())
        plan = status.directory / status.manifest.plan
        (vdir / config.default_model_filename).symlink_to(plan.resolve())


def _link_model_files(model_dir: Path, dest: Path, skip: set[str]) -> None:
    """Link what `model_dir` holds into `dest`, but never its configs/: with `--model-config-name=tensorrt`
    Triton would load configs/tensorrt.pbtxt, which names plans this host may not have."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(model_dir.iterdir()):
        if entry.name not in skip and entry.name != "configs":
            (dest / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())


def _serve_onnx(model_dir: Path, dest: Path) -> None:
    """The model's ONNX config (config.pbtxt) and versions, without its TensorRT config."""
    _link_model_files(model_dir, dest, skip=set())


def prepare(repository: Path, cache: Path, target: Target, on_incompatible: str = "rebuild",
            log: Log = _say) -> Startup:
    """Decide per model and assemble `<cache>/repository`; never starts a server."""
    repository, cache = Path(repository).resolve(), Path(cache).resolve()
    served = cache / "repository"
    if served.exists():
        shutil.rmtree(served)
    served.mkdir(parents=True)
    result = Startup(served)
    log(f"host: {target.describe() if target.compute_capability else 'no GPU'}")
    for model_dir in Repository(repository).model_dirs():
        name, recipe = model_dir.name, read_recipe(model_dir)
        if recipe is None:
            (served / name).symlink_to(model_dir, target_is_directory=True)
            continue
        if not target.compute_capability:
            if recipe.onnx_fallback:
                result.decisions[name] = "onnx fallback (no GPU)"
                _serve_onnx(model_dir, served / name)
                log(f"{name}: no GPU here; serving its ONNX fallback")
            else:
                result.problems.append(f"{name}: needs a GPU (TensorRT plans only; its spec keeps no ONNX fallback)")
            continue
        chosen: dict[str, PlanStatus] = {}
        for version_dir in version_dirs(model_dir):
            status = plan_status(model_dir, version_dir, recipe, target,
                                 (cache / "plans" / name / version_dir.name,))
            log(status.line())
            if not status.ok and on_incompatible == "rebuild":
                try:
                    status = _rebuild(model_dir, version_dir, recipe, target, cache, log)
                except Exception as exc:  # a failed build must name the model, whatever raised
                    status = PlanStatus(name, version_dir.name, "failed", f"{status.reason}; {exc}")
            if not status.ok:
                break
            chosen[version_dir.name] = status
        else:
            _write_plan_model(model_dir, served / name, chosen)
            result.decisions[name] = "tensorrt " + ", ".join(s.manifest.plan for s in chosen.values())
            if any(s.manifest.version_compatible for s in chosen.values()):
                result.args.append("--backend-config=tensorrt,version-compatible=true")
            continue
        if recipe.onnx_fallback:
            result.decisions[name] = f"onnx fallback ({status.reason})"
            _serve_onnx(model_dir, served / name)
            log(f"{name}: {status.reason}; serving its ONNX fallback")
        else:
            result.problems.append(f"{status.line()} (rebuild with --on-incompatible rebuild, or rebuild the "
                                   f"image's plans for {target.describe()})")
    result.args = [f"--model-repository={served}", *sorted(set(result.args))]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m hotpath.tensorrt.startup", description=__doc__.splitlines()[0])
    parser.add_argument("--repository", default="/models")
    parser.add_argument("--cache", default="/cache")
    parser.add_argument("--on-incompatible", choices=("rebuild", "fail"), default="rebuild")
    parser.add_argument("--args-file", required=True, help="where to write tritonserver's arguments")
    args = parser.parse_args(argv)
    from hotpath import logs
    from hotpath.specs.preflight import check_repository

    logs.configure()
    result = prepare(Path(args.repository), Path(args.cache), device.detect(), args.on_incompatible)
    problems = result.problems or check_repository(result.repository)
    for problem in problems:
        print(f"[startup] error: {problem}", file=sys.stderr, flush=True)
    if problems:
        return 2
    Path(args.args_file).write_text("\n".join(result.args) + "\n")
    for name, decision in sorted(result.decisions.items()):
        _say(f"{name}: {decision}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
