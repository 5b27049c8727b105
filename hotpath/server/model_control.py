"""Explicit model control on a live server: read the config it runs, (re)load a model with a config."""

from __future__ import annotations

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

