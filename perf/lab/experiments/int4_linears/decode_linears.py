"""Would 4-bit weights make a vLLM decode step faster on this CPU? The linear layers of one SmolLM2-135M decode step,
fp32 vs 4-bit, at 1 and 8 sequences (perf/reports/text_generation.md, section "4-bit weights").

vLLM 0.32's CPU 4-bit weight-only kernel (CPUWNA16, `cpu_gemm_wna16`) is not in its AVX2 build, so a 4-bit
checkpoint cannot run a vLLM step here (hotpath.exporters.llm_int4). This measures what such a kernel would change,
layer by layer, on the same weights' shapes: the 30 decoder layers' linears (qkv 576->960, o 576->576, gate_up
576->3072, down 1536->576) as separate, cache-cold weights (one step streams them all, as the model does), plus
the tied lm_head (576->49152, fp32 in both: llm_int4 keeps it), timed per step:

  fp32       vLLM's own CPU dispatch for an unquantized fp32 linear (dispatch_cpu_unquantized_gemm)
  int4 bf16  PyTorch's CPU W4A16 kernel (_weight_int4pack_mm_for_cpu, group 32, scales and zeros), bf16
             activations: the 4-bit weight-only kernel that does exist on AVX2 (vLLM does not call it)
  w4a8       vLLM's only 4-bit linear kernel that loads on x86 AVX2 (Dynamic4bitLinearKernel, compressed-tensors
             W4A8 int: int4 weights, int8 dynamic activations; PyTorch's reference path off Arm): one step, M=1

Variants alternate, ROUNDS rounds (median of the rounds; each round the median over STEPS steps). Run by
the vLLM environment (torch + vllm):

    flock /tmp/hotpath-bench.lock .venv-vllm/bin/python perf/lab/experiments/int4_linears/decode_linears.py [THREADS]
"""

from __future__ import annotations

import os
import statistics
import sys
import time

LAYERS = 30
SHAPES = {"qkv": (960, 576), "o": (576, 576), "gate_up": (3072, 576), "down": (576, 1536)}   # (out, in)
LM_HEAD = (49152, 576)
GROUP = 32
ROUNDS = 5
STEPS = 20


def fp32_layers(torch):
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    layers = []
    for _ in range(LAYERS):
        for out, cols in SHAPES.values():
            m = torch.nn.Module()
            m.weight = torch.nn.Parameter(torch.randn(out, cols) * 0.02, requires_grad=False)
            m.bias = None
            dispatch_cpu_unquantized_gemm(m, remove_weight=False)
            layers.append(lambda x, m=m: m.cpu_linear(x, m.weight, None))
    return layers


def int4_layers(torch):
    layers = []
    for _ in range(LAYERS):
        for out, cols in SHAPES.values():
            q = torch.randint(0, 16, (out, cols), dtype=torch.int32)
            packed = torch._convert_weight_to_int4pack_for_cpu(q, 1)
            scales_zeros = (torch.rand(cols // GROUP, out, 2) * 0.01).to(torch.bfloat16)
            layers.append(lambda x, p=packed, sz=scales_zeros: torch._weight_int4pack_mm_for_cpu(x, p, GROUP, sz))
    return layers


def w4a8_layers(torch):
    layers = []
    for _ in range(LAYERS):
        for out, cols in SHAPES.values():
            nibbles = torch.randint(0, 256, (out, cols // 2), dtype=torch.uint8)
            scales = (torch.rand(out, cols // GROUP) * 0.01).to(torch.bfloat16)
            packed = torch.ops.aten._dyn_quant_pack_4bit_weight(nibbles, scales, None, GROUP, cols, out)
            layers.append(lambda x, p=packed, k=cols, n=out: torch.ops.aten._dyn_quant_matmul_4bit(x, p, GROUP, k, n))
    return layers


def step_ms(torch, layers, lm_head, batch: int, dtype, steps: int) -> float:
    """Median ms of one step: every layer in order on a [batch, in] activation, then the lm_head in fp32."""
    inputs = {cols: torch.randn(batch, cols).to(dtype) for _, cols in SHAPES.values()}
    x_head = torch.randn(batch, LM_HEAD[1])
    cols = [c for _ in range(LAYERS) for _, c in SHAPES.values()]
    times = []
    for _ in range(steps + 1):
        t0 = time.perf_counter()
        for layer, c in zip(layers, cols):
            layer(inputs[c])
        if lm_head is not None:
            lm_head(x_head)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[1:])     # the first step warms up


def main() -> int:
    import torch

    torch.set_num_threads(int(sys.argv[1]) if len(sys.argv) > 1 else 2)   # threads: the host's 2 cores
    torch.manual_seed(0)
    head = torch.nn.Module()
    head.weight = torch.nn.Parameter(torch.randn(*LM_HEAD) * 0.02, requires_grad=False)
    head.bias = None
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    dispatch_cpu_unquantized_gemm(head, remove_weight=False)

    def lm_head(x):
        return head.cpu_linear(x, head.weight, None)

    variants = {"fp32": (fp32_layers(torch), torch.float32), "int4 bf16": (int4_layers(torch), torch.bfloat16)}
    print(f"load average before: {os.getloadavg()}", flush=True)
    results: dict[tuple[str, int], list[float]] = {}
    head_ms = {b: [] for b in (1, 8)}
    for r in range(ROUNDS):
        for batch in (1, 8):
            for name, (layers, dtype) in variants.items():
                results.setdefault((name, batch), []).append(step_ms(torch, layers, None, batch, dtype, STEPS))
            head_ms[batch].append(step_ms(torch, [], lm_head, batch, torch.float32, STEPS))
        print(f"round {r + 1}: load average {os.getloadavg()}", flush=True)
    w4a8 = step_ms(torch, w4a8_layers(torch), None, 1, torch.float32, 1)
    print(f"load average after: {os.getloadavg()}")
    print("\n| sequences | decoder linears fp32 ms | decoder linears int4 bf16 ms | lm_head fp32 ms | "
          "int4 / fp32 (linears) | int4 / fp32 (linears + lm_head) |")
    print("|---|---|---|---|---|---|")
    for batch in (1, 8):
        f = statistics.median(results[("fp32", batch)])
        q = statistics.median(results[("int4 bf16", batch)])
        h = statistics.median(head_ms[batch])
        print(f"| {batch} | {f:.1f} ({', '.join(f'{v:.1f}' for v in results[('fp32', batch)])}) | "
              f"{q:.1f} ({', '.join(f'{v:.1f}' for v in results[('int4 bf16', batch)])}) | {h:.1f} | "
              f"{q / f:.2f} | {(q + h) / (f + h):.2f} |")
    print(f"\nw4a8 (vLLM Dynamic4bitLinearKernel's op, x86 reference path), decoder linears, 1 sequence: {w4a8:.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
