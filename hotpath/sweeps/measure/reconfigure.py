"""Change what a live server runs through explicit model control: read, reload, restore configs."""

from __future__ import annotations

import contextlib
from typing import Callable

import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc

# Re-exported: the perf tools read and reload configs through this module.
from hotpath.server.model_control import load_config, served_config

__all__ = ["load_config", "reconfigured", "served_config"]


@contextlib.contextmanager
def reconfigured(url: str, changes: dict[str, Callable[[mc.ModelConfig], mc.ModelConfig]]):
    """Temporarily reload models with modified configs; restore the originals afterwards."""
    client = grpcclient.InferenceServerClient(url)
    originals = {m: served_config(client, m) for m in changes}
    try:
        for model, change in changes.items():
            config = mc.ModelConfig()
            config.CopyFrom(originals[model])
            load_config(client, model, change(config))
        yield
    finally:
        for model, config in originals.items():
            load_config(client, model, config)
