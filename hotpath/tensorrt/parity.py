"""Two runners on the same inputs through polygraphy's Comparator, with a tolerance per precision.

The build compares TensorRT (TrtRunner on the plan) with ONNX Runtime (OnnxrtRunner on the
exported model); the constant-folded ONNX is compared with its source the same way on any host;
the container compares a plan it rebuilt before Triton loads it (hotpath.tensorrt.startup).
In the core, below hotpath.tensorrt.plans, because the container runs it: numpy and polygraphy are
imported when a comparison runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class Parity:
    ok: bool
    max_abs_diff: float
    atol: float
    rtol: float
    iterations: int

    def as_dict(self) -> dict:
        return {"ok": self.ok, "max_abs_diff": self.max_abs_diff, "atol": self.atol, "rtol": self.rtol,
                "iterations": self.iterations}


def onnxrt_runner(path: Path, name: str):
    from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

    return OnnxrtRunner(SessionFromOnnx(str(path), providers=["cpu"]), name=name)


def trt_runner(plan: Path, name: str):
    """A runner over a plan file (needs TensorRT and a GPU when it is activated)."""
    from polygraphy.backend.common import BytesFromPath
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    return TrtRunner(EngineFromBytes(BytesFromPath(str(plan))), name=name)


def compare(reference, candidate, feeds: list[dict], atol: float, rtol: float = 0.0) -> Parity:
    """Run both runners on every feed dict; ok when every output of every iteration is within tolerance."""
    import numpy as np
    from polygraphy.comparator import Comparator, SimpleCompareFunc
    from polygraphy.logger import G_LOGGER

    # Polygraphy reports every output of every iteration; the build prints one summary line instead.
    with G_LOGGER.verbosity(G_LOGGER.ERROR):
        results = Comparator.run([reference, candidate], data_loader=feeds)
        accuracy = Comparator.compare_accuracy(results, compare_func=SimpleCompareFunc(atol=atol, rtol=rtol))
    (_, ref_iters), (_, cand_iters) = list(results.items())[:2]
    worst = 0.0
    for ref, cand in zip(ref_iters, cand_iters):
        for name, value in ref.items():
            diff = np.abs(np.asarray(value, dtype=np.float64) - np.asarray(cand[name], dtype=np.float64))
            worst = max(worst, float(diff.max()) if diff.size else 0.0)
    return Parity(bool(accuracy), worst, atol, rtol, len(feeds))
