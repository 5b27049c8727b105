"""GGUF block-quantized weights kept quantized in ONNX: ONNX Runtime's MatMulNBits (com.microsoft).

The mapping is exact, not a re-quantization: the GGUF file's own blocks become the operator's codes,
scales and zero points, so the graph holds the very weights the float32 reference (transformers'
dequantization of the same file) computes with.

  Q4_1 (linear layers)  w = d * q + m,  q in 0..15, d and m float16 per 32 weights
  Q8_0 (token_embd)     w = d * q,      q in -128..127, d float16 per 32 weights

MatMulNBits dequantizes a block as (code - zero_point) * scale. Its CPU kernel packs (and runs fast
on) uint8 zero points only; float zero points are accepted by the schema but run the unpacked
fallback, which dequantizes the whole matrix on every call (measured 18x slower than the float32
MatMul on one 576x1536 layer). A Q4_1 block's zero point -m/d is in general not an integer, so the
exact mapping splits the affine term off:

  x . w_row = sum_b d_b * sum_{k in b} x_k q_k  +  sum_b m_b * sum_{k in b} x_k
            = MatMulNBits(x; codes q, scales d, zero points 0)  +  blocksum(x) @ M^T

with blocksum(x) = ReduceSum over each 32-wide block of x ([.., K/32]) and M^T the [K/32, N] float32
block minimums (one float per 32 weights). Inputs shared by several layers (q/k/v, gate/up) share one
blocksum. Q8_0 maps directly: code = q + 128, zero point 128, scale d (no affine term).

Rows of attn_q / attn_k are permuted exactly as transformers' GGUF loader permutes them (llama.cpp
stores them interleaved for its rotary layout); blocks run along K, so a row permutation moves whole
blocks and their scales with them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError

BLOCK = 32
MS_DOMAIN = "com.microsoft"
# GGUF tensor name (inside blk.<i>.) -> transformers parameter (inside model.layers.<i>.)
LAYER_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
EMBEDDING = "model.embed_tokens.weight"


@dataclass
class BlockQuant:
    """One weight [N, K] as blocks of 32 along K: w = scales * (codes - zero) + mins (mins: Q4_1 only)."""

    name: str                 # transformers parameter name, e.g. model.layers.0.self_attn.q_proj.weight
    kind: str                 # "Q4_1" or "Q8_0"
    codes: np.ndarray         # [N, K] uint8: 0..15 (Q4_1), q + 128 (Q8_0)
    scales: np.ndarray        # [N, K/32] float32
    mins: np.ndarray | None   # [N, K/32] float32 for Q4_1, None for Q8_0

    @property
    def bits(self) -> int:
        return 4 if self.kind == "Q4_1" else 8

    @property
    def zero(self) -> int:
        return 0 if self.kind == "Q4_1" else 128

    @property
    def shape(self) -> tuple[int, int]:
        return self.codes.shape

    def dequantize(self) -> np.ndarray:
        """float32 [N, K] with MatMulNBits' semantics, (code - zero) * scale, plus the block minimum."""
        n, k = self.codes.shape
        w = (self.codes.astype(np.float32) - np.float32(self.zero)).reshape(n, k // BLOCK, BLOCK)
        w = w * self.scales[:, :, None]
        if self.mins is not None:
            w = w + self.mins[:, :, None]
        return w.reshape(n, k)

    def permute_rows(self, order: np.ndarray) -> "BlockQuant":
        return BlockQuant(self.name, self.kind, self.codes[order], self.scales[order],
                          None if self.mins is None else self.mins[order])

    # ---- MatMulNBits initializers ----------------------------------------------------------------
    def packed_codes(self) -> np.ndarray:
        """B [N, K/32, 32*bits/8] uint8, codes packed low nibble first along K."""
        n, k = self.codes.shape
        if self.bits == 8:
            return self.codes.reshape(n, k // BLOCK, BLOCK).copy()
        c = self.codes
        return (c[:, 0::2] | (c[:, 1::2] << np.uint8(4))).astype(np.uint8).reshape(n, k // BLOCK, BLOCK // 2)

    def packed_zero_points(self) -> np.ndarray:
        """uint8 zero points: [N, ceil(blocks/2)] two per byte (4 bits), [N, blocks] (8 bits)."""
        n, blocks = self.scales.shape
        if self.bits == 8:
            return np.full((n, blocks), self.zero, np.uint8)
        z = np.full((n, blocks + blocks % 2), self.zero, np.uint8)
        return (z[:, 0::2] | (z[:, 1::2] << np.uint8(4))).astype(np.uint8)


# ---- reading the GGUF file -----------------------------------------------------------------------
def _from_gguf_tensor(name: str, tensor) -> BlockQuant:
    kind = tensor.tensor_type.name
    data = np.asarray(tensor.data, dtype=np.uint8)
    n = int(data.shape[0])
    if kind == "Q4_1":
        blocks = data.reshape(n, -1, 20)                      # d f16, m f16, 16 bytes of nibbles
        d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
        m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float32)
        qs = blocks[..., 4:]
        # ggml: byte j holds element j (low nibble) and element j + 16 (high nibble) of its block.
        codes = np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1).reshape(n, -1)
        return BlockQuant(name, kind, codes.astype(np.uint8), d, m)
    if kind == "Q8_0":
        blocks = data.reshape(n, -1, 34)                      # d f16, 32 int8
        d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float32)
        q = blocks[..., 2:].copy().view(np.int8).astype(np.int16) + 128
        return BlockQuant(name, kind, q.reshape(n, -1).astype(np.uint8), d, None)
    raise BuildError(f"{tensor.name}: GGUF type {kind} has no MatMulNBits mapping (Q4_1 and Q8_0 do)")


def reverse_permute_rows(rows: int, heads: int) -> np.ndarray:
    """Row order transformers' GGUF loader applies to attn_q/attn_k (undoing llama.cpp's permute)."""
    dim = rows // heads // 2
    return np.arange(rows).reshape(heads, dim, 2).swapaxes(2, 1).reshape(rows)


def read_gguf_weights(path: Path | str, heads: int, kv_heads: int) -> dict[str, BlockQuant]:
    """Every block-quantized linear weight of a Llama GGUF file, keyed by transformers parameter name
    and laid out as transformers lays out the dequantized tensor ([out_features, in_features])."""
    import gguf

    out = {}
    for tensor in gguf.GGUFReader(str(path)).tensors:
        parts = tensor.name.split(".")
        if tensor.name == "token_embd.weight":
            name = EMBEDDING
        elif len(parts) == 4 and parts[0] == "blk" and parts[2] in LAYER_NAMES and parts[3] == "weight":
            name = f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}.weight"
        else:
            continue
        if tensor.tensor_type.name not in ("Q4_1", "Q8_0"):
            continue
        weight = _from_gguf_tensor(name, tensor)
        if parts[-2] == "attn_q":
            weight = weight.permute_rows(reverse_permute_rows(weight.shape[0], heads))
        elif parts[-2] == "attn_k":
            weight = weight.permute_rows(reverse_permute_rows(weight.shape[0], kv_heads))
        out[name] = weight
    return out


def check_mapping(weights: dict[str, BlockQuant], reference: dict[str, np.ndarray]) -> int:
    """Every mapped weight dequantizes to the reference tensor bit for bit; returns how many were checked."""
    for name, weight in weights.items():
        if name not in reference:
            raise BuildError(f"{name}: in the GGUF file but not in the reference model")
        _check_equal(name, weight.dequantize(), reference[name], "GGUF blocks mapped to MatMulNBits")
    return len(weights)


def _check_equal(name: str, got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.shape != want.shape:
        raise BuildError(f"{name}: {what} have shape {got.shape}, the reference {want.shape}")
    if not np.array_equal(got, want):
        diff = np.abs(got.astype(np.float64) - want)
        n, k = np.unravel_index(int(diff.argmax()), diff.shape)
        raise BuildError(f"{name}: {what} differ from the float32 reference by up to {diff.max():.3e} "
                         f"(row {n}, block {k // BLOCK}; {int((diff > 0).sum())} weights differ)")


# ---- the graph -----------------------------------------------------------------------------------
def _digest(array: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(array, np.float32).tobytes()).hexdigest()


def quantize_graph(model, weights: dict[str, BlockQuant], reference: dict[str, np.ndarray],
                   accuracy_level=4, lm_head: bool = True) -> list[str]:
    """Replace, in place, every float32 MatMul/Gemm of `model` (an onnx.ModelProto) whose constant
    weight is one of `weights` by MatMulNBits. The traced graph has lost parameter names, so each
    weight is recognised by content: a MatMul's initializer equals the reference W^T, the tied
    lm_head's Gemm(transB=1) reads the embedding W itself (only when `lm_head`). `accuracy_level`
    is MatMulNBits' attribute (1: float32 activations, 4: int8), or a function of the parameter
    name. Nodes and initializers are named after the parameter (<name>/MatMulNBits, <name>.codes,
    .scales, .zero_points, .mins) so graph_weights can read them back. Returns the names replaced;
    a weight that is not found, or found twice, is a BuildError."""
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    by_transposed = {_digest(reference[n].T): n for n in weights if n != EMBEDDING}
    embedding_digest = _digest(reference[EMBEDDING]) if lm_head and EMBEDDING in weights else None

    consumers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            consumers[name] = consumers.get(name, 0) + 1

    blocksums: dict[tuple[str, int], str] = {}
    done: dict[str, str] = {}
    new_nodes, drop = [], set()
    new_inits = [numpy_helper.from_array(np.array([-1], np.int64), "q4/axis_last")]

    def blocksum(x: str, k: int, rank: int) -> list:
        """Nodes computing ReduceSum over 32-wide blocks of x's last axis (once per input)."""
        key = (x, k)
        if key in blocksums:
            return []
        out = f"{x}/blocksum{k}"
        shape = f"{out}/shape"
        # Reshape [..., K] -> [..., K/32, 32] (0 copies a leading dimension), sum the last axis.
        new_inits.append(numpy_helper.from_array(np.array([0] * (rank - 1) + [k // BLOCK, BLOCK], np.int64), shape))
        blocksums[key] = out
        return [helper.make_node("Reshape", [x, shape], [f"{out}/blocks"], name=f"{out}/Reshape"),
                helper.make_node("ReduceSum", [f"{out}/blocks", "q4/axis_last"], [out], name=f"{out}/ReduceSum",
                                 keepdims=0)]

    for node in graph.node:
        name, x, transposed = None, None, False
        if node.op_type == "MatMul" and node.input[1] in inits and len(inits[node.input[1]].dims) == 2:
            name = by_transposed.get(_digest(numpy_helper.to_array(inits[node.input[1]])))
            x = node.input[0]
        elif (node.op_type == "Gemm" and embedding_digest and node.input[1] in inits and len(node.input) == 2
              and any(a.name == "transB" and a.i == 1 for a in node.attribute)
              and not any(a.name in ("transA", "alpha", "beta") and (a.i or a.f not in (0.0, 1.0))
                          for a in node.attribute if a.name != "transB")
              and _digest(numpy_helper.to_array(inits[node.input[1]])) == embedding_digest):
            name, x, transposed = EMBEDDING, node.input[0], True
        if name is None:
            new_nodes.append(node)
            continue
        if name in done:
            raise BuildError(f"{name}: its weight is used by two graph nodes ({done[name]}, {node.name})")
        done[name] = node.name
        w = weights[name]
        n, k = w.shape
        base = name.removesuffix(".weight") + ("/lm_head" if transposed else "")
        rank = 2 if transposed else 3
        new_inits += [numpy_helper.from_array(w.packed_codes(), f"{base}.codes"),
                      numpy_helper.from_array(w.scales.reshape(-1), f"{base}.scales"),
                      numpy_helper.from_array(w.packed_zero_points().reshape(-1), f"{base}.zero_points")]
        y = node.output[0]
        nbits_out = y if w.mins is None else f"{base}/nbits"
        new_nodes.append(helper.make_node(
            "MatMulNBits", [x, f"{base}.codes", f"{base}.scales", f"{base}.zero_points"], [nbits_out],
            name=f"{base}/MatMulNBits", domain=MS_DOMAIN, K=k, N=n, bits=w.bits, block_size=BLOCK,
            accuracy_level=int(accuracy_level(name) if callable(accuracy_level) else accuracy_level)))
        if w.mins is not None:
            new_nodes += blocksum(x, k, rank)
            new_inits.append(numpy_helper.from_array(np.ascontiguousarray(w.mins.T), f"{base}.mins"))
            new_nodes += [helper.make_node("MatMul", [blocksums[(x, k)], f"{base}.mins"], [f"{base}/min_term"],
                                           name=f"{base}/MinTerm"),
                          helper.make_node("Add", [nbits_out, f"{base}/min_term"], [y], name=f"{base}/Add")]
        if not transposed or consumers.get(node.input[1], 0) == 1:
            drop.add(node.input[1])
    missing = sorted(set(weights) - set(done) - ({EMBEDDING} if not embedding_digest else set()))
    if missing:
        raise BuildError(f"{len(missing)} GGUF weights have no float32 MatMul in the traced graph "
                         f"(first: {missing[0]}); the graph would mix float32 and 4-bit layers")
    # Consumers must follow their producers: a blocksum is emitted next to its first user, which
    # is never before x's producer, so the node order stays topological.
    del graph.node[:]
    graph.node.extend(new_nodes)
    kept = [i for i in graph.initializer if i.name not in drop]
    del graph.initializer[:]
    graph.initializer.extend(kept + new_inits)
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    return sorted(done)


def graph_weights(model) -> dict[str, BlockQuant]:
    """The BlockQuant weights stored in a graph made by quantize_graph (read back from its initializers)."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    out = {}
    for node in model.graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: a.i for a in node.attribute}
        n, k, bits = attrs["N"], attrs["K"], attrs["bits"]
        base = node.name.removesuffix("/MatMulNBits")
        name = base.removesuffix("/lm_head") + ".weight"
        packed = numpy_helper.to_array(inits[node.input[1]]).reshape(n, -1)
        if bits == 4:
            codes = np.empty((n, k), np.uint8)
            codes[:, 0::2], codes[:, 1::2] = packed & np.uint8(0x0F), packed >> np.uint8(4)
            zp = numpy_helper.to_array(inits[node.input[3]]).reshape(n, -1)
            zp = np.stack([zp & np.uint8(0x0F), zp >> np.uint8(4)], -1).reshape(n, -1)[:, :k // BLOCK]
        else:
            codes = packed
            zp = numpy_helper.to_array(inits[node.input[3]]).reshape(n, -1)
        mins_name = f"{base}.mins"
        mins = numpy_helper.to_array(inits[mins_name]).T if mins_name in inits else None
        scales = numpy_helper.to_array(inits[node.input[2]]).reshape(n, -1)
        w = BlockQuant(name, "Q4_1" if bits == 4 else "Q8_0", codes, scales, mins)
        if not np.all(zp == w.zero):
            r, b = np.argwhere(zp != w.zero)[0]
            raise BuildError(f"{name}: zero point of row {r}, block {b} is {zp[r, b]}, the mapping writes {w.zero}")
        out[name] = w
    return out


def check_graph_weights(model, reference: dict[str, np.ndarray]) -> int:
    """Every MatMulNBits weight in `model`, dequantized as the operator does, equals the float32
    reference exactly; a difference (a corrupted block, a wrong packing) is a BuildError naming
    the layer and the largest difference. Returns how many layers were checked."""
    stored = graph_weights(model)
    for name, weight in stored.items():
        if name not in reference:
            raise BuildError(f"{name}: MatMulNBits node has no reference weight")
        _check_equal(name, weight.dequantize(), reference[name], "4-bit weights in the graph")
    return len(stored)
