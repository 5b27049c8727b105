"""An int8 (W8A8) copy of an HF Llama model directory in the compressed-tensors format vLLM loads on CPU.

Weights of every decoder linear layer: int8, symmetric, one scale per output channel (round to nearest);
activations: int8, dynamic, one scale per token (vLLM quantizes them at run time). Embedding, norms and the
tied lm_head stay as they are. This is the checkpoint llm-compressor writes for its W8A8 int8 scheme
(`format: int-quantized`); vLLM's CPU backend runs it with its int8 scaled-mm kernel (any x86 CPU),
where fp8 needs AMX. Measured against fp32 and llama.cpp's Q4_1 in perf/reports/text_generation_precision.md.

    python -m hotpath.exporters.llm_int8 SRC_DIR DST_DIR
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

LINEAR = re.compile(r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight$")
WEIGHTS = "model.safetensors"

QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "int-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel", "dynamic": False,
                    "group_size": None, "block_structure": None, "actorder": None, "observer": "minmax",
                    "observer_kwargs": {}},
        "input_activations": {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token", "dynamic": True,
                              "group_size": None, "block_structure": None, "actorder": None, "observer": None,
                              "observer_kwargs": {}},
        "output_activations": None,
    }},
}


def quantize_channel(weight):
    """(int8 weight, float32 scale [out, 1]): symmetric per output channel, round to nearest."""
    import torch

    w = weight.float()
    scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).clamp(min=torch.finfo(torch.float32).tiny)
    return torch.round(w / scale).clamp(-127, 127).to(torch.int8), scale


def write_checkpoint(src: Path, dst: Path, convert, quantization_config: dict | None) -> int:
    """Copy the model directory `src` to `dst`, each decoder linear weight replaced by `convert(weight)`'s
    tensors (suffix -> tensor, in place of `weight`) and `quantization_config` in config.json; returns the
    number of layers converted."""
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    tensors, quantized = {}, 0
    for name, tensor in load_file(str(src / WEIGHTS)).items():
        if LINEAR.match(name):
            stem = name.removesuffix("weight")
            tensors.update({stem + key: value for key, value in convert(tensor).items()})
            quantized += 1
        else:
            tensors[name] = tensor.contiguous()
    if not quantized:
        raise ValueError(f"no decoder linear layers found in {src / WEIGHTS}")
    save_file(tensors, str(dst / WEIGHTS), metadata={"format": "pt"})
    for f in src.iterdir():
        if f.is_file() and f.name not in (WEIGHTS, "config.json"):
            shutil.copyfile(f, dst / f.name)
    config = json.loads((src / "config.json").read_text())
    if quantization_config:
        config["quantization_config"] = quantization_config
    (dst / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return quantized


def write_w8a8(src: Path, dst: Path) -> int:
    """Write the int8 copy of `src` to `dst`; returns the number of quantized layers."""
    def convert(weight):
        q, scale = quantize_channel(weight)
        return {"weight": q, "weight_scale": scale}

    return write_checkpoint(src, dst, convert, QUANTIZATION_CONFIG)


if __name__ == "__main__":
    print(f"{write_w8a8(Path(sys.argv[1]), Path(sys.argv[2]))} linear layers quantized -> {sys.argv[2]}")
