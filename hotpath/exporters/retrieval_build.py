"""Build the base of the in-process store: the corpus snapshot, its HNSW index and a manifest that ties
them together (hotpath.runtime.retrieval.hnsw_store refuses a corpus whose digest differs), plus the recall gate.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from hotpath.exporters.retrieval_corpus import Document
from hotpath.runtime.retrieval.hnsw import HnswIndex
from hotpath.runtime.retrieval.hnsw_store import CORPUS, INDEX, MANIFEST, corpus_digest


def exact_top_k(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Brute-force inner-product top-k labels [n, k] (the ground truth recall is measured against)."""
    scores = queries @ base.T
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(scores, top, axis=1), axis=1)
    return np.take_along_axis(top, order, axis=1)


def recall_at_k(found: np.ndarray, truth: np.ndarray) -> float:
    """Mean fraction of the exact top-k that the ANN search returned."""
    return float(np.mean([len(set(f.tolist()) & set(t.tolist())) / len(t) for f, t in zip(found, truth)]))


def write_base(out_dir: Path, docs: Sequence[Document], vectors: np.ndarray, m: int, ef_construction: int,
               ef_search: int, threads: int = 2) -> tuple[HnswIndex, dict]:
    """corpus.jsonl + index.faiss + manifest.json in `out_dir`; returns the index and the manifest."""
    out_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    index = HnswIndex.build(vectors, m, ef_construction, ef_search, threads)
    seconds = time.perf_counter() - t0
    (out_dir / CORPUS).write_text("".join(json.dumps({"id": d.id, "text": d.text}, ensure_ascii=False) + "\n"
                                          for d in docs), encoding="utf-8")
    index.save(out_dir / INDEX)
    manifest = {"documents": len(docs), "dim": int(vectors.shape[1]), "metric": "inner_product",
                "index": "faiss.IndexHNSWFlat", "M": m, "ef_construction": ef_construction,
                "ef_search": ef_search, "corpus_sha256": corpus_digest(out_dir / CORPUS),
                "index_build_s": round(seconds, 2)}
    (out_dir / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return index, manifest


def measure_recall(index: HnswIndex, base: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    """recall@k of `index` against exact search over `base` for `queries`."""
    return recall_at_k(index.search(queries, k)[1], exact_top_k(base, queries, k))
