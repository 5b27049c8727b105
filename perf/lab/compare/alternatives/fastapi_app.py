"""The hand-made alternative: FastAPI + uvicorn + ONNX Runtime, one request = one pipeline call.

Any registered endpoint, with the pipeline hotpath's floor runs (same ONNX files, same tokenizer,
same image preprocessing function). Two handler styles, as teams write them:
  sync   a plain `def` handler; FastAPI runs it in its threadpool, requests overlap on the cores;
  async  an `async def` handler that awaits the pipeline in the threadpool.
It speaks the subset of the KServe v2 HTTP protocol that perf_analyzer needs (metadata, config,
statistics, infer with JSON or binary tensors), so the same perf_analyzer load drives it.
No dynamic batching, as in the FastAPI endpoints teams start with.

    HOTPATH_ALT_ENDPOINT=text_embedding HOTPATH_ALT_HANDLER=async HOTPATH_ORT_THREADS=2 \
        uvicorn --factory perf.lab.compare.alternatives.fastapi_app:create_app --port 8500
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
from fastapi import Depends, FastAPI, Header, HTTPException, Request, Response
from starlette.concurrency import run_in_threadpool
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import deserialize_bytes_tensor, serialize_byte_tensor

HANDLERS = ("sync", "async")


def _datatype(t: int) -> str:
    name = mc.DataType.Name(t).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _tensors(tensors) -> list[dict]:
    return [{"name": t.name, "datatype": _datatype(t.data_type), "shape": [-1, *t.dims]} for t in tensors]


def decode_request(body: bytes, header_length: str | None) -> tuple[dict, np.ndarray]:
    """KServe v2 infer request (JSON, or JSON + binary tensor) -> header and the one input's values."""
    header = json.loads(body[:int(header_length)] if header_length else body)
    (tensor,) = header["inputs"]
    size = tensor.get("parameters", {}).get("binary_data_size")
    if size is not None:
        start = int(header_length)
        return header, deserialize_bytes_tensor(body[start:start + int(size)])
    return header, np.array(tensor["data"], dtype=np.object_).reshape(-1)


def encode_response(model: str, header: dict, outputs: dict[str, np.ndarray]) -> Response:
    """JSON outputs, or binary ones when the request asked (perf_analyzer does)."""
    wanted = {o["name"]: o.get("parameters", {}) for o in header.get("outputs", [])}
    binary_all = header.get("parameters", {}).get("binary_data_output", False)
    meta, blobs = [], []
    for name, array in outputs.items():
        if wanted and name not in wanted:
            continue
        is_bytes = array.dtype == np.object_ or array.dtype.kind in "SU"
        entry = {"name": name, "datatype": "BYTES" if is_bytes else _np_datatype(array), "shape": list(array.shape)}
        if binary_all or wanted.get(name, {}).get("binary_data", False):
            blob = serialize_byte_tensor(array.astype(np.object_)).item() if is_bytes else array.tobytes()
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        else:
            entry["data"] = [str(v) for v in array.reshape(-1)] if is_bytes else array.reshape(-1).tolist()
        meta.append(entry)
    text = json.dumps({"model_name": model, "model_version": "1", "outputs": meta}).encode()
    if not blobs:
        return Response(text, media_type="application/json")
    return Response(b"".join([text, *blobs]), media_type="application/octet-stream",
                    headers={"Inference-Header-Content-Length": str(len(text))})


def _np_datatype(array: np.ndarray) -> str:
    from tritonclient.utils import np_to_triton_dtype

    return np_to_triton_dtype(array.dtype)


def create_app(endpoint: str | None = None, handler: str | None = None, threads: int | None = None) -> FastAPI:
    """The app for one endpoint; settings from arguments or HOTPATH_ALT_ENDPOINT / _HANDLER / HOTPATH_ORT_THREADS."""
    from hotpath import paths, settings
    from hotpath.specs.repository import read_config
    from hotpath.sweeps.registry import get_endpoint

    endpoint = endpoint or settings.alt_endpoint()
    handler = handler or settings.alt_handler()
    threads = threads or settings.ort_threads()
    if handler not in HANDLERS:
        raise ValueError(f"handler must be one of {HANDLERS}, not {handler!r}")
    entry = get_endpoint(endpoint)
    pipeline = entry.make_pipeline(threads, False)
    config = read_config(paths.model_repository() / endpoint)
    stats = {"count": 0, "ns": 0}
    lock = threading.Lock()
    app = FastAPI(title=f"hand-made {endpoint} server ({handler} handler, ORT {threads} threads)")

    def known(model: str) -> None:
        if model != endpoint:
            raise HTTPException(404, f"unknown model {model}")

    def compute(values: np.ndarray) -> dict[str, np.ndarray]:
        t0 = time.perf_counter_ns()
        outputs = pipeline(pipeline.decode(values))
        with lock:
            stats["count"] += 1
            stats["ns"] += time.perf_counter_ns() - t0
        return outputs

    @app.get("/v2/health/ready")
    @app.get("/v2/health/live")
    def ready() -> dict:
        return {}

    @app.get("/v2")
    def server_metadata() -> dict:
        return {"name": "fastapi", "version": "0", "extensions": []}

    @app.get("/v2/models/{model}")
    @app.get("/v2/models/{model}/versions/{version}")
    def model_metadata(model: str, version: str = "1") -> dict:
        known(model)
        return {"name": model, "versions": ["1"], "platform": "fastapi",
                "inputs": _tensors(config.input), "outputs": _tensors(config.output)}

    @app.get("/v2/models/{model}/config")
    @app.get("/v2/models/{model}/versions/{version}/config")
    def model_config(model: str, version: str = "1") -> dict:
        known(model)

        def plain(tensors) -> list[dict]:
            return [{"name": t.name, "data_type": mc.DataType.Name(t.data_type), "dims": list(t.dims)}
                    for t in tensors]
        return {"name": model, "platform": "fastapi", "max_batch_size": config.max_batch_size,
                "input": plain(config.input), "output": plain(config.output)}

    @app.get("/v2/models/stats")
    @app.get("/v2/models/{model}/stats")
    @app.get("/v2/models/{model}/versions/{version}/stats")
    def model_stats(model: str = endpoint, version: str = "1") -> dict:
        n, ns = stats["count"], stats["ns"]
        zero = {"count": 0, "ns": 0}
        return {"model_stats": [{
            "name": endpoint, "version": "1", "last_inference": 0, "inference_count": n, "execution_count": n,
            "inference_stats": {"success": {"count": n, "ns": ns}, "fail": zero, "queue": {"count": n, "ns": 0},
                                "compute_input": {"count": n, "ns": 0}, "compute_infer": {"count": n, "ns": ns},
                                "compute_output": {"count": n, "ns": 0}, "cache_hit": zero, "cache_miss": zero},
            "batch_stats": []}]}

    async def body(request: Request) -> bytes:
        return await request.body()

    if handler == "sync":
        def infer(model: str, raw: bytes = Depends(body),
                  inference_header_content_length: str | None = Header(None)) -> Response:
            known(model)
            header, values = decode_request(raw, inference_header_content_length)
            return encode_response(model, header, compute(values))
    else:
        async def infer(model: str, raw: bytes = Depends(body),
                        inference_header_content_length: str | None = Header(None)) -> Response:
            known(model)
            header, values = decode_request(raw, inference_header_content_length)
            return encode_response(model, header, await run_in_threadpool(compute, values))

    for path in ("/v2/models/{model}/infer", "/v2/models/{model}/versions/{version}/infer"):
        app.add_api_route(path, infer, methods=["POST"])
    return app
