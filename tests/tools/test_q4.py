"""4-bit decode graph (hotpath.exporters.q4_gguf): the GGUF Q4_1 / Q8_0 -> MatMulNBits mapping on real
tensors of the shipped SmolLM2 file, and the whole q4 export path on a tiny Llama written as a GGUF
file (quantized by gguf-py, q/k rows permuted as llama.cpp stores them), including the gates that
must refuse a corrupted block."""

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from hotpath.errors import BuildError
from hotpath.exporters import q4_gguf
from hotpath.exporters.q4_gguf import BlockQuant
from tests import tinyllm

gguf = pytest.importorskip("gguf")


# ---- real tensors of the shipped GGUF ------------------------------------------------------------
@pytest.fixture(scope="module")
def real_tensors():
    from hotpath.exporters.smollm2 import gguf_path

    try:
        path = gguf_path()
    except BuildError as exc:
        pytest.skip(str(exc))
    wanted = {"blk.0.attn_k.weight", "blk.0.ffn_down.weight", "blk.3.attn_q.weight", "token_embd.weight"}
    return {t.name: t for t in gguf.GGUFReader(str(path)).tensors if t.name in wanted}


@pytest.mark.parametrize("name", ["blk.0.attn_k.weight", "blk.0.ffn_down.weight", "token_embd.weight"])
def test_mapping_reproduces_gguf_dequantization_bit_for_bit(real_tensors, name):
    tensor = real_tensors[name]
    weight = q4_gguf._from_gguf_tensor(name, tensor)
    want = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    assert weight.kind == tensor.tensor_type.name
    assert np.array_equal(weight.dequantize(), want)
    # The packed MatMulNBits initializers read back to the same codes and zero points.
    back = _read_back(weight)
    assert np.array_equal(back.codes, weight.codes) and np.array_equal(back.dequantize(), want)


def test_q_and_k_rows_are_permuted_as_transformers_does(real_tensors):
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    tensor = real_tensors["blk.3.attn_q.weight"]
    dequantized = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    want = LlamaTensorProcessor()._reverse_permute_weights(dequantized, 9, 9)
    got = q4_gguf._from_gguf_tensor("q", tensor).permute_rows(q4_gguf.reverse_permute_rows(576, 9))
    assert np.array_equal(got.dequantize(), want)


@pytest.mark.parametrize("name,rows", [("blk.0.ffn_down.weight", 1), ("blk.0.attn_k.weight", 5)])
def test_matmulnbits_on_a_real_tensor_equals_the_float32_product(real_tensors, name, rows):
    """ONNX Runtime's kernel with the mapped codes/scales/zero points + the block-minimum term gives
    x @ W^T of the dequantized float32 weight within float32 rounding."""
    import onnxruntime as ort
    from onnx import TensorProto, helper

    weight = q4_gguf._from_gguf_tensor(name, real_tensors[name])
    w = weight.dequantize()
    n, k = w.shape
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "wt"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, None, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, None, n])],
                              [numpy_helper.from_array(np.ascontiguousarray(w.T), "wt")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert q4_gguf.quantize_graph(model, {name: weight}, {name: w}, accuracy_level=1, lm_head=False) == [name]
    assert not any(node.op_type == "MatMul" and node.input[1] == "wt" for node in model.graph.node)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, rows, k)).astype(np.float32)
    got = session.run(None, {"x": x})[0]
    want = x.astype(np.float64) @ w.T.astype(np.float64)
    scale = np.abs(x).astype(np.float64) @ np.abs(w.T).astype(np.float64)  # the sum's magnitude
    assert np.all(np.abs(got - want) <= 1e-5 * scale + 1e-6), float(np.abs(got - want).max())


def _read_back(weight: BlockQuant) -> BlockQuant:
    from onnx import TensorProto, helper

    base = weight.name.removesuffix(".weight")
    inits = [numpy_helper.from_array(weight.packed_codes(), f"{base}.codes"),
             numpy_helper.from_array(weight.scales.reshape(-1), f"{base}.scales"),
             numpy_helper.from_array(weight.packed_zero_points().reshape(-1), f"{base}.zero_points")]
    if weight.mins is not None:
        inits.append(numpy_helper.from_array(np.ascontiguousarray(weight.mins.T), f"{base}.mins"))
    n, k = weight.shape
    node = helper.make_node("MatMulNBits", ["x", *[i.name for i in inits[:3]]], ["y"], name=f"{base}/MatMulNBits",
                            domain="com.microsoft", K=k, N=n, bits=weight.bits, block_size=32)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])], inits)
    return q4_gguf.graph_weights(helper.make_model(graph))[f"{base}.weight"]


def test_unmappable_types_are_refused():
    class Fake:
        name = "blk.0.attn_q.weight"
        tensor_type = gguf.GGMLQuantizationType.Q5_K
        data = np.zeros((4, 176), np.uint8)

    with pytest.raises(BuildError, match="Q5_K has no MatMulNBits mapping"):
        q4_gguf._from_gguf_tensor("x", Fake())


# ---- the q4 export path on a tiny Llama written as a GGUF file -----------------------------------
GGUF_LAYER_NAMES = {v: k for k, v in q4_gguf.LAYER_NAMES.items()}


def _forward_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's permute of attn_q/attn_k rows (what transformers and q4_gguf undo)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_gguf(model, path):
    """Quantize the tiny model's linear layers to Q4_1 and its (tied) embedding to Q8_0 in a GGUF file,
    then load the dequantized values back into the model: it becomes the float32 reference, as
    transformers' dequantized SmolLM2 is for the real file."""
    import torch

    cfg = model.config
    writer = gguf.GGUFWriter(str(path), "llama")
    state = model.state_dict()
    dequantized = {}
    for name, tensor in state.items():
        w = tensor.detach().numpy()
        if name == q4_gguf.EMBEDDING:
            gguf_name, qtype, perm = "token_embd.weight", gguf.GGMLQuantizationType.Q8_0, None
        elif name.startswith("model.layers.") and name.endswith("_proj.weight"):
            layer, rest = name[len("model.layers."):].split(".", 1)
            kind = GGUF_LAYER_NAMES[rest.removesuffix(".weight")]
            gguf_name, qtype = f"blk.{layer}.{kind}.weight", gguf.GGMLQuantizationType.Q4_1
            perm = {"attn_q": cfg.num_attention_heads, "attn_k": cfg.num_key_value_heads}.get(kind)
        else:
            continue
        stored = _forward_permute(w, perm) if perm else w
        raw = gguf.quants.quantize(np.ascontiguousarray(stored, np.float32), qtype)
        writer.add_tensor(gguf_name, raw, raw_dtype=qtype)
        back = gguf.quants.dequantize(raw, qtype)
        if perm:
            back = back[q4_gguf.reverse_permute_rows(back.shape[0], perm)]
        dequantized[name] = back
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with torch.no_grad():
        for name, value in dequantized.items():
            state[name].copy_(torch.from_numpy(value))
    return dequantized


@pytest.fixture(scope="module")
def tiny_q4(tmp_path_factory):
    from transformers import PreTrainedTokenizerFast

    from hotpath.exporters.onnx_decoder import export_decoder, quantize_q4

    folder = tmp_path_factory.mktemp("tiny_q4")
    tiny = tinyllm.build(folder / "fp32")
    write_tiny_gguf(tiny.model, folder / "tiny.gguf")
    export_decoder(tiny.model, folder / "fp32" / "model.onnx")    # the reference now holds Q4_1 values
    q4_path = folder / "q4.onnx"
    q4_path.write_bytes((folder / "fp32" / "model.onnx").read_bytes())
    layers = quantize_q4(tiny.model, q4_path, folder / "tiny.gguf")
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tiny.tokenizer)
    return tiny, q4_path, folder / "tiny.gguf", layers, hf_tok


def _settings(tiny):
    import json

    return json.loads(tiny.info_path.read_text())


def test_tiny_q4_graph_is_4bit_and_matches_the_reference(tiny_q4):
    from hotpath.exporters.onnx_decoder import _parity, greedy_parity

    tiny, q4_path, _, layers, hf_tok = tiny_q4
    assert layers == 2 * 7
    graph = onnx.load(str(q4_path)).graph
    ops = [n.op_type for n in graph.node]
    assert ops.count("MatMulNBits") == 14
    # No float32 copy of a linear layer is left: only the embedding (Gather, lm_head Gemm) is float32 [V, H].
    big = [i for i in graph.initializer if i.data_type == onnx.TensorProto.FLOAT and len(i.dims) == 2
           and i.dims[0] * i.dims[1] >= 64 * 64]
    assert [tuple(i.dims) for i in big] == [(tiny.tokenizer.get_vocab_size(), 64)]
    settings = _settings(tiny)
    diffs = _parity(tiny.model, q4_path, hf_tok, settings)
    assert max(diffs.values()) < 1e-3, diffs
    assert greedy_parity(tiny.model, q4_path, hf_tok, settings, new_tokens=12) > 0


def test_q4_export_runs_in_the_generation_engine_like_transformers(tiny_q4):
    from hotpath.runtime.generation.chat import encode_prompt
    from hotpath.runtime.generation.decoder import Decoder, ModelInfo
    from hotpath.runtime.generation.engine import Engine, EngineSettings
    from hotpath.runtime.generation.params import Limits, parse_params
    from tests.tools.test_generation import Collect, run_all

    tiny, q4_path, _, _, _ = tiny_q4
    decoder = Decoder(q4_path, ModelInfo.load(tiny.info_path), intra_op_threads=1)
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=128, prefill_chunk=16))
    prompts = ["hi", "The capital of France is", "Низкая задержка"]
    sinks = [Collect() for _ in prompts]
    for prompt, sink in zip(prompts, sinks):
        engine.submit(encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, prompt), parse_params(Limits(), max_tokens=16), sink)
    run_all(engine, sinks)
    for prompt, sink in zip(prompts, sinks):
        ids = encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, prompt)
        assert sink.tokens == _greedy(tiny, ids, 16), prompt


def _greedy(tiny, ids, new_tokens):
    # Not tinyllm.greedy_reference: its cache is keyed by id(tiny), which another module's freed
    # (unquantized) tiny model may have had.
    import torch

    with torch.no_grad():
        out = tiny.model.generate(torch.tensor([ids]), max_new_tokens=new_tokens, do_sample=False,
                                  eos_token_id=tiny.eos, pad_token_id=tiny.eos)[0, len(ids):].tolist()
    return out[:out.index(tiny.eos)] if tiny.eos in out else out


def _corrupt(q4_path, out_path, initializer: str, row: int = 0, block: int = 1):
    model = onnx.load(str(q4_path))
    for init in model.graph.initializer:
        if init.name == initializer:
            array = numpy_helper.to_array(init).copy()
            if array.dtype == np.uint8:
                array.reshape(array.shape[0], -1, *array.shape[2:])[row, block] ^= np.uint8(0x33)
            else:
                array.reshape(-1)[block] += np.float32(0.25)
            init.CopyFrom(numpy_helper.from_array(array, init.name))
            break
    else:
        raise AssertionError(f"no initializer {initializer}")
    onnx.save(model, str(out_path))
    return model


@pytest.mark.parametrize("initializer,what", [
    ("model.layers.1.mlp.down_proj.codes", "codes"),
    ("model.layers.0.self_attn.k_proj.mins", "block minimums"),
    ("model.layers.1.self_attn.q_proj.scales", "scales"),
])
def test_a_corrupted_block_fails_with_the_layer_and_the_figure(tiny_q4, tmp_path, initializer, what):
    from hotpath.exporters.onnx_decoder import _parity, reference_weights

    tiny, q4_path, _, _, hf_tok = tiny_q4
    layer = initializer.rsplit(".", 1)[0]
    graph = _corrupt(q4_path, tmp_path / "bad.onnx", initializer)
    with pytest.raises(BuildError, match=rf"{layer}\.weight: 4-bit weights in the graph differ from the float32 "
                                         rf"reference by up to \d\.\d+e[-+]\d+"):
        q4_gguf.check_graph_weights(graph, reference_weights(tiny.model))
    # The logits see it too: far outside the 1e-3 tolerance the build applies.
    assert max(_parity(tiny.model, tmp_path / "bad.onnx", hf_tok, _settings(tiny)).values()) > 1e-3


def test_a_corrupted_gguf_block_is_refused_before_export(tiny_q4):
    from hotpath.exporters.onnx_decoder import reference_weights

    tiny, _, gguf_file, _, _ = tiny_q4
    cfg = tiny.model.config
    blocks = q4_gguf.read_gguf_weights(gguf_file, cfg.num_attention_heads, cfg.num_key_value_heads)
    reference = reference_weights(tiny.model)
    assert q4_gguf.check_mapping(blocks, reference) == 2 * 7 + 1
    blocks["model.layers.0.mlp.up_proj.weight"].codes[3, 40] ^= np.uint8(0x0F)
    with pytest.raises(BuildError, match=r"model\.layers\.0\.mlp\.up_proj\.weight: GGUF blocks mapped to MatMulNBits "
                                         r"differ .* \(row 3, block 1; 1 weights differ\)"):
        q4_gguf.check_mapping(blocks, reference)


def test_greedy_gate_names_prompt_and_position(tiny_q4, tmp_path):
    from hotpath.exporters.onnx_decoder import greedy_parity

    tiny, q4_path, _, _, hf_tok = tiny_q4
    _corrupt(q4_path, tmp_path / "bad.onnx", "model.layers.1.mlp.down_proj.scales", block=0)
    model = onnx.load(str(tmp_path / "bad.onnx"))
    for init in model.graph.initializer:   # a gross error: every scale of the last MLP x 8
        if init.name == "model.layers.1.mlp.down_proj.scales":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(8), init.name))
    onnx.save(model, str(tmp_path / "bad.onnx"))
    with pytest.raises(BuildError, match=r"greedy tokens differ from transformers on prompt .* at token \d+"):
        greedy_parity(tiny.model, tmp_path / "bad.onnx", hf_tok, _settings(tiny), new_tokens=12)


def test_engine_settings_are_validated_at_build_time():
    """text_generation's [parameters] (vLLM engine settings) fail `hotpath engines`, naming the key."""
    from hotpath.exporters.smollm2 import SmolLM2Exporter
    from hotpath.spec import spec_from_dict

    def spec(**params):
        return spec_from_dict({"backend": "python", "parameters": params,
                               "hotpath": {"kind": "python", "python_backend": "text_generation",
                                           "exporter": "smollm2"}}, "text_generation")

    assert SmolLM2Exporter().source_files(spec(dtype="float32", max_num_seqs=4))
    for params, key in (({"dtype": "float8"}, "dtype"), ({"max_num_seqs": 0}, "max_num_seqs"),
                        ({"kv_cache_mib": "lots"}, "kv_cache_mib"), ({"enforce_eager": "maybe"}, "enforce_eager"),
                        ({"max_batch": 16}, "max_batch"),
                        ({"max_tokens_limit": 4096, "max_model_len": 2048}, "max_tokens_limit")):
        with pytest.raises(Exception, match=f"parameters.{key}"):
            SmolLM2Exporter().source_files(spec(**params))
