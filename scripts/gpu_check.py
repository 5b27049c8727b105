"""GPU check (issue 8): on a machine with a GPU, export, build what its libraries allow, check parity,
and record what ran. Never part of CI.

    PYTHONPATH=.:<dir holding polygraphy> python3 scripts/gpu_check.py --out gpu_check.json

On the lent GPU machine (its own Python with torch, onnx and onnxruntime; polygraphy and
onnx_graphsurgeon carried from .venv, 5 MiB):
    run(command='PYTHONPATH=.:.venv/lib/python3.11/site-packages timeout 500 python3 scripts/gpu_check.py
                 --out $OUT/gpu_check.json', carry=['.venv/lib/python3.11/site-packages/polygraphy',
                 '.venv/lib/python3.11/site-packages/onnx_graphsurgeon'], timeout_s=540)

Each stage is recorded as ran / skipped (why) / failed (error), so a machine without TensorRT still
checks the rest: this host's GPU as hotpath sees it (nvidia-smi name and compute capability), an
ONNX export of the real encoder when its weights are installed (else a small model exported here),
constant folding, the TensorRT build and manifest when TensorRT imports, parity through polygraphy's
Comparator (TensorRT vs ONNX Runtime; PyTorch on CUDA vs ONNX Runtime), and the container's start-up
decision for a plan built for another GPU.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

record: dict = {"stages": {}}


def stage(name):
    def wrap(fn):
        def run(*args):
            t0 = time.perf_counter()
            try:
                result = fn(*args)
                record["stages"][name] = {"status": "ran", **(result or {})}
            except Skip as why:
                record["stages"][name] = {"status": "skipped", "why": str(why)}
            except Exception as exc:  # a GPU check records failures instead of stopping at the first
                record["stages"][name] = {"status": "failed", "error": repr(exc),
                                          "trace": traceback.format_exc()[-2000:]}
            record["stages"][name]["seconds"] = round(time.perf_counter() - t0, 2)
            print(f"[gpu-check] {name}: {record['stages'][name]['status']}", flush=True)
        return run
    return wrap


class Skip(Exception):
    pass


@stage("device")
def device_stage():
    from hotpath.tensorrt import device

    target = device.detect()
    if not target.compute_capability:
        raise Skip("no GPU seen by nvidia-smi")
    return {"target": target.__dict__}


class TinyEncoder:
    """A small transformer-like block (linear, GELU, layer norm, mean pool) with dynamic batch and length."""

    @staticmethod
    def build():
        import torch

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.embed = torch.nn.Embedding(1000, 64)
                self.ff = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 64))
                self.norm = torch.nn.LayerNorm(64)

            def forward(self, ids):
                h = self.norm(self.embed(ids) + self.ff(self.embed(ids)))
                return (torch.nn.functional.normalize(h.mean(dim=1), dim=-1),)

        torch.manual_seed(0)
        return Block().eval()


@stage("export")
def export_stage(work: Path):
    import numpy as np
    import torch

    model = TinyEncoder.build()
    ids = torch.randint(0, 1000, (4, 32))
    path = work / "model.onnx"
    torch.onnx.export(model, (ids,), str(path), input_names=["ids"], output_names=["embedding"], opset_version=17,
                      dynamic_axes={"ids": {0: "batch", 1: "seq"}, "embedding": {0: "batch"}}, dynamo=False)
    record["feeds"] = [{"ids": np.random.default_rng(i).integers(0, 1000, (b, s), dtype=np.int64)}
                       for i, (b, s) in enumerate([(1, 16), (8, 32), (16, 64)])]
    result = {"onnx": str(path), "bytes": path.stat().st_size, "cuda": torch.cuda.is_available(),
              "torch": torch.__version__}
    try:  # the real encoder, where its weights and exporter's libraries are installed
        from hotpath.engines import build_repository

        build_repository(work / "repository", only=["text_encoder"], log=lambda m: print(m, flush=True))
        result["text_encoder"] = "exported"
    except Exception as exc:
        result["text_encoder"] = f"not exported: {exc!r}"[:300]
    return result


@stage("fold_constants")
def fold_stage(work: Path):
    from hotpath.plans import parity
    from hotpath.plans.sanitize import ensure_sanitized

    counts = ensure_sanitized(work / "model.onnx", work / "model.trt.onnx")
    check = parity.compare(parity.onnxrt_runner(work / "model.onnx", "onnx"),
                           parity.onnxrt_runner(work / "model.trt.onnx", "folded"), record["feeds"], 1e-5)
    return {"nodes": counts, "parity": check.as_dict()}


@stage("tensorrt_build")
def build_stage(work: Path):
    from hotpath.tensorrt import builder, device
    from hotpath.tensorrt.recipe import Recipe, plan_filename

    why = builder.unavailable()
    if why:
        raise Skip(why)
    target = device.detect()
    recipe = Recipe(model="tiny", onnx="model.trt.onnx", precision="fp16",
                    profiles=[{"ids": [[1, 16], [8, 32], [16, 64]]}], compute_capabilities=[target.compute_capability])
    job = builder.BuildJob(onnx=work / recipe.onnx, plan=work / plan_filename(target.compute_capability),
                           recipe=recipe, timing_cache=work / "timing.cache")
    seconds = builder.build(job)
    record["plan"] = str(job.plan)
    manifest = builder.record(job, target, seconds)
    return {"manifest": manifest.__dict__, "timing_cache_bytes": job.timing_cache.stat().st_size}


@stage("parity_tensorrt")
def parity_trt_stage(work: Path):
    from hotpath.plans import parity

    if "plan" not in record:
        raise Skip("no plan was built")
    check = parity.compare(parity.onnxrt_runner(work / "model.onnx", "onnxruntime"),
                           parity.trt_runner(Path(record["plan"]), "tensorrt"), record["feeds"], 1e-2)
    return {"parity": check.as_dict()}


@stage("parity_pytorch_cuda")
def parity_torch_stage(work: Path):
    import numpy as np
    import torch
    from polygraphy.backend.pyt import PytRunner
    from polygraphy.common import TensorMetadata

    from hotpath.plans import parity

    if not torch.cuda.is_available():
        raise Skip("torch sees no CUDA device")
    meta = TensorMetadata().add("ids", np.int64, (-1, -1))
    runner = PytRunner(TinyEncoder.build().cuda(), meta, ["embedding"], name="pytorch-cuda")
    check = parity.compare(parity.onnxrt_runner(work / "model.onnx", "onnxruntime"), runner, record["feeds"], 1e-4)
    return {"parity": check.as_dict(), "device": torch.cuda.get_device_name(0)}


@stage("startup_decision")
def startup_stage(work: Path):
    from hotpath.tensorrt import device
    from hotpath.tensorrt.startup import prepare
    from tests import planrepo

    repo = planrepo.make_repository(work / "startup")
    result = prepare(repo, work / "startup" / "cache", device.detect(), "fail", log=lambda m: print(m, flush=True))
    return {"decisions": result.decisions, "problems": result.problems}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".hotpath" / "gpu_check.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        device_stage()
        export_stage(work)
        if record["stages"]["export"]["status"] == "ran":
            fold_stage(work)
            build_stage(work)
            parity_trt_stage(work)
            parity_torch_stage(work)
        startup_stage(work)
    record.pop("feeds", None)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(record, indent=2, default=str))
    print(f"[gpu-check] record: {args.out}")
    return 1 if any(s["status"] == "failed" for s in record["stages"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
