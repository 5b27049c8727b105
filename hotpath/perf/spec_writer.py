"""Write tuned knob values back into build/<model>.toml, preserving comments and layout (tomlkit)."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomlkit

from hotpath import paths
from hotpath.config import validate
from hotpath.spec import spec_from_dict


def write_back(model: str, knobs: dict[str, Any], specs_dir: Path | None = None) -> list[str]:
    """Set knob values in the model's spec; returns 'field: old -> new' for each change."""
    path = Path(specs_dir or paths.model_specs_dir()) / f"{model}.toml"
    doc = tomlkit.parse(path.read_text())
    changes = []

    def put(table, key: str, value: Any, label: str) -> None:
        old = table.get(key)
        old_plain = list(old) if isinstance(old, list) else old
        if old_plain != value:
            table[key] = value
            changes.append(f"{label}: {old_plain} -> {value}")

    for name, value in knobs.items():
        if name == "max_queue_delay_microseconds":
            put(doc.setdefault("dynamic_batching", tomlkit.table()), name, int(value),
                f"dynamic_batching.{name}")
        elif name == "preferred_batch_size":
            db = doc.setdefault("dynamic_batching", tomlkit.table())
            if value:
                put(db, name, [int(v) for v in value], f"dynamic_batching.{name}")
            elif name in db:
                changes.append(f"dynamic_batching.{name}: {list(db[name])} -> (none)")
                del db[name]
        elif name == "instance_count":
            put(doc["instance_group"][0], "count", int(value), "instance_group[0].count")
        elif name == "intra_op_thread_count":
            put(doc.setdefault("parameters", tomlkit.table()), name, int(value), f"parameters.{name}")
        else:
            raise KeyError(f"unknown knob {name}")
    text = tomlkit.dumps(doc)
    validate(spec_from_dict(tomllib.loads(text), model, path))  # never write a spec that fails to build
    if changes:
        path.write_text(text)
    return changes
