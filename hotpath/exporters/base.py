"""The exporter contract."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hotpath.specs.spec import ModelSpec

Log = Callable[[str], None]


@dataclass
class ExportReport:
    """What an export produced and how it checked out."""

    files: list[str]
    metrics: dict[str, Any] = field(default_factory=dict)


class Exporter:
    """Base class: subclasses set `name` and implement `source_files` and `export`."""

    name = ""

    def source_files(self, spec: ModelSpec) -> list[Path]:
        """Files (weights, vocabularies) whose content determines the export's output."""
        raise NotImplementedError

    def code_files(self) -> list[Path]:
        """Source files of the export code itself; a change in them forces a rebuild."""
        return [Path(inspect.getfile(type(self))), Path(__file__)]

    def versions(self) -> dict[str, str]:
        """Versions of libraries that shape the output (a torch upgrade may change the graph)."""
        return {}

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        """Write the model files into `version_dir` and check them; raise BuildError on failure."""
        raise NotImplementedError
