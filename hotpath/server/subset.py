"""A repository of some models of another, as links: a server for one endpoint loads only its models."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable

from hotpath import paths


def linked(models: Iterable[str], target: Path | None = None, repository: Path | None = None) -> Path:
    """`target` (a new scratch folder by default) holding links to `models` of `repository`."""
    repository = Path(repository or paths.model_repository())
    target = Path(target or tempfile.mkdtemp(prefix="hotpath-subset-"))
    for name in dict.fromkeys(models):
        (target / name).symlink_to((repository / name).resolve(), target_is_directory=True)
    return target
