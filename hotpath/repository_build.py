"""`hotpath build`: specs -> exports, Python models, config.pbtxt files and
TensorRT artefacts in the repository.

Incremental: each version directory keeps a stamp with a fingerprint of everything its files
depend on (weights, export code, library versions, the spec's export-relevant fields); when the
fingerprint is unchanged the step is skipped and says so. Batching and instance settings are not
part of the fingerprint, so re-tuning a config never re-exports a model.
"""

from __future__ import annotations

import importlib.util
import logging
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from google.protobuf import json_format

from hotpath import paths
from hotpath.errors import BuildError
from hotpath.exporters.base import Exporter
from hotpath.exporters.registry import get_exporter
from hotpath.specs.config_pbtxt import render, validate_all
from hotpath.specs.fingerprint import fingerprint, is_fresh, write_stamp
from hotpath.specs.spec import ModelSpec, load_specs

log = logging.getLogger(__name__)
VERSION = "1"
EXPORT_DIR = "export"  # exported files of a Python model, beside its model.py


@dataclass
class StepResult:
    """Outcome of building one model: 'built', 'skipped' or 'unchanged'."""

    model: str
    action: str
    seconds: float
    metrics: dict


def resolve_asset(ref: str, spec: ModelSpec) -> Path:
    """`package://pkg/sub/path` -> a file inside an installed package; other refs are repo-relative."""
    if ref.startswith("package://"):
        pkg, _, rel = ref[len("package://"):].partition("/")
        found = importlib.util.find_spec(pkg)
        if found is None or not found.submodule_search_locations:
            raise spec.error("hotpath.assets", f"package '{pkg}' is not installed (needed for {ref})")
        path = Path(list(found.submodule_search_locations)[0]) / rel
    else:
        path = paths.ROOT / ref
    if not path.is_file():
        raise spec.error("hotpath.assets", f"{ref} -> {path} does not exist")
    return path


def _export_inputs(spec: ModelSpec) -> dict:
    """The spec's share of an export's fingerprint: only what shapes the exported files, the [hotpath] table
    (less the TensorRT options, which shape plans, not the ONNX export, and the precision gate's corpus size,
    which the gate's own cache key holds) and the tensor signature."""
    cfg = json_format.MessageToDict(spec.config, preserving_proto_field_name=True)
    hotpath = {k: v for k, v in spec.hotpath_table.items() if k not in ("tensorrt", "precision_gate_windows")}
    return {"hotpath": hotpath, "input": cfg.get("input"), "output": cfg.get("output")}


def _python_sources(spec: ModelSpec) -> tuple[Path, list[Path]]:
    folder = paths.python_backends_dir() / spec.hotpath.python_backend
    if not (folder / "model.py").is_file():
        raise spec.error("hotpath.python_backend", f"{folder}/model.py does not exist")
    return folder, sorted(folder.glob("*.py"))


def _copy_python_model(spec: ModelSpec, version_dir: Path, force: bool) -> tuple[str, dict]:
    """A Python model's model.py (and the other .py files beside it) and its assets, copied into `version_dir`."""
    folder, code = _python_sources(spec)
    assets = [resolve_asset(ref, spec) for ref in spec.hotpath.assets]
    digest = fingerprint(_export_inputs(spec), code + assets)
    present = all((version_dir / p.name).is_file() for p in code + assets)   # copies are out of git
    if not force and present and is_fresh(version_dir, digest):
        log.info(f"  skip: {', '.join(p.name for p in code + assets)} unchanged (fingerprint {digest[:12]})")
        return "skipped", {}
    files = []
    for src in code + assets:
        shutil.copyfile(src, version_dir / src.name)
        files.append(src.name)
    log.info(f"  copied {', '.join(files)} from {folder.relative_to(paths.ROOT) if folder.is_relative_to(paths.ROOT) else folder}")
    write_stamp(version_dir, digest, files, {})
    return "built", {}


def _exporter_of(spec: ModelSpec) -> Exporter:
    """The exporter `[hotpath] exporter` names; a SpecError naming the spec and the key when none is registered
    under that name (an old name: the error names the new one)."""
    try:
        return get_exporter(spec.hotpath.exporter)
    except KeyError as exc:
        raise spec.error("hotpath.exporter", str(exc.args[0])) from None


def _run_exporter(spec: ModelSpec, out_dir: Path, force: bool) -> tuple[str, dict]:
    """The spec's exporter writes its files into `out_dir`: an ONNX model's version folder, or a Python
    model's `<version>/export/` folder (any model with `[hotpath] exporter`)."""
    exporter = _exporter_of(spec)
    sources = exporter.source_files(spec)
    missing = [str(p) for p in sources if not Path(p).is_file()]
    if missing:
        raise BuildError(f"{spec.name}: source files missing: {', '.join(missing)}")
    digest = fingerprint({**_export_inputs(spec), "versions": exporter.versions()}, sources + exporter.code_files())
    if not force and is_fresh(out_dir, digest):
        log.info(f"  skip export: weights, export code, versions and tensor spec unchanged (fingerprint {digest[:12]})")
        action, metrics = "skipped", {}
    else:
        out_dir.mkdir(parents=True, exist_ok=True)
        report = exporter.export(spec, out_dir, lambda m: log.info(f"  {m}"))
        write_stamp(out_dir, digest, report.files, report.metrics)
        action, metrics = "built", report.metrics
    # An exporter's gate runs on every build, exported or skipped: it depends on this host and on spec fields the
    # export fingerprint leaves out (text_generation: the precision of the dtype served here; cached by the gate).
    gate = getattr(exporter, "gate", None)
    if gate is not None:
        log.info(f"[build] {spec.name}: {gate(spec, out_dir, lambda m: log.info(f'  {m}'))}")
    return action, metrics


def _write_config_pbtxt(spec: ModelSpec, model_dir: Path) -> bool:
    """<model>/config.pbtxt rendered from the spec; False when the file already says exactly that."""
    text = render(spec)
    path = model_dir / "config.pbtxt"
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    log.info("  wrote config.pbtxt (parsed back: identical message)")
    return True


WARMUP_DIR = "warmup"   # Triton reads model_warmup input_data_file from <model>/warmup/


def _write_warmup_files(spec: ModelSpec, model_dir: Path) -> bool:
    """<model>/warmup/<name> for each hotpath.warmup_files entry: the asset as a serialized one-element
    BYTES tensor (4-byte length + bytes), the form Triton reads for a TYPE_STRING warmup input."""
    import numpy as np
    from tritonclient.utils import serialize_byte_tensor

    wrote = False
    for name, ref in spec.hotpath.warmup_files.items():
        data = serialize_byte_tensor(np.array([resolve_asset(ref, spec).read_bytes()], dtype=object)).item()
        path = model_dir / WARMUP_DIR / name
        if path.exists() and path.read_bytes() == data:
            continue
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(data)
        log.info(f"  wrote {WARMUP_DIR}/{name} from {ref} ({len(data)} bytes)")
        wrote = True
    return wrote


class _TensorRTStep:
    """The TensorRT step (hotpath.tensorrt.plans.step), imported and set up (GPU detection) at the first spec
    with a `[hotpath.tensorrt]` table: a spec without one never enters the TensorRT code."""

    def __init__(self):
        self._plans = None

    def build(self, spec: ModelSpec, version_dir: Path, force: bool) -> str:
        if spec.hotpath.tensorrt is None:
            return ""
        if self._plans is None:
            from hotpath.tensorrt.plans.step import PlanStep

            self._plans = PlanStep()
        return self._plans.build(spec, version_dir, force)

    @staticmethod
    def write_files(spec: ModelSpec, model_dir: Path) -> bool:
        if spec.hotpath.tensorrt is None:
            return False
        from hotpath.tensorrt.plans.step import write_plan_files

        return write_plan_files(spec, model_dir)


def build_repository(repository: Path | None = None, only: list[str] | None = None, force: bool = False) -> list[StepResult]:
    """Build every model of the specs into `repository`; returns one StepResult per model."""
    repository = Path(repository or paths.model_repository())
    specs = load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())
    validate_all(specs)
    known = {s.name for s in specs}
    if only:
        unknown = set(only) - known
        if unknown:
            raise BuildError(f"no spec for model(s): {', '.join(sorted(unknown))}")
        specs = [s for s in specs if s.name in only]
    for spec in specs:   # a spec naming no registered exporter fails before anything is built
        if spec.hotpath.exporter:
            _exporter_of(spec)
    log.info(f"[build] {len(specs)} model(s) -> {repository}")
    plans = _TensorRTStep()
    results = []
    for i, spec in enumerate(specs, 1):
        t0 = time.perf_counter()
        log.info(f"[build] ({i}/{len(specs)}) {spec.name} [{spec.kind}]")
        model_dir = repository / spec.name
        version_dir = model_dir / VERSION
        version_dir.mkdir(parents=True, exist_ok=True)
        if spec.kind == "onnx":
            action, metrics = _run_exporter(spec, version_dir, force)
            if plans.build(spec, version_dir, force) == "built":
                action = "built"
        elif spec.kind == "python":
            action, metrics = _copy_python_model(spec, version_dir, force)
            if spec.hotpath.exporter:
                # Its own folder and stamp: editing model.py must not re-run a slow export.
                exported, metrics = _run_exporter(spec, version_dir / EXPORT_DIR, force)
                action = "built" if "built" in (action, exported) else action
        else:
            # Triton wants a version directory for ensembles too; keep it in git.
            (version_dir / ".gitkeep").touch()
            action, metrics = "skipped", {}
        wrote = _write_config_pbtxt(spec, model_dir)
        wrote = plans.write_files(spec, model_dir) or wrote
        wrote = _write_warmup_files(spec, model_dir) or wrote
        if action == "skipped" and not wrote:
            action = "unchanged"
        elapsed = time.perf_counter() - t0
        log.info(f"[build] ({i}/{len(specs)}) {spec.name}: {action} in {elapsed:.1f}s")
        results.append(StepResult(spec.name, action, elapsed, metrics))
    for stray in sorted(p.name for p in repository.iterdir() if p.is_dir() and p.name not in known):
        log.warning(f"[build] warning: {repository / stray} has no spec; Triton will still try to load it")
    return results
