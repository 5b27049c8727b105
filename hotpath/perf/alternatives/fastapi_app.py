"""(c) The hand-made alternative: FastAPI + uvicorn + ONNX Runtime, one request = one model call.

It speaks the subset of the KServe v2 HTTP protocol that perf_analyzer needs (metadata, config,
statistics, infer with JSON or binary tensor data), so the same perf_analyzer load drives it.
No dynamic batching, as in the FastAPI endpoints teams start with.

    uvicorn hotpath.perf.alternatives.fastapi_app:app --port 8500
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
from fastapi import FastAPI, HTTPException, Request, Response
from tritonclient.utils import deserialize_bytes_tensor

from hotpath.perf.alternatives.text_pipeline import TextPipeline

MODEL = "text_embedding"
app = FastAPI(title="hand-made text embedding server")
_pipeline: TextPipeline | None = None
_lock = threading.Lock()
_stats = {"count": 0, "ns": 0}


def pipeline() -> TextPipeline:
    global _pipeline
    with _lock:
        if _pipeline is None:
            _pipeline = TextPipeline()
    return _pipeline


@app.on_event("startup")
def _load() -> None:
    pipeline()


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
    _known(model)
    return {"name": model, "versions": ["1"], "platform": "fastapi",
            "inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}],
            "outputs": [{"name": "EMBEDDING", "datatype": "FP32", "shape": [-1, 384]}]}


@app.get("/v2/models/{model}/config")
@app.get("/v2/models/{model}/versions/{version}/config")
def model_config(model: str, version: str = "1") -> dict:
    _known(model)
    return {"name": model, "platform": "fastapi", "max_batch_size": 32,
            "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
            "output": [{"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": [384]}]}


@app.get("/v2/models/stats")
@app.get("/v2/models/{model}/stats")
@app.get("/v2/models/{model}/versions/{version}/stats")
def model_stats(model: str = MODEL, version: str = "1") -> dict:
    n, ns = _stats["count"], _stats["ns"]
    zero = {"count": 0, "ns": 0}
    return {"model_stats": [{
        "name": MODEL, "version": "1", "last_inference": 0, "inference_count": n, "execution_count": n,
        "inference_stats": {"success": {"count": n, "ns": ns}, "fail": zero, "queue": {"count": n, "ns": 0},
                            "compute_input": {"count": n, "ns": 0}, "compute_infer": {"count": n, "ns": ns},
                            "compute_output": {"count": n, "ns": 0}, "cache_hit": zero, "cache_miss": zero},
        "batch_stats": []}]}


def _known(model: str) -> None:
    if model != MODEL:
        raise HTTPException(404, f"unknown model {model}")


@app.post("/v2/models/{model}/infer")
@app.post("/v2/models/{model}/versions/{version}/infer")
async def infer(model: str, request: Request, version: str = "1") -> Response:
    _known(model)
    body = await request.body()
    header_len = request.headers.get("inference-header-content-length")
    header = json.loads(body[:int(header_len)] if header_len else body)
    (tensor,) = header["inputs"]
    size = tensor.get("parameters", {}).get("binary_data_size")
    if size is not None:
        raw = body[int(header_len):int(header_len) + int(size)]
        texts = [b.decode("utf-8") for b in deserialize_bytes_tensor(raw)]
    else:
        texts = [str(t) for t in np.asarray(tensor["data"]).reshape(-1)]
    t0 = time.perf_counter_ns()
    vectors = pipeline()(texts)  # synchronous: the event loop waits, as in most hand-made servers
    _stats["count"] += 1
    _stats["ns"] += time.perf_counter_ns() - t0
    result = {"model_name": model, "model_version": "1", "outputs": [
        {"name": "EMBEDDING", "datatype": "FP32", "shape": list(vectors.shape), "data": vectors.reshape(-1).tolist()}]}
    return Response(json.dumps(result), media_type="application/json")
