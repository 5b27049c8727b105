"""A tiny random Llama exported through the real export path, for generation tests without the 540 MB model.

Byte-level tokenizer (256 byte tokens + the ChatML specials SmolLM2 uses), a 2-layer grouped-query
Llama whose weights are scaled up so greedy choices are far from ties, exported with
hotpath.exporters.onnx_decoder.export_decoder into the files the runtime reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] "
                 "+ '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")


@dataclass
class TinyLLM:
    model: object          # transformers LlamaForCausalLM (the greedy reference)
    tokenizer: object      # tokenizers.Tokenizer
    model_path: Path
    info_path: Path
    eos: int
    references: dict = field(default_factory=dict, repr=False)  # greedy_reference's results, per model


def byte_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from tokenizers.pre_tokenizers import ByteLevel

    alphabet = ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    return tok


def build(folder: Path, layers: int = 2, seed: int = 0) -> TinyLLM:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from hotpath.exporters.onnx_decoder import export_decoder

    folder.mkdir(parents=True, exist_ok=True)
    tok = byte_tokenizer()
    eos = tok.token_to_id("<|im_end|>")
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=True,
                         eos_token_id=eos, bos_token_id=tok.token_to_id("<|im_start|>"), pad_token_id=eos)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)  # large weights: well-separated logits, so greedy is stable
    model_path = folder / "model.onnx"
    export_decoder(model, model_path)
    info_path = folder / "generation.json"
    info_path.write_text(json.dumps({
        "layers": layers, "kv_heads": 2, "head_dim": 16, "vocab_size": config.vocab_size,
        "max_position_embeddings": 256, "eos_token_ids": [eos], "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>", "chat_template": CHAT_TEMPLATE}))
    (folder / "tokenizer.json").write_text(tok.to_str())
    return TinyLLM(model, tok, model_path, info_path, eos)


def greedy_reference(tiny: TinyLLM, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """transformers' greedy generation; the EOS token (if any) is dropped, as the engine never emits it."""
    # Cached on the model itself: a module-level cache keyed by id() hands a new model, allocated where a
    # collected one was, the old model's tokens.
    key = (tuple(prompt_ids), max_new_tokens)
    if key not in tiny.references:
        tiny.references[key] = _generate(tiny, prompt_ids, max_new_tokens)
    return tiny.references[key]


def _generate(tiny: TinyLLM, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = tiny.model.generate(torch.tensor([prompt_ids]), max_new_tokens=max_new_tokens, do_sample=False,
                                  eos_token_id=tiny.eos, pad_token_id=tiny.eos)
    new = out[0, len(prompt_ids):].tolist()
    return new[:new.index(tiny.eos)] if tiny.eos in new else new
