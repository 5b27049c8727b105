"""A 4-bit (W4A16) copy of an HF Llama model directory in the compressed-tensors format vLLM loads on CPU.

Weights of every decoder linear layer: 4-bit, asymmetric, one scale and one integer zero point per group of
GROUP consecutive input weights (round to nearest over the group's min..max, zero included, as llama.cpp's
Q4_1 groups 32 weights); activations stay floating point. Embedding, norms and the tied lm_head stay as they
are. This is the checkpoint llm-compressor writes for its W4A16 asymmetric group scheme (`format:
pack-quantized`: eight 4-bit values per int32 along the input dimension, zero points packed along the output
dimension, values stored offset by +8). vLLM 0.32 runs it on CPU with CPUWNA16 (`cpu_gemm_wna16`, bf16/fp16
activations only), which its CPU wheel builds into the AVX-512 extensions but not into `_C_AVX2`: on an
AVX2-only host it loads and then fails at the first forward. `write_dequantized` writes the same weights
dequantized to float32, so the precision gate can measure what the kernel computes on any host
(perf/reports/text_generation_precision.md).

    python -m hotpath.exporters.llm_int4 SRC_DIR DST_DIR [--dequantized]
"""

from __future__ import annotations

import sys
from pathlib import Path

from hotpath.exporters.llm_int8 import write_checkpoint

BITS = 4
GROUP = 32
QMIN, QMAX = -(1 << (BITS - 1)), (1 << (BITS - 1)) - 1   # signed range; stored +8 as uint4
PACK = 32 // BITS

QUANTIZATION_CONFIG = {
    "quant_method": "compressed-tensors",
    "format": "pack-quantized",
    "quantization_status": "compressed",
    "ignore": ["lm_head"],
    "kv_cache_scheme": None,
    "config_groups": {"group_0": {
        "targets": ["Linear"],
        "weights": {"num_bits": BITS, "type": "int", "symmetric": False, "strategy": "group", "dynamic": False,
                    "group_size": GROUP, "block_structure": None, "actorder": None, "observer": "minmax",
                    "observer_kwargs": {}},
        "input_activations": None,
        "output_activations": None,
    }},
}


def quantize_groups(weight, group: int = GROUP):
    """(q int8 [out, in] in QMIN..QMAX, scale float32 [out, in/group], zero point int8 [out, in/group]):
    asymmetric round to nearest per group of `group` input weights; dequantized: (q - zero_point) * scale."""
    import torch

    w = weight.float()
    out, cols = w.shape
    if cols % group:
        raise ValueError(f"input size {cols} is not a multiple of the group size {group}")
    g = w.reshape(out, cols // group, group)
    lo = g.amin(dim=2).clamp(max=0.0)
    hi = g.amax(dim=2).clamp(min=0.0)
    scale = ((hi - lo) / (QMAX - QMIN)).clamp(min=torch.finfo(torch.float32).tiny)
    zero = (QMIN - torch.round(lo / scale)).clamp(QMIN, QMAX)
    q = (torch.round(g / scale[..., None]) + zero[..., None]).clamp(QMIN, QMAX)
    return q.reshape(out, cols).to(torch.int8), scale, zero.to(torch.int8)


def dequantize(q, scale, zero, group: int = GROUP):
    """float32 [out, in] from quantize_groups' output."""
    out, cols = q.shape
    g = (q.float().reshape(out, cols // group, group) - zero.float()[..., None]) * scale[..., None]
    return g.reshape(out, cols)


def pack_int32(values, dim: int):
    """Eight signed 4-bit values per int32 along `dim` (0 or 1), stored +8, the first in the lowest bits
    (compressed-tensors' pack_to_int32)."""
    import torch

    v = (values.to(torch.int32) - QMIN)
    if dim == 0:
        v = v.t()
    rows, cols = v.shape
    if cols % PACK:
        raise ValueError(f"dimension of {cols} is not a multiple of {PACK}")
    shifts = torch.arange(PACK, dtype=torch.int32) * BITS
    packed = (v.reshape(rows, cols // PACK, PACK) << shifts).sum(dim=2, dtype=torch.int32)
    return (packed.t() if dim == 0 else packed).contiguous()


def compressed(weight, group: int = GROUP) -> dict:
    """The compressed-tensors tensors of one linear weight [out, in], keyed by suffix (replacing `weight`)."""
    import torch

    q, scale, zero = quantize_groups(weight, group)
    return {"weight_packed": pack_int32(q, dim=1), "weight_scale": scale.contiguous(),
            "weight_zero_point": pack_int32(zero, dim=0), "weight_shape": torch.tensor(list(weight.shape))}


def write_w4a16(src: Path, dst: Path) -> int:
    """Write the 4-bit compressed-tensors copy of `src` to `dst`; returns the number of quantized layers."""
    return write_checkpoint(src, dst, compressed, QUANTIZATION_CONFIG)


def write_dequantized(src: Path, dst: Path) -> int:
    """Write `src` with every decoder linear weight replaced by its 4-bit round trip, in the source dtype (a plain
    checkpoint: the W4A16 numerics on hosts without the kernel)."""
    return write_checkpoint(src, dst, lambda w: {"weight": dequantize(*quantize_groups(w)).to(w.dtype)}, None)


if __name__ == "__main__":
    writer = write_dequantized if "--dequantized" in sys.argv[3:] else write_w4a16
    print(f"{writer(Path(sys.argv[1]), Path(sys.argv[2]))} linear layers quantized -> {sys.argv[2]}")
