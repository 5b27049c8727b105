"""The `retrieval` model's build output: text_embedding's exact encoder graph, the corpus snapshot and
its HNSW index, gated on recall@10 against exact search.

- Encoder: `export_pooled_encoder` with sentence_embedder's opset and weights writes a byte-identical
  graph (checked against sentence_embedder's when that is built), served with the same tokenizer file
  and settings, so a query's vector is text_embedding's vector.
- Corpus: Debian's package descriptions (hotpath.exporters.retrieval_corpus), `include` + `limit` of them in a
  hash order of their names (stable when apt's lists change);
  the apt list files it is read from are source files, so `apt-get update` rebuilds the index.
- Documents are embedded length-sorted in batches by the served model's Embedder, built from its
  parameters (hotpath.runtime.embedder: the same tokenizer settings and split runner).
- recall@10 of the HNSW index vs brute-force inner product on `recall_queries` held-out packages (not
  indexed ones when the corpus is a subset, else held out of the index); below `min_recall_at_10` the
  build fails.
"""

from __future__ import annotations

import hashlib
import resource
import time
from pathlib import Path

import numpy as np

from hotpath.errors import BuildError
from hotpath.exporters.base import Exporter, ExportReport, Log
from hotpath.specs.spec import ModelSpec

BATCH = 64
MIN_CORPUS = 10_000   # a Debian release lists ~60k packages; far fewer means apt never updated
GRAPH_OF_TEXT_EMBEDDING = "sentence_embedder/1/export/model.onnx"


def embed_texts(embedder, texts: list[str], batch: int = BATCH) -> np.ndarray:
    """Embeddings of `texts` (in their order), computed length-sorted so each batch pads little."""
    order = np.argsort([len(t) for t in texts], kind="stable")
    out = np.empty((len(texts), 0), dtype=np.float32)
    for i in range(0, len(order), batch):
        rows = order[i:i + batch]
        vectors = embedder.embed([texts[r] for r in rows])
        if out.shape[1] == 0:
            out = np.empty((len(texts), vectors.shape[1]), dtype=np.float32)
        out[rows] = vectors
    return out


def _rank(doc_id: str) -> bytes:
    return hashlib.sha1(doc_id.encode()).digest()


def split_corpus(docs: list, limit: int, queries: int, include: tuple[str, ...] = ()) -> tuple[list, list]:
    """(indexed, held-out queries). With a `limit` (0: all), the indexed documents are `include` plus
    those first in a hash order of their ids: a document's membership does not depend on the others,
    so an apt list update that adds or drops packages leaves every other package where it was (an
    even spread over the sorted names would shift half of them). Held-out queries come next in that
    order, so they are never indexed. The result is sorted by id."""
    by_id = {d.id: d for d in docs}
    missing = [i for i in include if i not in by_id]
    if missing:
        raise BuildError(f"the corpus has no document {', '.join(missing)} (hotpath.index.include)")
    included = set(include)
    order = sorted((d for d in docs if d.id not in included), key=lambda d: _rank(d.id))
    if limit and len(include) + limit + queries <= len(docs):
        keep = limit - len(include)
        chosen, held = [by_id[i] for i in include] + order[:keep], order[keep:keep + queries]
    else:
        held = order[:queries]
        chosen = [by_id[i] for i in include] + order[queries:]
    return sorted(chosen, key=lambda d: d.id), held


class RetrievalIndexExporter(Exporter):
    """retrieval's export/: the encoder graph, the corpus and its HNSW index."""

    name = "retrieval"

    def source_files(self, spec: ModelSpec) -> list[Path]:
        from hotpath.exporters.retrieval_corpus import apt_lists
        from hotpath.exporters.sentence_encoder import minilm_dir

        d = minilm_dir()
        return [d / "model.safetensors", d / "config.json", d / "tokenizer.json", *map(Path, apt_lists())]

    def code_files(self) -> list[Path]:
        import hotpath.exporters.retrieval_build as build
        import hotpath.exporters.retrieval_corpus as corpus
        import hotpath.exporters.sentence_encoder as enc
        import hotpath.runtime.embedder as embedder
        import hotpath.runtime.parameters as parameters
        import hotpath.runtime.retrieval.hnsw as hnsw
        import hotpath.runtime.retrieval.hnsw_store as store
        import hotpath.runtime.split_run as split_run
        import hotpath.runtime.text as text

        return [*super().code_files(), *(Path(m.__file__) for m in (enc, build, corpus, hnsw, store, text, embedder,
                                                                     parameters, split_run))]

    def versions(self) -> dict[str, str]:
        from importlib.metadata import version

        return {p: version(p) for p in ("torch", "onnx", "transformers", "onnxruntime", "tokenizers", "faiss-cpu")}

    def export(self, spec: ModelSpec, version_dir: Path, log: Log) -> ExportReport:
        from hotpath import paths
        from hotpath.exporters.retrieval_build import measure_recall, write_base
        from hotpath.exporters.retrieval_corpus import debian_packages
        from hotpath.exporters.sentence_encoder import export_pooled_encoder, minilm_dir
        from hotpath.runtime.embedder import Embedder
        from hotpath.specs.fingerprint import file_digest

        s = spec.hotpath.index
        if s is None:
            raise spec.error("hotpath.index", "the retrieval exporter needs this table")
        graph = version_dir / "model.onnx"
        export_pooled_encoder(graph, spec.hotpath.opset, "embedding", log)
        served = paths.model_repository() / GRAPH_OF_TEXT_EMBEDDING
        if served.is_file() and file_digest(served) != file_digest(graph):
            raise BuildError(f"{spec.name}: the encoder graph differs from text_embedding's ({served}): "
                             "queries would not get text_embedding's vectors")
        t0 = time.perf_counter()
        corpus = debian_packages(s.max_chars)
        if len(corpus) < MIN_CORPUS:
            raise BuildError(f"{spec.name}: `apt-cache dumpavail` lists {len(corpus)} packages (< {MIN_CORPUS}): "
                             "apt's package lists are missing; run `apt-get update` (scripts/setup.sh does)")
        docs, held = split_corpus(corpus, s.limit, s.recall_queries, s.include)
        log(f"corpus: {len(docs)} Debian package descriptions (+{len(held)} held-out queries) "
            f"in {time.perf_counter() - t0:.1f}s")
        embedder = Embedder(minilm_dir(), spec.parameters, graph=graph)   # as the served model embeds
        t0 = time.perf_counter()
        vectors = embed_texts(embedder, [d.text for d in docs])
        queries = embed_texts(embedder, [d.text for d in held])
        embed_s = time.perf_counter() - t0
        log(f"embedded {len(docs) + len(held)} texts in {embed_s:.1f}s ({(len(docs) + len(held)) / embed_s:.0f}/s)")
        index, manifest = write_base(version_dir, docs, vectors, s.M, s.ef_construction, s.ef_search)
        recall = measure_recall(index, vectors, queries, 10)
        floor = s.min_recall_at_10
        index_mb = (version_dir / "index.faiss").stat().st_size / 2**20
        log(f"HNSW M={s.M} ef_construction={s.ef_construction}: built in {manifest['index_build_s']}s, "
            f"{index_mb:.1f} MB; recall@10 at ef_search={s.ef_search} vs exact search on {len(held)} "
            f"held-out queries: {recall:.4f} (floor {floor})")
        if not recall >= floor:
            raise BuildError(f"{spec.name}: recall@10 {recall:.4f} < the spec's floor {floor}")
        metrics = {**manifest, "recall_at_10": round(recall, 4), "held_out_queries": len(held),
                   "embed_s": round(embed_s, 1), "index_mb": round(index_mb, 1),
                   "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
        return ExportReport(files=["model.onnx", "index.faiss", "corpus.jsonl", "manifest.json"], metrics=metrics)
