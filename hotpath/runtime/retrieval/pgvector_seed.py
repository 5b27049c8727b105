"""Seed a pgvector table from the in-process store's build output (corpus.jsonl + the faiss index).

`make engines` embeds the corpus once; the pgvector store takes the same documents and the very same
vectors from that output instead of embedding again, so both stores search one corpus and their
recall compares. Seeding happens once per table (PgVectorStore.seed_once); later writes are the
endpoint's.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from hotpath.runtime.retrieval.hnsw_store import CORPUS, INDEX, MANIFEST, StoreError, corpus_digest


def manifest(base_dir: Path) -> dict:
    return json.loads((Path(base_dir) / MANIFEST).read_text())


def build_arrays(base_dir: Path) -> tuple[list[str], np.ndarray, list[str]]:
    """(ids, vectors [n, dim] float32, documents) of the build, in index order; refuses a corpus file
    that is not the one the index was built with."""
    from hotpath.runtime.retrieval.hnsw import HnswIndex

    base_dir = Path(base_dir)
    if corpus_digest(base_dir / CORPUS) != manifest(base_dir)["corpus_sha256"]:
        raise StoreError(f"{base_dir / CORPUS} does not match the index it was built with ({MANIFEST})")
    rows = [json.loads(line) for line in (base_dir / CORPUS).read_text(encoding="utf-8").splitlines()]
    index = HnswIndex.load(base_dir / INDEX, ef_search=16).index
    if index.ntotal != len(rows):
        raise StoreError(f"{CORPUS} has {len(rows)} documents, the index {index.ntotal}")
    vectors = index.reconstruct_n(0, index.ntotal) if len(rows) else np.zeros((0, index.d), np.float32)
    return [r["id"] for r in rows], np.asarray(vectors, dtype=np.float32), [r["text"] for r in rows]


def seed(store, base_dir: Path) -> bool:
    """Load the build into `store` (a PgVectorStore) unless its table was seeded before; True if it loaded."""
    return store.seed_once(manifest(base_dir)["corpus_sha256"], lambda: build_arrays(base_dir))
