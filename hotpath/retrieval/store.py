"""The interface every document store behind the `retrieval` endpoint implements.

Vectors are the endpoint's normalized float32 embeddings, so the score is the inner product (cosine)
and higher is better. Ids are caller-chosen strings (a document's key in the user's system). A write
returns only when it is durable: after `upsert` or `delete` returns, a search sees it and a restart
(or a killed stub) keeps it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True)
class Hits:
    """Top-k per query, best first; rows shorter than k are padded with id "" and score -inf."""

    ids: list[list[str]]
    scores: np.ndarray      # float32 [queries, k], descending along each row
    documents: list[list[str]]


class VectorStore(Protocol):
    dim: int

    def search(self, vectors: np.ndarray, k: int) -> Hits:
        """Top-k documents for each row of `vectors` (float32 [n, dim], L2-normalized)."""

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str]) -> None:
        """Add or replace documents; durable and visible to the next search when it returns."""

    def delete(self, ids: Sequence[str]) -> int:
        """Remove documents (unknown ids are ignored); returns how many existed."""

    def count(self) -> int:
        """Number of live documents."""

    def close(self) -> None:
        """Release files, connections and threads."""



def write_all(store: VectorStore, ops: Sequence[tuple[str, str, str, np.ndarray | None]]) -> list[bool]:
    """Apply (op, id, document, vector) writes in order, op "upsert" or "delete"; returns per op whether
    its id existed before. A store may implement `write(ops)` itself (the in-process one: one lock and
    one fsync for them all); otherwise each op is one upsert or delete call, and an upsert reports
    False (the protocol cannot tell a replacement from an insert)."""
    if hasattr(store, "write"):
        return store.write(ops)
    existed = []
    for op, doc_id, document, vector in ops:
        if op == "upsert":
            store.upsert([doc_id], np.asarray(vector, dtype=np.float32)[None, :], [document])
            existed.append(False)
        else:
            existed.append(store.delete([doc_id]) > 0)
    return existed
