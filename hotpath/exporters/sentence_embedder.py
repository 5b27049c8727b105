"""all-MiniLM-L6-v2 for the one-step text endpoint: the pooled encoder graph plus gates against the
reference pipeline (sentence-transformers: its tokenizer, the encoder, mean pooling, normalize).

The served model tokenizes with HF `tokenizers` on the model's own tokenizer.json (the tokenizer
sentence-transformers uses) and runs this graph; the build checks both halves on the multilingual
parity corpus (hotpath.exporters.parity_corpus: thousands of texts in every script, counted in
perf/reports/exact_embedding.md):
- token ids of the served tokenizer settings equal the reference's on every text (any mismatch fails);
- served embeddings (batched and padded as served) against SentenceTransformer.encode on a sample of
  the corpus that includes every edge case: cosine >= `parity_min_cosine` on every text.
Both gates check the FP32 graph. `[hotpath] precision = "int8"` (opt-in: INT8 cannot meet the
reference contract) then serves its dynamic INT8 version, gated against that FP32 graph on the same
sample (hotpath.exporters.sentence_encoder.int8_encoder).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters import quantize
from hotpath.exporters.base import ExportReport, Log
from hotpath.exporters.embedding_parity import BATCH, embedding_sample, served_embeddings
from hotpath.exporters.parity_corpus import multilingual_corpus, script_of
from hotpath.exporters.sentence_encoder import (
    PooledMiniLMExporter,
    export_pooled_encoder,
    minilm_dir,
    minilm_tokenizer,
    replace_with_int8,
)
from hotpath.specs.spec import ModelSpec


def reference_model():
    """sentence-transformers' own pipeline for all-MiniLM-L6-v2, from the registry package (offline)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_dir()), device="cpu")


def token_mismatches(tokenizer, reference, texts: list[str], max_length: int) -> list[str]:
    """Texts whose served token ids (padding dropped) differ from the reference tokenizer's."""
    from hotpath.runtime.text import encode

    ours = encode(tokenizer, texts)
    ref = reference(texts, truncation=True, max_length=max_length)["input_ids"]
    return [t for t, ids, mask, r in zip(texts, ours["input_ids"], ours["attention_mask"], ref)
            if ids[mask.astype(bool)].tolist() != list(r)]


class SentenceEmbedderExporter(PooledMiniLMExporter):
    """sentence_embedder's export/: the pooled graph, gated against sentence-transformers' pipeline."""

    name = "sentence_embedder"

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {**super().versions(), "sentence-transformers": version("sentence-transformers")}

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        import onnx

        precision, opset = spec.hotpath.precision, spec.hotpath.opset
        floors = quantize.floors_of(spec, quantize.EMBEDDING_FLOORS) if precision == "int8" else {}
        recipe = spec.parameters   # the served model's tokenizer settings (EmbedderParameters)
        tmp_path = version_dir / "model.onnx.tmp"
        export_pooled_encoder(tmp_path, opset, "embedding", log)
        onnx.checker.check_model(str(tmp_path), full_check=True)
        try:
            metrics = self._gates(tmp_path, recipe, spec.hotpath.parity_min_cosine, log)
        except BuildError as exc:
            tmp_path.unlink(missing_ok=True)
            raise BuildError(f"{spec.name}: {exc}") from None
        metrics = {**metrics, "opset": opset, "precision": precision}
        if precision == "int8":
            tmp_path, gate = replace_with_int8(spec.name, tmp_path, floors, log, recipe)
            metrics.update(gate)
        tmp_path.replace(version_dir / "model.onnx")
        return ExportReport(files=["model.onnx"], metrics=metrics)

    def _gates(self, onnx_path, recipe, min_cosine, log) -> dict:
        from hotpath.runtime.ort_session import make_session

        t0 = time.perf_counter()
        corpus = multilingual_corpus()
        reference = reference_model()
        max_length = recipe.max_length
        if reference.max_seq_length != max_length:
            raise BuildError(f"max_length {max_length} != the reference's max_seq_length {reference.max_seq_length}")
        tokenizer = minilm_tokenizer(recipe)
        bad = token_mismatches(tokenizer, reference.tokenizer, corpus, max_length)
        log(f"token ids vs sentence-transformers' tokenizer on the parity corpus: "
            f"{len(corpus) - len(bad)}/{len(corpus)} equal ({time.perf_counter() - t0:.1f}s)")
        if bad:
            raise BuildError(f"served token ids differ from the reference on {len(bad)} of {len(corpus)} texts, "
                             f"e.g. {bad[:3]!r}")
        t0 = time.perf_counter()
        sample = embedding_sample(corpus)
        ref = reference.encode(sample, batch_size=BATCH, normalize_embeddings=True, convert_to_numpy=True)
        got = served_embeddings(tokenizer, make_session(onnx_path, intra_op_threads=2), sample)
        cos = (ref * got).sum(axis=1)
        worst = int(np.argmin(cos))
        log(f"embeddings vs SentenceTransformer.encode on {len(sample)} texts: min cosine {cos.min():.6f} "
            f"(floor {min_cosine}; worst: {script_of(sample[worst])} {sample[worst][:30]!r}), "
            f"mean {cos.mean():.6f} ({time.perf_counter() - t0:.1f}s)")
        if not cos.min() >= min_cosine:
            raise BuildError(f"cosine {cos.min():.6f} < {min_cosine} against the reference on {sample[worst][:60]!r}")
        return {"parity_corpus": len(corpus), "token_mismatches": 0, "embedding_sample": len(sample),
                "min_cosine": float(cos.min()), "mean_cosine": float(cos.mean())}
