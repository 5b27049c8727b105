"""The manifest beside each plan: what it was built from, for which GPU and TensorRT, and how.

`model.sm90.plan` -> `model.sm90.plan.manifest.json`. The container and `hotpath build --check`
compare it with a GPU and TensorRT version (hotpath.tensorrt.compat) before a plan is served.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

SUFFIX = ".manifest.json"


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


@dataclass
class Manifest:
    """One built plan."""

    model: str
    plan: str                  # file name in the same directory
    plan_sha256: str
    onnx_sha256: str           # of the recipe's ONNX file when the plan was built
    gpu_name: str
    compute_capability: str
    tensorrt_version: str
    precision: str
    profiles: list = field(default_factory=list)
    hardware_compatibility: str = "NONE"
    version_compatible: bool = False
    recipe_digest: str = ""
    parity: dict = field(default_factory=dict)
    build_seconds: float = 0.0
    built_at: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def manifest_path(plan_path: Path) -> Path:
    return Path(plan_path).with_name(Path(plan_path).name + SUFFIX)


def write_manifest(manifest: Manifest, directory: Path) -> Path:
    path = manifest_path(Path(directory) / manifest.plan)
    path.write_text(manifest.to_json())
    return path


def read_manifest(path: Path) -> Manifest:
    data = json.loads(Path(path).read_text())
    known = set(Manifest.__dataclass_fields__)
    return Manifest(**{k: v for k, v in data.items() if k in known})


def manifests_in(directory: Path) -> list[Manifest]:
    """Every manifest in a version (or cache) directory, sorted by plan name."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return [read_manifest(p) for p in sorted(directory.glob(f"*.plan{SUFFIX}"))]


def recipe_digest(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
