"""The precision gate's metric math (hotpath.exporters.llm_precision): agreement, perplexity, the verdict."""

from __future__ import annotations

import math

import pytest

from hotpath.exporters import llm_precision as lp
from hotpath.exporters.llm_precision import Figures, Scores


def test_agreement_counts_positions_across_windows():
    reference = Scores([[1, 2, 3], [4, 5]], [[0.0] * 3, [0.0] * 2])
    candidate = Scores([[1, 9, 3], [4, 9]], [[0.0] * 3, [0.0] * 2])
    assert lp.agreement(candidate, reference) == pytest.approx(3 / 5)
    assert lp.agreement(reference, reference) == 1.0


def test_agreement_refuses_different_positions():
    with pytest.raises(ValueError):
        lp.agreement(Scores([[1, 2]], [[0.0, 0.0]]), Scores([[1, 2, 3]], [[0.0] * 3]))


def test_perplexity_is_exp_of_mean_negative_log_likelihood():
    # p = 1/2 and 1/8 -> mean NLL = (ln 2 + ln 8) / 2 = 2 ln 2 -> perplexity 4
    scores = Scores([[0], [0]], [[math.log(0.5)], [math.log(0.125)]])
    assert lp.perplexity(scores) == pytest.approx(4.0)
    assert lp.perplexity(Scores([[0] * 4], [[0.0] * 4])) == pytest.approx(1.0)


def test_perplexity_of_an_impossible_token_is_infinite():
    assert lp.perplexity(Scores([[0, 0]], [[math.log(0.5), -math.inf]])) == math.inf


def test_figures_from_scores():
    reference = Scores([[1, 2, 3, 4]], [[math.log(0.5)] * 4])
    f = lp.figures("x", Scores([[1, 2, 0, 0]], [[math.log(0.25)] * 4]), reference)
    assert (f.agreement, f.perplexity, f.positions) == (0.5, pytest.approx(4.0), 4)


def test_verdict_passes_only_when_no_worse_on_both():
    anchor = Figures("llama.cpp Q4_1", agreement=0.95, perplexity=10.0, positions=100)
    assert lp.verdict(Figures("a", 0.96, 9.9, 100), anchor) == []
    assert lp.verdict(Figures("a", 0.95, 10.0 * (1 + lp.PPL_TOLERANCE / 2), 100), anchor) == []
    worse_agreement = lp.verdict(Figures("a", 0.94, 9.0, 100), anchor)
    assert len(worse_agreement) == 1 and "agreement" in worse_agreement[0]
    worse_ppl = lp.verdict(Figures("a", 0.99, 10.0 * (1 + 2 * lp.PPL_TOLERANCE), 100), anchor)
    assert len(worse_ppl) == 1 and "perplexity" in worse_ppl[0]
    assert len(lp.verdict(Figures("a", 0.5, math.inf, 100), anchor)) == 2


def test_corpus_is_held_out_from_the_test_prompts():
    from hotpath.exporters.smollm2 import PARITY_PROMPTS
    from hotpath.sweeps.measure.streaming import PROMPTS

    text = lp.corpus_text()
    assert len(text) > 20000
    assert not any(p.strip() and p.strip() in text for p in [*PROMPTS, *PARITY_PROMPTS])


def test_int8_channel_quantization_round_trips_within_half_a_step():
    import torch

    from hotpath.exporters.llm_int8 import quantize_channel

    w = torch.randn(16, 64) * torch.logspace(-3, 1, 16)[:, None]   # channels of very different ranges
    q, scale = quantize_channel(w)
    assert q.dtype == torch.int8 and scale.shape == (16, 1)
    assert int(q.abs().max()) == 127                                  # each channel's largest weight uses the range
    assert torch.all((q.float() * scale - w).abs() <= scale / 2 + 1e-7)


def test_int8_copy_quantizes_decoder_linears_only(tmp_path):
    import json

    import torch
    from safetensors.torch import load_file, save_file

    from hotpath.exporters.llm_int8 import write_w8a8

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.randn(8, 4),
               "model.layers.0.mlp.down_proj.weight": torch.randn(4, 8),
               "model.layers.0.input_layernorm.weight": torch.ones(4),
               "model.embed_tokens.weight": torch.randn(10, 4)}, str(src / "model.safetensors"))
    (src / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (src / "tokenizer.json").write_text("{}")
    assert write_w8a8(src, dst) == 2
    out = load_file(str(dst / "model.safetensors"))
    assert out["model.layers.0.self_attn.q_proj.weight"].dtype == torch.int8
    assert out["model.layers.0.self_attn.q_proj.weight_scale"].shape == (8, 1)
    assert out["model.embed_tokens.weight"].dtype == torch.float32 and "model.embed_tokens.weight_scale" not in out
    config = json.loads((dst / "config.json").read_text())
    assert config["quantization_config"]["format"] == "int-quantized" and (dst / "tokenizer.json").exists()
