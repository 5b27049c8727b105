"""Helpers for Python-backend models: read what Triton passes to `initialize(args)`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def model_config(args: dict[str, Any]) -> dict[str, Any]:
    """The model's config as the JSON dict Triton hands to Python models."""
    return json.loads(args["model_config"])


def parameters(args: dict[str, Any]) -> dict[str, str]:
    """The config's `parameters` as plain key -> string."""
    return {k: v["string_value"] for k, v in model_config(args).get("parameters", {}).items()}


def version_dir(args: dict[str, Any]) -> Path:
    """The model version directory holding the model's files."""
    return Path(args["model_repository"]) / str(args["model_version"])
