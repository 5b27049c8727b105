"""The interface every document store behind the `retrieval` endpoint implements.

Vectors are the endpoint's normalized float32 embeddings, so the score is the inner product (cosine)
and higher is better. Ids are caller-chosen strings (a document's key in the user's system). A write
returns only when it is durable: after `upsert` or `delete` returns, a search sees it and a restart
(or a killed stub) keeps it.

Collections: every document belongs to one collection, named by hotpath.runtime.tenancy: a
tenant's own, "local" (calls that did not come through the gateway) or SHARED, the built corpus. A write
goes to its collection only; a search for collection C sees C and SHARED merged (top-k by score; an id in
both is C's); a search for SHARED sees SHARED only. The same id may live in several collections at once.
The store-level default is SHARED (the operator's view: a build, a seed, a direct test).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from hotpath.runtime.tenancy import SHARED


@dataclass(frozen=True)
class Hits:
    """Top-k per query, best first; rows shorter than k are padded with id "" and score -inf."""

    ids: list[list[str]]
    scores: np.ndarray      # float32 [queries, k], descending along each row
    documents: list[list[str]]


class VectorStore(Protocol):
    dim: int

    def search(self, vectors: np.ndarray, k: int, collection: str = SHARED) -> Hits:
        """Top-k documents of `collection` and SHARED for each row of `vectors` (float32 [n, dim], L2-normalized)."""

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str],
               collection: str = SHARED) -> None:
        """Add or replace documents of `collection`; durable and visible to the next search when it returns."""

    def delete(self, ids: Sequence[str], collection: str = SHARED) -> int:
        """Remove documents of `collection` (unknown ids are ignored); returns how many existed there."""

    def drop_collection(self, collection: str) -> int:
        """Remove every document of `collection`, durably; returns how many there were."""

    def count(self, collection: str | None = None) -> int:
        """Number of live documents (of `collection`, else of all)."""

    def close(self) -> None:
        """Release files, connections and threads."""



def write_all(store: VectorStore, ops: Sequence[tuple[str, str, str, np.ndarray | None]],
              collection: str = SHARED) -> list[bool]:
    """Apply (op, id, document, vector) writes to `collection` in order, op "upsert" or "delete"; returns
    per op whether its id existed there before. A store may implement `write(ops, collection)` itself (the
    in-process one: one lock and one fsync for them all); otherwise each op is one upsert or delete call,
    and an upsert reports False (the protocol cannot tell a replacement from an insert)."""
    if hasattr(store, "write"):
        return store.write(ops, collection)
    existed = []
    for op, doc_id, document, vector in ops:
        if op == "upsert":
            store.upsert([doc_id], np.asarray(vector, dtype=np.float32)[None, :], [document], collection)
            existed.append(False)
        else:
            existed.append(store.delete([doc_id], collection) > 0)
    return existed


def merge(own: Hits, shared: Hits, k: int) -> Hits:
    """Per query, the top-k of `own` and `shared` by score, best first; an id found in both is `own`'s
    (a tenant's document shadows the shared one of the same id: the caller passes shared hits without the
    ids the own collection holds, or they are dropped here when both lists have them)."""
    n = len(own.ids)
    ids = [[""] * k for _ in range(n)]
    docs = [[""] * k for _ in range(n)]
    scores = np.full((n, k), -np.inf, dtype=np.float32)
    for q in range(n):
        mine = {i for i in own.ids[q] if i}
        rows = [(float(own.scores[q, j]), 0, own.ids[q][j], own.documents[q][j]) for j in range(len(own.ids[q]))
                if own.ids[q][j]]
        rows += [(float(shared.scores[q, j]), 1, shared.ids[q][j], shared.documents[q][j])
                 for j in range(len(shared.ids[q])) if shared.ids[q][j] and shared.ids[q][j] not in mine]
        rows.sort(key=lambda r: (-r[0], r[1]))
        for j, (score, _, doc_id, doc) in enumerate(rows[:k]):
            ids[q][j], docs[q][j], scores[q, j] = doc_id, doc, score
    return Hits(ids, scores, docs)
