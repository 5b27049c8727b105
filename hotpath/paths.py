"""Where things live. Every location can be overridden by an environment variable (hotpath.settings)."""

from __future__ import annotations

from pathlib import Path

from hotpath import settings
from hotpath.runtime.settings import work_folder

ROOT = settings.root()


def _dir(setting: settings.Setting, default: Path) -> Path:
    return Path(setting() or default).resolve()


def model_specs_dir() -> Path:
    """Folder of per-model specs (`build/*.toml`)."""
    return _dir(settings.build_dir, ROOT / "build")


def ensemble_specs_dir() -> Path:
    """Folder of per-pipeline specs (`ensembles/*.toml`)."""
    return _dir(settings.ensembles_dir, ROOT / "ensembles")


def python_backends_dir() -> Path:
    """Folder holding one directory per Python-backend model (each with a model.py)."""
    return _dir(settings.python_backends_dir, ROOT / "python_backends")


def model_repository() -> Path:
    """The production-shaped Triton model repository that `hotpath build` writes."""
    return _dir(settings.model_repository, ROOT / "model_repository")


def work_dir() -> Path:
    """Scratch space for staged repositories, backend directories and logs (ignored by git)."""
    return work_folder()
