"""(f) for image_classification: decode + classifier in one process, no server."""

from __future__ import annotations

import numpy as np

from hotpath import paths
from hotpath.runtime.images import preprocess
from hotpath.runtime.ort_session import make_session
from hotpath.perf.alternatives.floor import Runner, time_batches
from hotpath.perf.payloads import jpeg_photo


def measure_image_floor(batch_sizes=(1, 4, 8), seconds: float = 3.0, threads: int = 2, log=print) -> list[dict]:
    data = jpeg_photo()
    model = paths.model_repository() / "image_classifier" / "1" / "model.onnx"

    def make_runner(spinning: bool) -> Runner:
        session = make_session(model, threads, 1, spinning)
        return lambda bs: session.run(None, {"PIXELS": np.stack([preprocess(data) for _ in range(bs)])})

    return time_batches(make_runner, batch_sizes, seconds, "images", log)
