"""A small stand-in for Triton's `triton_python_backend_utils`, enough to run python_backends/*/model.py
in the test process: tensors, requests, responses, errors, a logger. Only what the adapters use; the
real module comes with tritonserver's Python backend (backends/python/triton_python_backend_utils.py),
whose signatures these follow.

`load_adapter(name, monkeypatch)` imports python_backends/<name>/model.py (the source `hotpath build`
copies into model_repository/<name>/<version>/) with this module as `triton_python_backend_utils`;
`initialize_args(config, version_dir)` is the `args` dict Triton hands to initialize().
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
from google.protobuf import json_format

from hotpath import paths


class TritonError(Exception):
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL):
        super().__init__(message)
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    pass


class Tensor:
    def __init__(self, name: str, array: np.ndarray):
        if not isinstance(array, np.ndarray):
            raise TritonModelException(f"Tensor {name}: expected a numpy array, got {type(array).__name__}")
        self._name, self._array = name, array

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray:
        return self._array


class InferenceRequest:
    """What Triton passes to execute(): the request's input tensors by name (`inputs` as numpy)."""

    def __init__(self, parameters: str = "{}", **inputs: np.ndarray):
        self._inputs = [Tensor(name, array) for name, array in inputs.items()]
        self._parameters = parameters   # Triton's JSON text: the gateway's headers arrive here

    def inputs(self) -> list[Tensor]:
        return list(self._inputs)

    def parameters(self) -> str:
        return self._parameters


class InferenceResponse:
    def __init__(self, output_tensors: list[Tensor] | None = None, error: TritonError | None = None):
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(f"error must be a TritonError, got {type(error).__name__}")
        self._outputs, self._error = list(output_tensors or []), error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


def get_input_tensor_by_name(request: InferenceRequest, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors() if t.name() == name), None)


class Metric:
    """A custom metric's series; `value` is what Triton would publish."""

    def __init__(self, labels: dict[str, str]):
        self.labels, self.value = dict(labels), 0.0

    def increment(self, amount: float) -> None:
        if amount < 0:
            raise TritonModelException("a counter cannot be decremented")
        self.value += amount

    def set(self, value: float) -> None:
        self.value = value

    def observe(self, value: float) -> None:
        self.value += value


class MetricFamily:
    """python_backend's custom metric family; `series` holds every Metric made from it."""
    COUNTER, GAUGE, HISTOGRAM = range(3)
    families: dict[str, "MetricFamily"] = {}   # by name, across the test process (tests clear it)

    def __init__(self, name: str, description: str, kind: int):
        self.name, self.description, self.kind = name, description, kind
        self.series: list[Metric] = []
        MetricFamily.families[name] = self

    def Metric(self, labels: dict[str, str] | None = None, **kwargs) -> Metric:  # noqa: N802 (Triton's name)
        metric = Metric(labels or {})
        self.series.append(metric)
        return metric


class Logger:
    @staticmethod
    def log_info(message: str) -> None:
        print(message, file=sys.stderr)

    log_warn = log_error = log_verbose = log_info


# --------------------------------------------------------------------------------------------- loading

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1   # Triton's value


def stand_in_module() -> types.ModuleType:
    """This module under the name the adapters import."""
    module = types.ModuleType("triton_python_backend_utils")
    module.TRITONSERVER_RESPONSE_COMPLETE_FINAL = TRITONSERVER_RESPONSE_COMPLETE_FINAL
    for name in ("TritonError", "TritonModelException", "Tensor", "InferenceRequest", "InferenceResponse",
                 "get_input_tensor_by_name", "get_output_tensor_by_name", "Logger", "MetricFamily"):
        setattr(module, name, globals()[name])
    return module


def load_adapter(name: str, monkeypatch):
    """python_backends/<name>/model.py's TritonPythonModel, imported against the stand-in; exit_with_server
    (a watcher that ends the process with its parent, tritonserver) is a no-op in the test process."""
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", stand_in_module())
    path = paths.python_backends_dir() / name / "model.py"
    spec = importlib.util.spec_from_file_location(f"adapter_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "exit_with_server", lambda *a, **k: None, raising=False)
    return module.TritonPythonModel


def initialize_args(config, version_dir: Path) -> dict[str, str]:
    """Triton's initialize() args for a model_config_pb2.ModelConfig served from `version_dir`."""
    return {"model_config": json_format.MessageToJson(config, preserving_proto_field_name=True),
            "model_name": config.name, "model_instance_name": f"{config.name}_0_0",
            "model_instance_kind": "CPU", "model_instance_device_id": "0",
            "model_repository": str(version_dir.parent), "model_version": version_dir.name}


def outputs(response: InferenceResponse) -> dict[str, np.ndarray]:
    """A successful response's tensors by name (fails the test on an error response)."""
    assert not response.has_error(), response.error().message()
    return {t.name(): t.as_numpy() for t in response.output_tensors()}


def error_of(response: InferenceResponse) -> tuple[int, str]:
    """An error response's code and message (fails the test on a success)."""
    assert response.has_error(), "expected an error response"
    return response.error().code(), response.error().message()


def bytes_column(*texts: str | bytes) -> np.ndarray:
    """A BYTES [n, 1] input as Triton hands it to Python models."""
    return np.array([[t.encode() if isinstance(t, str) else t] for t in texts], dtype=np.object_)
