"""The ONNX Runtime decoder step of hotpath's former text_generation engine (hotpath.runtime.generation).

Kept only while perf studies still compare against that engine (issue 26: vLLM serves text_generation);
`hotpath engines` no longer builds it. SmolLM2's float32 reference -> ONNX decoder step with a KV cache
(hotpath.exporters.llama_kv), optionally with the GGUF's Q4_1 blocks in MatMulNBits (hotpath.exporters.q4_gguf),
and the parity checks of that graph against transformers.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters.base import Log
from hotpath.exporters.smollm2 import PARITY_PROMPTS, generation_settings  # noqa: F401 (its former home)

GREEDY_TOKENS = 16        # greedy continuation compared token for token on every parity prompt
# MatMulNBits accuracy_level: 1 = float32 activations (the weights are exact, so the output stays
# within float rounding of the reference). 4 (int8 activations, as llama.cpp's Q4_1 x Q8_1 dot) is
# ~1.5x faster on this repo's 2-core AVX2 host but moves logits by ~2 and changes greedy tokens: the
# parity gates refuse it (perf/reports/text_generation.md).
Q4_ACCURACY_LEVEL = 1


def reference_weights(model) -> dict[str, np.ndarray]:
    """The float32 reference's parameters as numpy arrays (views, no copy), by transformers name."""
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


def quantize_q4(model, onnx_path: Path, gguf_file: Path, log: Log = lambda m: None,
                accuracy_level: int = Q4_ACCURACY_LEVEL) -> int:
    """Rewrite the float32 graph at `onnx_path` with the GGUF's Q4_1 blocks in MatMulNBits (in place).

    Checked twice before any logit is compared: every GGUF tensor, mapped onto MatMulNBits' codes,
    scales and zero points, dequantizes to the reference's float32 tensor bit for bit; and every
    MatMulNBits weight read back from the written graph does too (names the layer otherwise)."""
    import onnx

    from hotpath.exporters import q4_gguf

    reference = reference_weights(model)
    cfg = model.config
    blocks = q4_gguf.read_gguf_weights(gguf_file, cfg.num_attention_heads, cfg.num_key_value_heads)
    checked = q4_gguf.check_mapping(blocks, reference)
    log(f"q4: {checked} GGUF tensors mapped onto MatMulNBits dequantize to the float32 reference exactly")
    layers = {k: v for k, v in blocks.items() if v.kind == "Q4_1"}
    graph = onnx.load(str(onnx_path))
    replaced = q4_gguf.quantize_graph(graph, layers, reference, accuracy_level=accuracy_level, lm_head=False)
    q4_gguf.check_graph_weights(graph, reference)
    onnx.save(graph, str(onnx_path))
    return len(replaced)


def export_decoder(model, path: Path, opset: int = 17) -> None:
    """Trace a transformers Llama model's KV step (hotpath.exporters.llama_kv) to `path`."""
    import onnx
    import torch

    from hotpath.exporters.llama_kv import LlamaKVStep, cache_names, untie_transposed_head

    settings = {"layers": model.config.num_hidden_layers, "kv_heads": model.config.num_key_value_heads,
                "head_dim": getattr(model.config, "head_dim", None)
                or model.config.hidden_size // model.config.num_attention_heads,
                "vocab_size": model.config.vocab_size}
    step = LlamaKVStep(model).eval()
    in_cache, out_cache = cache_names(settings["layers"])
    example = _example_inputs(settings, batch=2, steps=3, capacity=8, lengths=[2, 5])
    axes = {"input_ids": {0: "batch", 1: "steps"}, "past_lengths": {0: "batch"}, "logits": {0: "batch"}}
    for name in in_cache:
        axes[name] = {0: "batch", 3 if "key" in name else 2: "capacity"}
    for name in out_cache:
        axes[name] = {0: "batch", 3 if "key" in name else 2: "steps"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer chatter; the parity checks are the proof
        torch.onnx.export(step, tuple(torch.from_numpy(a) for a in example), str(path),
                          input_names=["input_ids", "past_lengths", *in_cache],
                          output_names=["logits", *out_cache], dynamic_axes=axes,
                          opset_version=opset, dynamo=False)
    graph = onnx.load(str(path))
    if untie_transposed_head(graph):
        onnx.save(graph, str(path))


def _example_inputs(settings: dict, batch: int, steps: int, capacity: int, lengths: list[int],
                    ids: np.ndarray | None = None) -> list[np.ndarray]:
    """Random-free example feeds: token ids, cache lengths and a zero cache of `capacity`."""
    kv, d = settings["kv_heads"], settings["head_dim"]
    if ids is None:
        ids = (np.arange(batch * steps, dtype=np.int64).reshape(batch, steps) * 37 + 11) % settings["vocab_size"]
    feeds = [ids, np.array(lengths, dtype=np.int64)]
    for _ in range(settings["layers"]):
        feeds += [np.zeros((batch, kv, d, capacity), np.float32), np.zeros((batch, kv, capacity, d), np.float32)]
    return feeds


def _parity(model, onnx_path: Path, tokenizer, settings: dict) -> dict[str, float]:
    """Max abs logit difference, ORT graph vs the transformers model, in three situations."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    layers = settings["layers"]
    capacity = 64

    def run(ids: np.ndarray, lengths: list[int], cache: list[np.ndarray]):
        out = session.run(None, dict(zip(names, [ids, np.array(lengths, np.int64), *cache])))
        return out[0], out[1:]

    def write(cache, new, start):
        for i in range(layers):
            k, v = new[2 * i], new[2 * i + 1]
            cache[2 * i][..., start:start + k.shape[-1]] = k
            cache[2 * i + 1][:, :, start:start + v.shape[-2]] = v

    def reference(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].numpy()

    prompts = [tokenizer.encode(p) for p in PARITY_PROMPTS]
    diffs = {}
    # 1. Whole-prompt prefill.
    ids = prompts[0]
    logits, _ = run(np.array([ids]), [0], _example_inputs(settings, 1, 0, capacity, [0])[2:])
    diffs["prefill"] = float(np.abs(logits[0] - reference(ids)[-1]).max())
    # 2. Chunked prefill: the first half through the cache, then the rest.
    ids = prompts[1]
    cache = _example_inputs(settings, 1, 0, capacity, [0])[2:]
    half = len(ids) // 2
    _, new = run(np.array([ids[:half]]), [0], cache)
    write(cache, new, 0)
    logits, _ = run(np.array([ids[half:]]), [half], cache)
    diffs["chunked_prefill"] = float(np.abs(logits[0] - reference(ids)[-1]).max())
    # 3. One batched decode step over rows with different cache lengths.
    cache = _example_inputs(settings, len(prompts), 0, capacity, [0] * len(prompts))[2:]
    for row, ids in enumerate(prompts):
        one = [c[row:row + 1] for c in cache]  # views: writing them fills the batch cache
        _, new = run(np.array([ids[:-1]]), [0], one)
        write(one, new, 0)
    logits, _ = run(np.array([[p[-1]] for p in prompts]), [len(p) - 1 for p in prompts], cache)
    diffs["batched_decode"] = max(float(np.abs(logits[r] - reference(p)[-1]).max()) for r, p in enumerate(prompts))
    return diffs


def greedy_parity(model, onnx_path: Path, tokenizer, settings: dict, new_tokens: int = GREEDY_TOKENS,
                  prompts: list[str] | None = None) -> int:
    """Greedy continuation of each parity prompt through the graph (prefill, then one decode step per
    token against the cache) equals transformers' greedy `generate`; returns the tokens compared.
    The first differing token is a BuildError naming the prompt, the position and both tokens."""
    import onnxruntime as ort
    import torch

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    layers = settings["layers"]
    eos = set(settings.get("eos_token_ids", []))
    compared = 0
    for text in prompts or PARITY_PROMPTS:
        ids = tokenizer.encode(text)
        with torch.no_grad():
            want = model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                                  pad_token_id=tokenizer.eos_token_id)[0, len(ids):].tolist()
        cache = _example_inputs(settings, 1, 0, len(ids) + new_tokens + 1, [0])[2:]
        feed, length, got = ids, 0, []
        while len(got) < len(want):
            out = session.run(None, dict(zip(names, [np.array([feed], np.int64), np.array([length], np.int64), *cache])))
            for i in range(layers):
                k, v = out[1 + 2 * i], out[2 + 2 * i]
                cache[2 * i][..., length:length + k.shape[-1]] = k
                cache[2 * i + 1][:, :, length:length + v.shape[-2]] = v
            length += len(feed)
            token = int(np.argmax(out[0][0]))
            got.append(token)
            if token != want[len(got) - 1]:
                raise BuildError(f"greedy tokens differ from transformers on prompt {text!r} at token {len(got) - 1}: "
                                 f"graph {token} ({tokenizer.decode([token])!r}), reference {want[len(got) - 1]} "
                                 f"({tokenizer.decode([want[len(got) - 1]])!r}); top-2 logit gap "
                                 f"{float(np.diff(np.sort(out[0][0])[-2:])[0]):.3f}")
            if token in eos:
                break
            feed = [token]
        compared += len(got)
    return compared
