"""all-MiniLM-L6-v2 with its tokenizer inside the graph: raw text in, normalized embedding out.

One ONNX model instead of an ensemble of a Python tokenizer and the encoder: no Python-backend hop,
no ensemble hand-off, and padding to the batch's longest text instead of length buckets. The
tokenizer is onnxruntime-extensions' BertTokenizer (hotpath.exporters.tokenizer_graph); Triton's
native onnxruntime backend loads its op library through `model_operations { op_library_filename }`.

Parity: the merged graph against PyTorch on HF-tokenized input. Texts whose token ids agree with HF
`tokenizers` must match within `parity_atol`; texts where the two tokenizers disagree (accent
stripping of some scripts) are listed and must keep cosine >= `parity_min_cosine`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.exporters.sentence_encoder import (INPUT_NAMES, PARITY_TEXTS, SentenceEncoderExporter, _check_io,
                                                 _tokenize, export_pooled_encoder, minilm_dir)
from hotpath.exporters.tokenizer_graph import OUTPUTS, bert_tokenizer_graph, extensions_library
from hotpath.spec import ModelSpec

# Beyond the encoder's parity texts: accents and scripts where WordPiece normalizers tend to differ.
EXTRA_TEXTS = ["Café Ünïcödé naïve résumé", "ÅNGSTRÖM", "tab\tnew\nline", "  spaces  ", "Hello, World! (ok)...",
               "中文 and 日本語", "Низкая задержка", "Ελληνικά", "한국어", "हिन्दी"]


class TokenizedEncoderExporter(Exporter):
    name = "minilm_tokenized"

    def source_files(self, spec: ModelSpec) -> list[Path]:
        d = minilm_dir()
        return [d / "model.safetensors", d / "config.json", d / "tokenizer.json", d / "vocab.txt"]

    def code_files(self) -> list[Path]:
        import hotpath.exporters.sentence_encoder as enc
        import hotpath.exporters.tokenizer_graph as tg

        return [*super().code_files(), Path(enc.__file__), Path(tg.__file__)]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {**SentenceEncoderExporter().versions(), "onnxruntime-extensions": version("onnxruntime-extensions")}

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        import onnx
        from onnx import compose

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        opset = int(spec.hotpath.get("opset", 17))
        max_length = int(spec.hotpath.get("max_length", 256))
        text_input = spec.config.input[0].name
        output_name = spec.config.output[0].name
        out_path = version_dir / "model.onnx"
        with tempfile.TemporaryDirectory() as tmp:
            encoder_path = Path(tmp) / "encoder.onnx"
            module = export_pooled_encoder(encoder_path, opset, output_name, log)
            encoder = onnx.load(str(encoder_path))
        tokenizer = bert_tokenizer_graph(minilm_dir() / "vocab.txt", max_length, text_input, opset)
        tokenizer.ir_version = encoder.ir_version
        merged = compose.merge_models(tokenizer, encoder, io_map=[(n, n) for n in INPUT_NAMES])
        onnx.checker.check_model(merged, full_check=False)  # full_check runs shape inference on custom ops
        _check_io(merged, spec)
        log(f"tokenizer graph (onnxruntime-extensions BertTokenizer, max_length {max_length}) merged into the encoder")
        tmp_path = version_dir / "model.onnx.tmp"
        onnx.save(merged, str(tmp_path))
        try:
            metrics = self._parity(spec, module, tokenizer, tmp_path, text_input, output_name, max_length, log)
        except BuildError:
            tmp_path.unlink(missing_ok=True)
            raise
        tmp_path.replace(out_path)
        return ExportReport(files=["model.onnx"], metrics={**metrics, "opset": opset})

    def _parity(self, spec: ModelSpec, module, tokenizer, onnx_path: Path, text_input: str, output_name: str,
                max_length: int, log: Log) -> dict:
        import torch

        atol = float(spec.hotpath.get("parity_atol", 1e-4))
        min_cos = float(spec.hotpath.get("parity_min_cosine", 0.98))
        texts = PARITY_TEXTS + EXTRA_TEXTS + _perf_texts()
        session = _session(str(onnx_path))
        batch = {text_input: np.array(texts, dtype=object).reshape(-1, 1)}
        reference_ids = _tokenize(texts, max_length)
        # The tokenizer graph alone (the same nodes the merged model starts with) gives the token ids.
        got_ids = dict(zip(OUTPUTS, _session(tokenizer.SerializeToString()).run(list(OUTPUTS), batch)))
        same = np.array([np.array_equal(got_ids["input_ids"][i], reference_ids["input_ids"][i]) for i in range(len(texts))])
        with torch.no_grad():
            ref = module(*(torch.from_numpy(reference_ids[n]) for n in INPUT_NAMES)).numpy()
        # Batched as served, and one text alone: a batch-dependent graph (padding) shows up here.
        got = session.run([output_name], batch)[0]
        alone = session.run([output_name], {text_input: np.array([[texts[1]]], dtype=object)})[0]
        diff = float(np.max(np.abs(ref[same] - got[same])))
        diff_alone = float(np.max(np.abs(ref[1] - alone[0])))
        cos = (ref * got).sum(axis=1)  # both L2-normalized
        differing = [t for t, s in zip(texts, same) if not s]
        log(f"tokens equal to HF tokenizers on {int(same.sum())}/{len(texts)} texts"
            + (f"; differ on {differing!r} (cosine >= {cos[~same].min():.4f})" if differing else ""))
        log(f"parity ORT (text in) vs PyTorch (HF tokens): max abs diff {max(diff, diff_alone):.2e} "
            f"(tolerance {atol:.0e}), min cosine {cos.min():.5f} (floor {min_cos})")
        if not max(diff, diff_alone) <= atol:
            raise BuildError(f"{spec.name}: embeddings differ from PyTorch by {max(diff, diff_alone):.2e} > {atol:.0e}")
        # The contract: Latin-script and CJK text tokenizes exactly as HF does. Other scripts (Cyrillic
        # with combining marks, Greek, Hangul, Devanagari) are normalized differently by the op; they
        # are reported, and the ensemble pipeline (Python HF tokenizer) is the choice for them.
        contract = np.array([_in_contract(t) for t in texts])
        broken = [t for t, s, c in zip(texts, same, contract) if c and not s]
        if broken:
            raise BuildError(f"{spec.name}: in-graph tokenizer differs from HF tokenizers on {broken!r}")
        if not cos[contract].min() >= min_cos:
            raise BuildError(f"{spec.name}: cosine {cos[contract].min():.4f} < {min_cos}")
        return {"max_abs_diff": max(diff, diff_alone), "min_cosine_in_contract": float(cos[contract].min()),
                "token_agreement": f"{int(same.sum())}/{len(texts)}"}


def _in_contract(text: str) -> bool:
    """Latin (U+0000-U+024F), CJK ideographs and symbols: scripts the in-graph tokenizer matches HF on."""
    return all(not c.isalpha() or ord(c) < 0x250 or 0x4E00 <= ord(c) <= 0x9FFF or 0x3040 <= ord(c) <= 0x30FF
               for c in text)


def _perf_texts() -> list[str]:
    """The real short texts perf/ measures with, when present."""
    import json

    from hotpath import paths

    path = paths.ROOT / "perf" / "data" / "short_texts.json"
    if not path.exists():
        return []
    return [entry["TEXT"][0] for entry in json.loads(path.read_text())["data"]]


def _session(model):
    """A CPU session (model path or serialized bytes) with the onnxruntime-extensions ops registered."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions_library())
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
