"""Change what a live server runs through explicit model control: read, reload, restore configs."""

from __future__ import annotations

import contextlib
from typing import Callable

import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.server.admin import admin_headers


def served_config(client: grpcclient.InferenceServerClient, model: str) -> mc.ModelConfig:
    """The config the server runs now (for the local server: the staged substitute)."""
    return json_format.ParseDict(client.get_model_config(model, as_json=True)["config"], mc.ModelConfig(),
                                 ignore_unknown_fields=True)


def load_config(client: grpcclient.InferenceServerClient, model: str, config: mc.ModelConfig) -> None:
    """Reload `model` with `config` (no server restart; needs --model-control-mode=explicit)."""
    client.load_model(model, config=json_format.MessageToJson(config, preserving_proto_field_name=True),
                      headers=admin_headers())


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
