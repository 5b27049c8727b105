"""Write tuned knob values back into build/<model>.toml, preserving comments and layout (tomlkit)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomlkit

from hotpath import paths
from hotpath.specs.config_pbtxt import validate
from hotpath.specs.spec import spec_from_dict
from hotpath.tuning.knobs import write_knobs


def write_back(model: str, knobs: dict[str, Any], specs_dir: Path | None = None,
               start: dict[str, Any] | None = None) -> list[str]:
    """Set knob values in the model's spec; returns 'field: old -> new' for each change.

    With `start` (the values tuning began from), only knobs the tuner moved are written: the spec
    is read afresh here, so edits made to it while tuning ran survive unless the tuner moved them."""
    path = Path(specs_dir or paths.model_specs_dir()) / f"{model}.toml"
    doc = tomlkit.parse(path.read_text())
    if start is not None:
        knobs = {k: v for k, v in knobs.items() if start.get(k) != v}
    changes = write_knobs(doc, knobs)
    text = tomlkit.dumps(doc)
    validate(spec_from_dict(tomllib.loads(text), model, path))  # never write a spec that fails to build
    if changes:
        path.write_text(text)
    return changes
