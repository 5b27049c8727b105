"""A liveness probe that tells the truth: one real request through every endpoint of a repository.

Triton 2.51 keeps a model "ready" after its Python stub died while every request to it fails, so
/v2/health/ready cannot be trusted alone. The probe sends a fresh input to each endpoint (a model that
is no ensemble's step, so every step is exercised through its ensemble), unique per call so the
response cache cannot answer for a dead model. Runs in the container (health check, Kubernetes exec
probes) and in hotpath's local watchdog; needs only tritonclient, numpy, Pillow and the configs.
"""

from __future__ import annotations

import io
import itertools
import os
import queue
import time
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from hotpath.errors import HotpathError
from hotpath.specs.repository import Repository

_counter = itertools.count()


class ProbeError(HotpathError):
    """The probe cannot build a request for an endpoint (an input it has no value for)."""


@dataclass(frozen=True)
class ProbeResult:
    endpoint: str
    ok: bool
    latency_ms: float
    status: str = "OK"
    message: str = ""

    @property
    def overloaded(self) -> bool:
        """Refused for load (queue full, shedding, shutting down), not failed: the server answered."""
        return self.status.removeprefix("StatusCode.") in ("UNAVAILABLE", "RESOURCE_EXHAUSTED")

    def line(self) -> str:
        head = f"{self.endpoint}: {'OK' if self.ok else self.status} in {self.latency_ms:.0f} ms"
        return head if self.ok else f"{head}: {self.message}"


def endpoint_configs(repository: Repository) -> list[mc.ModelConfig]:
    """The config of every endpoint of a repository (what a probe request is built from), by name."""
    configs = repository.configs()
    return [configs[e.name] for e in repository.endpoints()]


def _png(seed: int) -> bytes:
    from PIL import Image

    rng = np.random.default_rng(seed)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(out, "PNG")
    return out.getvalue()


def _value(config: mc.ModelConfig, tensor: mc.ModelInput, seed: int):
    """The probe's value for one input, or None to leave an optional input out."""
    # text_generation (Triton's vLLM-backend tensors): its optional text_input, and one token, which proves
    # the whole engine.
    if tensor.data_type == mc.TYPE_STRING and (not tensor.optional or tensor.name == "text_input"):
        if tensor.name == "IMAGE":
            return _png(seed)
        return f"hotpath liveness probe {os.getpid()}-{seed}-{time.time_ns()}".encode()
    if tensor.name == "sampling_parameters":
        return b'{"max_tokens": 1}'
    if tensor.optional:
        return None
    if tensor.data_type in (mc.TYPE_FP16, mc.TYPE_FP32, mc.TYPE_FP64):
        return float(seed)   # unique per call, like the texts: no cached answer for a dead model
    if tensor.data_type in (mc.TYPE_INT8, mc.TYPE_INT16, mc.TYPE_INT32, mc.TYPE_INT64, mc.TYPE_UINT8, mc.TYPE_BOOL):
        return 0             # ids, indices, pixels, flags: 0 is valid where larger values may not be
    raise ProbeError(f"{config.name}: the probe has no value for required input {tensor.name}")


def probe_inputs(config: mc.ModelConfig, seed: int | None = None) -> list[grpcclient.InferInput]:
    """One request's inputs for `config`, unique per call."""
    seed = next(_counter) if seed is None else seed
    inputs = []
    for tensor in config.input:
        value = _value(config, tensor, seed)
        if value is None:
            continue
        dims = [1 if d < 0 else d for d in tensor.dims]
        shape = ([1] if config.max_batch_size > 0 else []) + dims
        dtype = mc.DataType.Name(tensor.data_type)[len("TYPE_"):]
        dtype = "BYTES" if dtype == "STRING" else dtype
        data = np.full(shape, value, dtype=object if dtype == "BYTES" else triton_to_np_dtype(dtype))
        item = grpcclient.InferInput(tensor.name, shape, dtype)
        item.set_data_from_numpy(data)
        inputs.append(item)
    return inputs


def _stream_once(client: grpcclient.InferenceServerClient, config: mc.ModelConfig, inputs, timeout_s: float):
    """A decoupled endpoint: stream one request and wait for its final response (or an error)."""
    responses: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: responses.put((result, error)),
                        stream_timeout=timeout_s)
    try:
        client.async_stream_infer(config.name, inputs, enable_empty_final_response=True)
        deadline = time.monotonic() + timeout_s
        while True:
            result, error = responses.get(timeout=max(0.0, deadline - time.monotonic()))
            if error is not None:
                raise error
            params = result.get_response().parameters
            if params.get("triton_final_response") and params["triton_final_response"].bool_param:
                return
    finally:
        client.stop_stream(cancel_requests=True)


def probe(url: str, config: mc.ModelConfig, timeout_s: float = 5.0) -> ProbeResult:
    """Send one real request to one endpoint; OK only if it is answered without error in time."""
    started = time.perf_counter()
    try:
        inputs = probe_inputs(config)
        with grpcclient.InferenceServerClient(url) as client:
            if config.model_transaction_policy.decoupled:
                _stream_once(client, config, inputs, timeout_s)
            else:
                client.infer(config.name, inputs, client_timeout=timeout_s)
        return ProbeResult(config.name, True, (time.perf_counter() - started) * 1e3)
    except InferenceServerException as exc:
        status, message = str(exc.status() or "ERROR"), exc.message() or str(exc)
    except queue.Empty:
        status, message = "DEADLINE_EXCEEDED", f"no final response within {timeout_s:.1f}s"
    except ProbeError as exc:
        status, message = "PROBE_ERROR", str(exc)
    return ProbeResult(config.name, False, (time.perf_counter() - started) * 1e3, status, message)


def server_live(url: str, timeout_s: float = 5.0) -> bool:
    """Triton's own liveness (the process answers gRPC), without a request to any model."""
    try:
        with grpcclient.InferenceServerClient(url) as client:
            return client.is_server_live(client_timeout=timeout_s)
    except InferenceServerException:
        return False


def probe_all(url: str, configs: list[mc.ModelConfig], timeout_s: float = 5.0) -> list[ProbeResult]:
    """Probe every endpoint, one after another."""
    return [probe(url, config, timeout_s) for config in configs]
