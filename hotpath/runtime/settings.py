"""The environment variables Triton's Python stubs read, and the accessor type every hotpath setting uses.

hotpath.settings holds every other variable and re-exports these: its docstring tells the rules (read when
called, unset or empty means the default, one accessor per variable). Here because hotpath/runtime imports
nothing outside itself. Stdlib only.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Setting(Generic[T]):
    """One variable: `setting()` is its value now, `setting.name` what to set."""

    name: str
    default: T
    parse: Callable[[str], T]
    doc: str

    def __call__(self, env: Mapping[str, str] | None = None) -> T:
        raw = (os.environ if env is None else env).get(self.name, "").strip()
        return self.parse(raw) if raw else self.default


def _flag(raw: str) -> bool:
    return raw.lower() in ("1", "true", "yes")


def _optional(raw: str) -> str | None:
    return raw


SETTINGS: dict[str, Setting] = {}


def _setting(name: str, default: T, parse: Callable[[str], T], doc: str, prefix: str = "HOTPATH_") -> Setting[T]:
    setting = Setting(prefix + name, default, parse, doc)
    SETTINGS[setting.name] = setting
    return setting


def _container(name: str, default: T, parse: Callable[[str], T], doc: str) -> Setting[T]:
    """An unprefixed variable of the container's environment."""
    return _setting(name, default, parse, doc, prefix="")


# Read inside Triton by the Python stubs.
root = _setting("ROOT", Path(__file__).resolve().parent.parent.parent, Path, "the checkout the default folders are in")
work_dir = _setting("WORK_DIR", None, _optional, "staged copies, backend directory, server logs (default ./.hotpath)")
stub_timing_dir = _setting("STUB_TIMING_DIR", None, _optional, "Python stubs append per-execute() timings there "
                           "(read inside Triton by hotpath.runtime.timing)")
pg_dsn = _setting("PG_DSN", None, _optional, "PostgreSQL DSN of the pgvector store (or its `pg_dsn` parameter)")
retrieval_data_dir = _setting("RETRIEVAL_DATA_DIR", None, _optional,
                              "the in-process vector store's data (WAL) directory (or its `data_dir` parameter)")


def work_folder() -> Path:
    """Scratch space for staged repositories, backend directories, logs and the stores' data (ignored by git):
    HOTPATH_WORK_DIR, else <checkout>/.hotpath (hotpath.paths.work_dir)."""
    return Path(work_dir() or root() / ".hotpath").resolve()
