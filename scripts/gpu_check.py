"""GPU check: this host's GPU as hotpath sees it, and the real encoder in FP16 on it. Never part of CI.

Prints one JSON object (also written to --out) with four stages, each ran / skipped (why) / failed:
- device: GPU name and compute capability from hotpath.tensorrt.device (nvidia-smi), beside torch's view;
- compatibility: hotpath.tensorrt.compat's verdicts for this GPU on the repository's plan recipes
  (configs/tensorrt.build.json) and any plan manifests in its version directories;
- parity_fp16_cuda: all-MiniLM-L6-v2 (text_encoder) in FP16 on CUDA against FP32 ONNX Runtime on CPU;
- latency_cuda: that encoder at batch 1 and 8 (the profile's opt length), eager and replayed as a CUDA
  graph (torch.cuda.CUDAGraph).
Without a GPU the GPU stages are skipped, the JSON says so ("gpu": false, "skipped_gpu_stages") and it
exits 0; a failed stage exits 1.

Design, for the lent GPU machine (Python 3.12, torch with CUDA, onnx, onnxruntime for CPU; no TensorRT,
tritonclient, transformers, safetensors or network; at most 64 MiB carried): hotpath's own modules used
here need only the standard library. The encoder is written out below in plain torch (6-layer BERT,
masked mean pooling, L2 normalization: what model.onnx computes). Its weights travel in FP16 (43 MiB,
torch.save). The reference, FP32 ONNX Runtime on CPU of model_repository/text_encoder/1/model.onnx
(86 MiB in FP32: too big to carry), is computed by --prepare on the CPU host, which also checks this
torch code in FP32 against it (max abs diff <= 1e-4, else --prepare fails), so a difference measured
on the GPU is FP16 on CUDA, not the port.

Carried files, .hotpath/gpu_check/minilm_fp16.pt and .hotpath/gpu_check/reference.npz (43 MiB in all),
prepared on the CPU host after `make engines` (the dev venv: tokenizers, safetensors, onnxruntime; 15 s):
    .venv/bin/python scripts/gpu_check.py --prepare
On the GPU machine:
    run(command='timeout 280 python3 scripts/gpu_check.py --out $OUT/gpu_check.json',
        carry=['.hotpath/gpu_check'], timeout_s=300)
`--torch-device cpu` runs the parity and eager latency stages on a CPU host (to try them; no graphs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATA_DIR = ROOT / ".hotpath" / "gpu_check"
WEIGHTS, REFERENCE = "minilm_fp16.pt", "reference.npz"
MODEL = "text_encoder"
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
IMPLEMENTATION_ATOL = 1e-4  # the torch port in FP32 vs ONNX Runtime, checked by --prepare
GPU_STAGES = ("device", "compatibility", "parity_fp16_cuda", "latency_cuda")

record: dict = {"stages": {}}


class Skip(Exception):
    pass


def log(message: str) -> None:
    print(f"[gpu-check] {message}", file=sys.stderr, flush=True)


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
            log(f"{name}: {record['stages'][name]['status']}")
            return record["stages"][name]
        return run
    return wrap


# --- the encoder in plain torch ------------------------------------------------------------------

def minilm(w: dict, input_ids, attention_mask, token_type_ids, heads: int = 12, eps: float = 1e-12):
    """all-MiniLM-L6-v2 as model.onnx computes it: BERT, masked mean pooling, L2 normalization.

    `w`: the BertModel state dict (HF names) on one device and dtype; pooling runs in FP32.
    """
    import torch
    import torch.nn.functional as F

    b, n = input_ids.shape
    h = (w["embeddings.word_embeddings.weight"][input_ids]
         + w["embeddings.position_embeddings.weight"][torch.arange(n, device=input_ids.device)][None]
         + w["embeddings.token_type_embeddings.weight"][token_type_ids])
    width = h.shape[-1]

    def norm(x, prefix):
        return F.layer_norm(x, (width,), w[prefix + ".weight"], w[prefix + ".bias"], eps)

    h = norm(h, "embeddings.LayerNorm")
    keep = attention_mask.bool()[:, None, None, :]  # attend to real tokens only
    layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("encoder.layer."))
    for i in range(layers):
        p = f"encoder.layer.{i}."

        def lin(x, name, p=p):
            return F.linear(x, w[p + name + ".weight"], w[p + name + ".bias"])

        q, k, v = (lin(h, f"attention.self.{t}").view(b, n, heads, width // heads).transpose(1, 2)
                   for t in ("query", "key", "value"))
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=keep).transpose(1, 2).reshape(b, n, width)
        h = norm(h + lin(attn, "attention.output.dense"), p + "attention.output.LayerNorm")
        h = norm(h + lin(F.gelu(lin(h, "intermediate.dense")), "output.dense"), p + "output.LayerNorm")
    mask = attention_mask.unsqueeze(-1).to(torch.float32)
    pooled = (h.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
    return F.normalize(pooled, p=2.0, dim=1)


def load_weights(path: Path, device: str, dtype):
    import torch

    return {k: v.to(device=device, dtype=dtype) for k, v in torch.load(path, weights_only=True).items()}


def load_reference(path: Path) -> list[dict]:
    """[{input_ids, attention_mask, token_type_ids, embedding}, ...] as numpy arrays, one per batch."""
    import numpy as np

    with np.load(path) as z:
        count = int(z["batches"])
        return [{name: z[f"{i}/{name}"] for name in (*INPUTS, "embedding")} for i in range(count)]


def _diffs(got, want) -> tuple[float, float]:
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    return float(np.abs(got - want).max()), float(cos.min())


# --- stages --------------------------------------------------------------------------------------

@stage("device")
def device_stage():
    from hotpath.tensorrt import device

    target = device.detect()
    record["target"] = target
    out = {"gpu_name": target.gpu_name, "compute_capability": target.compute_capability,
           "tensorrt_version": target.tensorrt_version or None, "detected_by": "hotpath.tensorrt.device (nvidia-smi)"}
    try:
        import torch

        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability(0)
            out["torch"] = {"name": torch.cuda.get_device_name(0), "compute_capability": f"{major}.{minor}",
                            "torch": torch.__version__, "cuda": torch.version.cuda}
            out["agrees_with_torch"] = out["torch"]["compute_capability"] == target.compute_capability
    except ImportError:
        out["torch"] = None
    if not target.compute_capability:
        seen = out.get("torch")
        raise Skip("no GPU seen by nvidia-smi" + (f" (torch sees {seen['name']}: is nvidia-smi on PATH?)" if seen
                                                  else "; torch sees no CUDA device either"))
    return out


@stage("compatibility")
def compatibility_stage():
    from hotpath.tensorrt.compat import hardware_verdict, judge
    from hotpath.tensorrt.inventory import plan_status, version_dirs
    from hotpath.tensorrt.manifest import Manifest
    from hotpath.tensorrt.recipe import plan_filename, read_recipe

    target = record.get("target")
    if target is None or not target.compute_capability:
        raise Skip("no GPU")
    models = {}
    for model_dir in sorted(p for p in (ROOT / "model_repository").iterdir() if p.is_dir()):
        recipe = read_recipe(model_dir)
        if recipe is None:
            continue
        listed = {}
        for cc in recipe.compute_capabilities:
            # A plan this recipe would build on that GPU, judged for this one.
            would_be = Manifest(model=recipe.model, plan=plan_filename(cc), plan_sha256="", onnx_sha256="",
                                gpu_name="listed in the recipe", compute_capability=cc,
                                tensorrt_version=target.tensorrt_version,
                                precision=recipe.precision, hardware_compatibility=recipe.hardware_compatibility,
                                version_compatible=recipe.version_compatible)
            hw, full = hardware_verdict(would_be, target), judge(would_be, target)
            listed[would_be.plan] = {"hardware": {"ok": hw.ok, "reason": hw.reason},
                                     "with_version": {"ok": full.ok, "reason": full.reason}}
        models[model_dir.name] = {
            "this_gpu_listed": target.compute_capability in recipe.compute_capabilities,
            "plan_for_this_gpu": plan_filename(target.compute_capability),
            "listed_plans": listed, "onnx_fallback": recipe.onnx_fallback,
            # Built plans only (manifests); version directories hold build outputs, absent from a checkout.
            "built": {v.name: plan_status(model_dir, v, recipe, target).line() for v in version_dirs(model_dir)}}
    return {"tensorrt_version": target.tensorrt_version or "none here: version verdicts say 'unknown'",
            "models": models}


def _torch_device(requested: str) -> str:
    try:
        import torch
    except ImportError:
        raise Skip("no torch") from None
    if requested == "cuda" and not torch.cuda.is_available():
        raise Skip("torch sees no CUDA device")
    return requested


def _carried(data_dir: Path) -> tuple[Path, Path]:
    weights, reference = data_dir / WEIGHTS, data_dir / REFERENCE
    missing = [p.name for p in (weights, reference) if not p.is_file()]
    if missing:
        raise FileNotFoundError(f"{', '.join(missing)} missing in {data_dir}: run `.venv/bin/python "
                                f"scripts/gpu_check.py --prepare` on the CPU host and carry .hotpath/gpu_check")
    return weights, reference


def _atol() -> float:
    from hotpath.tensorrt.recipe import read_recipe

    recipe = read_recipe(ROOT / "model_repository" / MODEL)
    return recipe.parity_atol if recipe else 1e-2


@stage("parity_fp16_cuda")
def parity_stage(data_dir: Path, requested: str):
    dev = _torch_device(requested)
    import torch

    weights_path, reference_path = _carried(data_dir)
    reference = load_reference(reference_path)
    atol = _atol()
    out = {"device": torch.cuda.get_device_name(0) if dev == "cuda" else dev, "atol": atol, "batches": []}
    meta = json.loads((data_dir / "reference.json").read_text()) if (data_dir / "reference.json").is_file() else {}
    out["reference"] = meta.get("reference", "FP32 ONNX Runtime on CPU (scripts/gpu_check.py --prepare)")
    for dtype, key in ((torch.float16, "fp16"), (torch.float32, "fp32_with_fp16_weights")):
        w = load_weights(weights_path, dev, dtype)
        worst, lowest = 0.0, 1.0
        for batch in reference:
            feeds = [torch.from_numpy(batch[n]).to(dev) for n in INPUTS]
            with torch.inference_mode():
                got = minilm(w, *feeds).cpu().numpy()
            diff, cos = _diffs(got, batch["embedding"])
            worst, lowest = max(worst, diff), min(lowest, cos)
            if key == "fp16":
                out["batches"].append({"shape": list(batch["input_ids"].shape), "max_abs_diff": diff,
                                       "min_cosine": cos})
        out[key] = {"max_abs_diff": worst, "min_cosine": lowest}
        del w
    out["ok"] = out["fp16"]["max_abs_diff"] <= atol
    if not out["ok"]:
        raise AssertionError(f"FP16 on {dev} differs from FP32 ONNX Runtime by {out['fp16']['max_abs_diff']:.2e} "
                             f"> {atol:g}: {json.dumps(out)}")
    return out


def _timed(fn, iterations: int, sync) -> dict:
    samples = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append((time.perf_counter() - t0) * 1e3)
    samples.sort()
    return {"p50_ms": round(statistics.median(samples), 4), "p90_ms": round(samples[int(0.9 * len(samples))], 4),
            "mean_ms": round(statistics.fmean(samples), 4), "iterations": iterations}


@stage("latency_cuda")
def latency_stage(data_dir: Path, requested: str, iterations: int):
    dev = _torch_device(requested)
    import torch

    from hotpath.tensorrt.recipe import read_recipe

    weights_path, _ = _carried(data_dir)
    w = load_weights(weights_path, dev, torch.float16)
    recipe = read_recipe(ROOT / "model_repository" / MODEL)
    length = recipe.profiles[0]["input_ids"][1][1] if recipe else 32  # the profile's opt length
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    out = {"sequence_length": length, "dtype": "fp16", "batches": {}}
    gen = torch.Generator().manual_seed(0)
    for batch in (1, 8):
        static = [torch.randint(1000, 30000, (batch, length), generator=gen).to(dev),
                  torch.ones(batch, length, dtype=torch.int64, device=dev),
                  torch.zeros(batch, length, dtype=torch.int64, device=dev)]
        with torch.inference_mode():
            for _ in range(10):
                eager_out = minilm(w, *static)
            sync()
            result = {"eager": _timed(lambda s=static: minilm(w, *s), iterations, sync)}
            if dev == "cuda":
                # Capture after warm-up on a side stream (PyTorch's recipe); replay reuses the static inputs.
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(3):
                        minilm(w, *static)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    graph_out = minilm(w, *static)
                graph.replay()
                sync()
                result["graph_vs_eager_max_abs_diff"] = float((graph_out - eager_out).abs().max())
                result["cuda_graph"] = _timed(graph.replay, iterations, sync)
                result["speedup_p50"] = round(result["eager"]["p50_ms"] / result["cuda_graph"]["p50_ms"], 2)
        out["batches"][str(batch)] = result
    return out


# --- --prepare (CPU host) ------------------------------------------------------------------------

def _reference_batches() -> list[list[str]]:
    texts = [e["TEXT"][0] for e in json.loads((ROOT / "perf" / "data" / "short_texts.json").read_text())["data"]]
    long = " ".join(["long input that will be truncated at the model's maximum sequence length"] * 40)
    varied = ["hello world", "Низкая задержка важнее средней.", "低延迟推理服务器", "emoji 🚀🔥 and punctuation?!",
              "", long, "A man is playing a guitar on a stage in front of a large crowd."]
    return [["hello world"], texts[:8], varied, texts[8:24]]


def prepare(data_dir: Path) -> dict:
    """Write the carried files: FP16 weights, tokenized inputs and FP32 ONNX Runtime embeddings."""
    import numpy as np
    import onnxruntime as ort
    import torch
    from safetensors.torch import load_file

    from hotpath.exporters.sentence_encoder import minilm_dir, minilm_tokenizer, tokenizer_recipe
    from hotpath.runtime.text import encode
    from hotpath.tensorrt.manifest import sha256

    onnx_path = ROOT / "model_repository" / MODEL / "1" / "model.onnx"
    if not onnx_path.is_file():
        raise SystemExit(f"error: {onnx_path} is missing: run `make engines` first")
    weights = {k: v for k, v in load_file(str(minilm_dir() / "model.safetensors")).items()
               if not k.startswith("pooler.") and k != "embeddings.position_ids"}  # unused by the encoder
    tok = minilm_tokenizer(tokenizer_recipe("tokenizer"))  # as the tokenizer step feeding text_encoder
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    arrays, worst = {}, {"fp32": 0.0, "fp32_with_fp16_weights": 0.0}
    fp16_as_fp32 = {k: v.half().float() for k, v in weights.items()}
    for i, texts in enumerate(_reference_batches()):
        feeds = encode(tok, texts)
        ref = session.run(None, feeds)[0]
        for name in INPUTS:
            arrays[f"{i}/{name}"] = feeds[name]
        arrays[f"{i}/embedding"] = ref
        with torch.inference_mode():
            for key, w in (("fp32", weights), ("fp32_with_fp16_weights", fp16_as_fp32)):
                got = minilm(w, *(torch.from_numpy(feeds[n]) for n in INPUTS)).numpy()
                worst[key] = max(worst[key], _diffs(got, ref)[0])
    if not worst["fp32"] <= IMPLEMENTATION_ATOL:
        raise SystemExit(f"error: the torch port differs from {onnx_path.name} by {worst['fp32']:.2e} "
                         f"> {IMPLEMENTATION_ATOL:g} in FP32 on CPU")
    data_dir.mkdir(parents=True, exist_ok=True)
    torch.save({k: v.half() for k, v in weights.items()}, data_dir / WEIGHTS)
    np.savez(data_dir / REFERENCE, batches=np.array(len(_reference_batches())), **arrays)
    meta = {"reference": f"FP32 ONNX Runtime {ort.__version__} on CPU, {onnx_path.relative_to(ROOT)} "
                         f"(sha256 {sha256(onnx_path)[:16]})",
            "torch_port_fp32_cpu_max_abs_diff": worst["fp32"],
            "torch_port_fp32_cpu_with_fp16_weights_max_abs_diff": worst["fp32_with_fp16_weights"],
            "shapes": [list(arrays[f"{i}/input_ids"].shape) for i in range(len(_reference_batches()))],
            "mib": round(sum(p.stat().st_size for p in (data_dir / WEIGHTS, data_dir / REFERENCE)) / 2**20, 1)}
    (data_dir / "reference.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".hotpath" / "gpu_check.json"))
    parser.add_argument("--data-dir", default=str(DATA_DIR), help="the carried files (default .hotpath/gpu_check)")
    parser.add_argument("--prepare", action="store_true", help="write the carried files (CPU host, dev venv)")
    parser.add_argument("--torch-device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--iterations", type=int, default=200)
    args = parser.parse_args()
    data_dir = Path(args.data_dir)
    if args.prepare:
        print(json.dumps(prepare(data_dir), indent=2))
        return 0
    t0 = time.perf_counter()
    device_stage()
    compatibility_stage()
    parity_stage(data_dir, args.torch_device)
    latency_stage(data_dir, args.torch_device, args.iterations)
    record.pop("target", None)
    skipped = [n for n in GPU_STAGES if record["stages"][n]["status"] == "skipped"]
    record["gpu"] = "device" not in skipped
    record["skipped_gpu_stages"] = skipped
    if skipped:
        record["note"] = "GPU stages skipped: " + "; ".join(f"{n} ({record['stages'][n]['why']})" for n in skipped)
    record["seconds"] = round(time.perf_counter() - t0, 1)
    text = json.dumps(record, indent=2, default=str)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text + "\n")
    print(text)
    return 1 if any(s["status"] == "failed" for s in record["stages"].values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
