"""The 4-bit W4A16 copy (hotpath.exporters.llm_int4): packing, round-trip error, the tensors and config vLLM reads."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

from hotpath.exporters import llm_int4  # noqa: E402


def unpack(packed, dim: int):
    """Independent unpacking: nibble i of each int32 (lowest first) is value i along `dim`, stored +8."""
    p = packed if dim == 1 else packed.t()
    nibbles = torch.stack([(p >> (4 * i)) & 0xF for i in range(8)], dim=2).reshape(p.shape[0], -1) - 8
    return nibbles if dim == 1 else nibbles.t()


def test_pack_puts_the_first_value_in_the_lowest_nibble_offset_by_eight():
    values = torch.tensor([[-8, -7, -6, -5, -4, -3, -2, -1], [0, 1, 2, 3, 4, 5, 6, 7]], dtype=torch.int8)
    packed = llm_int4.pack_int32(values, dim=1)
    assert packed.dtype == torch.int32 and packed.shape == (2, 1)
    assert packed[0, 0].item() == 0x76543210
    assert packed[1, 0].item() == torch.tensor(0xFEDCBA98 - (1 << 32), dtype=torch.int64).item()
    assert torch.equal(llm_int4.pack_int32(values.t().contiguous(), dim=0), packed.t())


def test_round_trip_error_is_within_half_a_step_per_group():
    torch.manual_seed(0)
    w = torch.randn(64, 96) * 0.05
    w[3, :32] += 0.4          # a group away from zero: zero stays in its range
    q, scale, zero = llm_int4.quantize_groups(w)
    assert q.shape == w.shape and scale.shape == zero.shape == (64, 3)
    assert int(q.min()) >= -8 and int(q.max()) <= 7
    err = (llm_int4.dequantize(q, scale, zero) - w).abs().reshape(64, 3, 32)
    assert torch.all(err <= scale[..., None] / 2 * (1 + 1e-5) + 1e-7)
    # 16 levels over each group's range: the error is far below the weights' own spread
    assert err.mean() < 0.1 * w.abs().mean()
    # zero is exactly representable (integer zero point)
    wz = w.clone()
    wz[:, 5] = 0.0
    assert torch.all(llm_int4.dequantize(*llm_int4.quantize_groups(wz))[:, 5] == 0.0)


def test_group_size_must_divide_the_input():
    with pytest.raises(ValueError):
        llm_int4.quantize_groups(torch.zeros(8, 40))


def test_compressed_tensors_are_what_vllm_reads():
    torch.manual_seed(1)
    w = torch.randn(48, 64)
    t = llm_int4.compressed(w)
    assert set(t) == {"weight_packed", "weight_scale", "weight_zero_point", "weight_shape"}
    assert t["weight_packed"].dtype == torch.int32 and t["weight_packed"].shape == (48, 64 // 8)
    assert t["weight_scale"].dtype == torch.float32 and t["weight_scale"].shape == (48, 2)
    assert t["weight_zero_point"].dtype == torch.int32 and t["weight_zero_point"].shape == (48 // 8, 2)
    assert t["weight_shape"].tolist() == [48, 64]
    # what the kernel computes from the stored tensors: (q - zp) * scale, group by group
    q, zp = unpack(t["weight_packed"], 1), unpack(t["weight_zero_point"], 0)
    deq = ((q.float().reshape(48, 2, 32) - zp.float()[..., None]) * t["weight_scale"][..., None]).reshape(48, 64)
    assert torch.allclose(deq, w, atol=float(t["weight_scale"].max()) / 2 + 1e-6)
    assert torch.equal(deq, llm_int4.dequantize(*llm_int4.quantize_groups(w)))


def _model_dir(path):
    torch.manual_seed(2)
    tensors = {"model.embed_tokens.weight": torch.randn(16, 64), "model.norm.weight": torch.ones(64),
               "model.layers.0.input_layernorm.weight": torch.ones(64),
               "model.layers.0.self_attn.q_proj.weight": torch.randn(64, 64),
               "model.layers.0.mlp.down_proj.weight": torch.randn(64, 128)}
    path.mkdir()
    safetensors_torch.save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({"model_type": "llama", "tie_word_embeddings": True}))
    (path / "tokenizer.json").write_text("{}")
    return tensors


def test_write_w4a16_quantizes_only_decoder_linears(tmp_path):
    src = _model_dir(tmp_path / "src")
    assert llm_int4.write_w4a16(tmp_path / "src", tmp_path / "dst") == 2
    out = safetensors_torch.load_file(str(tmp_path / "dst" / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight"):
        assert torch.equal(out[name], src[name])
    assert "model.layers.0.self_attn.q_proj.weight" not in out and "lm_head.weight" not in out
    assert out["model.layers.0.mlp.down_proj.weight_packed"].shape == (64, 16)
    assert out["model.layers.0.mlp.down_proj.weight_scale"].shape == (64, 4)
    config = json.loads((tmp_path / "dst" / "config.json").read_text())
    qc = config["quantization_config"]
    assert qc["format"] == "pack-quantized" and qc["ignore"] == ["lm_head"]
    weights = qc["config_groups"]["group_0"]["weights"]
    assert (weights["num_bits"], weights["symmetric"], weights["strategy"], weights["group_size"]) == (4, False,
                                                                                                      "group", 32)
    assert qc["config_groups"]["group_0"]["input_activations"] is None
    assert (tmp_path / "dst" / "tokenizer.json").exists()


def test_write_dequantized_is_a_plain_checkpoint_of_the_round_trip(tmp_path):
    src = _model_dir(tmp_path / "src")
    llm_int4.write_dequantized(tmp_path / "src", tmp_path / "dst")
    out = safetensors_torch.load_file(str(tmp_path / "dst" / "model.safetensors"))
    assert set(out) == set(src)
    name = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(out[name], llm_int4.dequantize(*llm_int4.quantize_groups(src[name])))
    assert not torch.equal(out[name], src[name])
    assert "quantization_config" not in json.loads((tmp_path / "dst" / "config.json").read_text())
