"""What to build for one model: precision, optimization profiles, compatibility flags, target GPUs.

Written by `hotpath build` beside the plan config (`<model>/configs/tensorrt.build.json`), so a
container can rebuild a plan for its own GPU from the ONNX file alone, with the inputs it checks a
rebuilt plan on (`configs/tensorrt.feeds.json`: the batches the build's own parity check uses).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

PRECISIONS = ("fp32", "fp16", "int8")
# Hardware-compatibility levels as TensorRT names them (trt.HardwareCompatibilityLevel).
HARDWARE_LEVELS = ("NONE", "AMPERE_PLUS", "SAME_COMPUTE_CAPABILITY")
RECIPE_FILE = "tensorrt.build.json"
FEEDS_FILE = "tensorrt.feeds.json"
CONFIG_NAME = "tensorrt"  # Triton's custom config name: <model>/configs/tensorrt.pbtxt
EXPORTED_ONNX = "model.onnx"  # the exporter's graph: plans are built from its folded copy and compared with it

# input name -> [min shape, opt shape, max shape], batch dimension included
Profile = dict[str, list[list[int]]]


@dataclass
class Recipe:
    """Build settings of one model's plans; the same for every GPU it is built on."""

    model: str
    onnx: str                      # file in the version directory the plan is built from
    precision: str = "fp16"
    profiles: list[Profile] = field(default_factory=list)
    hardware_compatibility: str = "NONE"
    version_compatible: bool = False
    compute_capabilities: list[str] = field(default_factory=list)
    onnx_fallback: bool = False
    parity_atol: float = 1e-2
    parity_rtol: float = 0.0
    calibration_cache: str | None = None  # int8: file in the version directory

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> "Recipe":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    def digest_fields(self) -> dict:
        """The settings that shape the plan (a change makes existing plans stale)."""
        return {k: getattr(self, k) for k in ("precision", "profiles", "hardware_compatibility",
                                               "version_compatible", "onnx")}


def plan_filename(compute_capability: str) -> str:
    """`model.sm90.plan` for compute capability 9.0 (one plan per architecture, cc_model_filenames)."""
    major, _, minor = compute_capability.partition(".")
    return f"model.sm{int(major)}{int(minor or 0)}.plan"


def recipe_path(model_dir: Path) -> Path:
    return Path(model_dir) / "configs" / RECIPE_FILE


def config_path(model_dir: Path) -> Path:
    return Path(model_dir) / "configs" / f"{CONFIG_NAME}.pbtxt"


def read_recipe(model_dir: Path) -> Recipe | None:
    """The model's recipe, or None when the model has no TensorRT plans."""
    path = recipe_path(model_dir)
    if not path.is_file():
        return None
    return Recipe.from_dict(json.loads(path.read_text()))


def feeds_path(model_dir: Path) -> Path:
    return Path(model_dir) / "configs" / FEEDS_FILE


def feeds_to_json(feeds: list[dict]) -> str:
    """Feed dicts (input name -> numpy array) as JSON: one line per batch, so diffs stay readable."""
    lines = []
    for feed in feeds:
        batch = {name: {"dtype": str(a.dtype), "shape": list(a.shape), "data": a.reshape(-1).tolist()}
                 for name, a in sorted(feed.items())}
        lines.append(json.dumps(batch, sort_keys=True))
    return '{"feeds": [\n' + ",\n".join(lines) + "\n]}\n"


def read_feeds(model_dir: Path) -> list[dict] | None:
    """The parity inputs written beside the recipe, as feed dicts; None when the file is missing."""
    path = feeds_path(model_dir)
    if not path.is_file():
        return None
    import numpy as np

    return [{name: np.asarray(t["data"], dtype=t["dtype"]).reshape(t["shape"]) for name, t in feed.items()}
            for feed in json.loads(path.read_text())["feeds"]]
