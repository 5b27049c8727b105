"""Where things live. Every location can be overridden by an environment variable."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(os.environ.get("HOTPATH_ROOT", Path(__file__).resolve().parent.parent))


def _dir(env: str, default: Path) -> Path:
    return Path(os.environ.get(env, default)).resolve()


def model_specs_dir() -> Path:
    """Folder of per-model specs (`build/*.toml`)."""
    return _dir("HOTPATH_BUILD_DIR", ROOT / "build")


def ensemble_specs_dir() -> Path:
    """Folder of per-pipeline specs (`ensembles/*.toml`)."""
    return _dir("HOTPATH_ENSEMBLES_DIR", ROOT / "ensembles")


def python_backends_dir() -> Path:
    """Folder holding one directory per Python-backend model (each with a model.py)."""
    return _dir("HOTPATH_PYTHON_BACKENDS_DIR", ROOT / "python_backends")


def model_repository() -> Path:
    """The production-shaped Triton model repository that `hotpath engines` writes."""
    return _dir("HOTPATH_MODEL_REPOSITORY", ROOT / "model_repository")


def work_dir() -> Path:
    """Scratch space for staged repositories, backend directories and logs (ignored by git)."""
    return _dir("HOTPATH_WORK_DIR", ROOT / ".hotpath")
