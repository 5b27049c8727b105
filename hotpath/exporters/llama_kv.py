"""A Llama decoder step with an external KV cache, written for ONNX export (weights from transformers).

One graph serves both prefill chunks and batched decode steps:

  in:  input_ids [B, S] int64, past_lengths [B] int64 (valid cached positions per row),
       past_key_<i> [B, Hkv, D, T] (keys stored transposed), past_value_<i> [B, Hkv, T, D]
  out: logits [B, V] (last position of each row),
       new_key_<i> [B, Hkv, D, S], new_value_<i> [B, Hkv, S, D] (only this step's entries)

The cache has a fixed capacity T per row; rows attend to their first `past_lengths[b]` cached
positions, the rest is masked. The graph never concatenates or copies the cache: attention scores
against the cache and against this step's keys are computed separately and share one softmax, and
the caller writes the few new entries into its preallocated pool. Grouped-query attention folds the
query heads of one KV head into the row dimension instead of repeating the cache. Keys are stored
transposed so the score MatMul reads the cache as it is.

Written for few graph nodes (each costs ~1-3 us per decode step on a 2-core host, ~60 per layer):
the rotary half-rotation is one MatMul with a constant signed permutation matrix (exact: one
nonzero term per output) instead of Slice/Slice/Neg/Concat plus its shape arithmetic, the query's
1/sqrt(head_dim) scale is folded into the query's cos/sin tables (computed once per step, not per
layer), and the softmax over [cache | step] is split in one Split node.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn


class LlamaKVStep(nn.Module):
    """The transformers LlamaForCausalLM's weights, run one step against an external cache."""

    def __init__(self, hf_model):
        super().__init__()
        cfg = hf_model.config
        self.layers = hf_model.model.layers
        self.embed = hf_model.model.embed_tokens
        self.norm = hf_model.model.norm
        # SmolLM2 ties lm_head to the embedding; using the embedding's parameter keeps one copy in the graph.
        tied = getattr(hf_model.config, "tie_word_embeddings", False)
        self.lm_head_weight = self.embed.weight if tied else hf_model.lm_head.weight
        self.heads = cfg.num_attention_heads
        self.kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.group = self.heads // self.kv_heads
        self.eps = cfg.rms_norm_eps
        rope = getattr(cfg, "rope_parameters", None) or {"rope_theta": getattr(cfg, "rope_theta", 10000.0)}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"unsupported rope_type {rope.get('rope_type')!r} (only 'default')")
        theta = float(rope["rope_theta"])
        inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        # x @ rotate == cat(-x[..., half:], x[..., :half]) (transformers' rotate_half), exactly.
        half = self.head_dim // 2
        rotate = torch.zeros(self.head_dim, self.head_dim)
        rotate[torch.arange(half) + half, torch.arange(half)] = -1.0
        rotate[torch.arange(half), torch.arange(half) + half] = 1.0
        self.register_buffer("rotate", rotate, persistent=False)

    def _rms(self, x, weight):
        # As LlamaRMSNorm: normalize in float32, then scale.
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))

    def _rope(self, positions):
        freqs = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq  # [B, S, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)  # [B, 1, S, D]

    def _rotate(self, x, cos, sin):
        return x * cos + torch.matmul(x, self.rotate) * sin

    def forward(self, input_ids, past_lengths, *cache):
        batch, steps = input_ids.shape
        capacity = cache[1].shape[2]
        positions = past_lengths.unsqueeze(1) + torch.arange(steps, dtype=torch.int64).unsqueeze(0)  # [B, S]
        cos, sin = self._rope(positions)
        # Masks over [G*S] query rows: cached slot j is visible when j < past_length; this step's
        # token t is visible to query step s when t <= s.
        past_visible = (torch.arange(capacity, dtype=torch.int64).view(1, 1, 1, capacity)
                        < past_lengths.view(batch, 1, 1, 1))
        step_index = torch.arange(steps, dtype=torch.int64)
        causal = (step_index.view(1, steps) <= step_index.view(steps, 1)).repeat(self.group, 1)  # [G*S, S]
        neg = torch.tensor(float("-inf"))
        # The score scale rides on the query's rotary tables (one multiply per step, not per layer);
        # 1/sqrt(64) = 2^-3 here, so the products are the same floats as scaling afterwards.
        scale = self.head_dim ** -0.5
        cos_q, sin_q = cos * scale, sin * scale

        hidden = self.embed(input_ids)
        new_entries = []
        for i, layer in enumerate(self.layers):
            past_k, past_v = cache[2 * i], cache[2 * i + 1]
            attn = layer.self_attn
            x = self._rms(hidden, layer.input_layernorm.weight)
            q = attn.q_proj(x).view(batch, steps, self.heads, self.head_dim).transpose(1, 2)
            k = attn.k_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
            q, k = self._rotate(q, cos_q, sin_q), self._rotate(k, cos, sin)
            k_t = k.transpose(2, 3)  # [B, Hkv, D, S]
            new_entries += [k_t, v]
            # [B, H, S, D] -> [B, Hkv, G*S, D]: query heads h = kv*G + g share kv head `kv`.
            qg = q.reshape(batch, self.kv_heads, self.group * steps, self.head_dim)
            s_past = torch.where(past_visible, torch.matmul(qg, past_k), neg)
            s_new = torch.where(causal, torch.matmul(qg, k_t), neg)
            probs_past, probs_new = torch.split(torch.softmax(torch.cat((s_past, s_new), dim=-1), dim=-1),
                                                [capacity, steps], dim=-1)
            out = torch.matmul(probs_past, past_v) + torch.matmul(probs_new, v)
            out = out.reshape(batch, self.heads, steps, self.head_dim).transpose(1, 2).reshape(batch, steps, -1)
            hidden = hidden + attn.o_proj(out)
            x = self._rms(hidden, layer.post_attention_layernorm.weight)
            mlp = layer.mlp
            hidden = hidden + mlp.down_proj(nn.functional.silu(mlp.gate_proj(x)) * mlp.up_proj(x))
        last = self._rms(hidden[:, -1, :], self.norm.weight)
        logits = nn.functional.linear(last, self.lm_head_weight)
        return (logits, *new_entries)


def cache_names(layers: int) -> tuple[list[str], list[str]]:
    """Graph input names of the cache and output names of the new entries, in forward() order."""
    inputs, outputs = [], []
    for i in range(layers):
        inputs += [f"past_key_{i}", f"past_value_{i}"]
        outputs += [f"new_key_{i}", f"new_value_{i}"]
    return inputs, outputs


def untie_transposed_head(model) -> bool:
    """Replace `MatMul(x, W^T constant)` by `Gemm(x, W, transB=1)` when W^T duplicates another initializer.

    The tracer constant-folds the tied lm_head's transpose into a second [hidden, vocab] copy of the
    embedding matrix (113 MB for SmolLM2); Gemm reads the embedding as stored. Returns True if done.
    """
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    by_shape = {}
    for init in model.graph.initializer:
        by_shape.setdefault(tuple(init.dims), []).append(init)
    for node in model.graph.node:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            continue
        folded = inits[node.input[1]]
        if len(folded.dims) != 2:
            continue
        for original in by_shape.get((folded.dims[1], folded.dims[0]), []):
            if np.array_equal(numpy_helper.to_array(original).T, numpy_helper.to_array(folded)):
                gemm = helper.make_node("Gemm", [node.input[0], original.name], list(node.output),
                                        name=f"{node.name or 'lm_head'}_gemm", transB=1)
                index = list(model.graph.node).index(node)
                model.graph.node.remove(node)
                model.graph.node.insert(index, gemm)
                model.graph.initializer.remove(folded)
                return True
    return False
