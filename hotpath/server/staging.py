"""The staged copy of the repository that the local server runs.

The wheel's tritonserver carries only the Python backend (and ensembles, which are core), so models
configured for the native onnxruntime backend run through python_backends/onnxruntime_runner in the
staged copy instead; every substitution is logged, and the repository itself is never rewritten.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Callable

from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.specs.config_pbtxt import to_pbtxt
from hotpath.specs.repository import Repository, read_config

Log = Callable[[str], None]


_print = logging.getLogger(__name__).info


def _substitute_onnxruntime(config: mc.ModelConfig, ort_threads: int | None) -> mc.ModelConfig:
    staged = mc.ModelConfig()
    staged.CopyFrom(config)
    staged.backend = "python"
    staged.platform = ""
    for group in staged.instance_group:
        # No GPU here: KIND_GPU would fail to load, KIND_AUTO would pick CPU anyway.
        group.kind = mc.ModelInstanceGroup.KIND_CPU
        del group.gpus[:]
    if ort_threads is not None:
        staged.parameters["intra_op_thread_count"].string_value = str(ort_threads)
    return staged


def stage_repository(repository: Path, target: Path, ort_threads: int | None = None,
                     log: Log = _print, tuned: dict[str, dict] | None = None) -> list[str]:
    """Make `target` a servable copy of `repository`; returns the names of the staged models.

    `tuned`: knob values per model over the repository's configs; default: this host's tuned values
    (hotpath.tuning.tuned_values; none when absent or measured on other hardware, which is logged)."""
    from hotpath.tuning.tuned_values import for_this_host, link_with_config, with_tuned

    runner = paths.python_backends_dir() / "onnxruntime_runner" / "model.py"
    target.mkdir(parents=True, exist_ok=True)
    tuned = for_this_host(log=log) if tuned is None else tuned
    staged = []
    for model_dir in Repository(repository).model_dirs():
        config = read_config(model_dir)
        retuned = model_dir.name in tuned
        if retuned:
            config = with_tuned(config, tuned[model_dir.name], log)
        dest = target / model_dir.name
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)
        if config.backend == "onnxruntime" or config.platform == "onnxruntime_onnx":
            substitute = _substitute_onnxruntime(config, ort_threads)
            dest.mkdir()
            (dest / "config.pbtxt").write_text(to_pbtxt(substitute))
            for version in (v for v in model_dir.iterdir() if v.is_dir() and v.name.isdigit()):
                (dest / version.name).mkdir()
                for f in version.iterdir():
                    (dest / version.name / f.name).symlink_to(f.resolve())
                shutil.copyfile(runner, dest / version.name / "model.py")
            if (model_dir / "warmup").is_dir():  # model_warmup input_data_file samples
                (dest / "warmup").symlink_to((model_dir / "warmup").resolve(), target_is_directory=True)
            threads = substitute.parameters["intra_op_thread_count"].string_value
            log(f"[serve] {model_dir.name}: backend onnxruntime -> python ORT runner in the staged copy "
                f"(this tritonserver has no onnxruntime backend; intra_op_threads={threads or 'ORT default'}, "
                f"instance kind CPU)")
        elif config.backend == "tensorrt" or config.platform == "tensorrt_plan":
            log(f"[serve] {model_dir.name}: TensorRT plan, not servable on this host; left out of the staged copy")
            continue
        elif retuned:   # its own config, every other file linked
            link_with_config(model_dir, dest, config)
        else:
            dest.symlink_to(model_dir.resolve(), target_is_directory=True)
        staged.append(model_dir.name)
    return staged
