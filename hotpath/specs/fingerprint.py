"""Content fingerprints that decide whether a build step can be skipped."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

STAMP = ".hotpath-build.json"


def file_digest(path: Path, chunk: int = 1 << 20) -> str:
    """sha256 of a file's content."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def fingerprint(settings: Any, files: list[Path]) -> str:
    """One digest over JSON-able settings and the content of `files` (order-independent)."""
    h = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode())
    for path in sorted(Path(p) for p in files):
        h.update(path.name.encode())
        h.update(file_digest(path).encode())
    return h.hexdigest()


def read_stamp(version_dir: Path) -> dict[str, Any] | None:
    """The stamp a previous build left in `version_dir`, or None."""
    try:
        return json.loads((version_dir / STAMP).read_text())
    except (OSError, ValueError):
        return None


def is_fresh(version_dir: Path, digest: str) -> bool:
    """True when the last build of `version_dir` had this digest and all its files still exist."""
    stamp = read_stamp(version_dir)
    return bool(stamp and stamp.get("fingerprint") == digest
                and all((version_dir / f).exists() for f in stamp.get("files", [])))


def write_stamp(version_dir: Path, digest: str, files: list[str], metrics: dict[str, Any]) -> None:
    """Record a finished build."""
    data = {"fingerprint": digest, "files": files, "metrics": metrics}
    (version_dir / STAMP).write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
