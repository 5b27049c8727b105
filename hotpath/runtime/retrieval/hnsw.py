"""The ANN index: faiss' HNSW over inner product, with deletions as tombstones.

faiss was picked by measurement (perf/reports/retrieval_design.md: recall@10 and build time equal to
hnswlib's, the fastest queries, and binary wheels for the production image's Python 3.10, which
hnswlib 0.8.0 lacks). Its HNSW cannot remove a vector, so a deleted or replaced document keeps its
graph node (as hnswlib's mark_deleted does) and a bitmap of live labels filters every search.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np


def _faiss():
    import faiss

    faiss.omp_set_num_threads(1)   # one query in microseconds: OpenMP's fan-out costs more than it saves
    return faiss


class HnswIndex:
    """Labels are positions in insertion order (0, 1, ...); a removed label is never reused."""

    def __init__(self, index, ef_search: int):
        self.faiss = _faiss()
        self.index = index
        self.ef_search = int(ef_search)
        # Bit i of byte i >> 3 (little-endian bit order, as faiss reads it): label i is live.
        self.live = np.packbits(np.ones(index.ntotal, dtype=bool), bitorder="little") if index.ntotal \
            else np.zeros(1, dtype=np.uint8)
        self.live_count = index.ntotal
        self.removed = 0
        self._selector = None

    @classmethod
    def build(cls, vectors: np.ndarray, m: int, ef_construction: int, ef_search: int, threads: int = 2) -> "HnswIndex":
        faiss = _faiss()
        index = faiss.IndexHNSWFlat(vectors.shape[1], int(m), faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = int(ef_construction)
        faiss.omp_set_num_threads(threads)
        try:
            index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        finally:
            faiss.omp_set_num_threads(1)
        return cls(index, ef_search)

    @classmethod
    def load(cls, path: Path, ef_search: int) -> "HnswIndex":
        return cls(_faiss().read_index(str(path)), ef_search)

    def save(self, path: Path) -> None:
        if self.removed:
            raise ValueError("only a freshly built index is saved (removals live in the write-ahead log)")
        self.faiss.write_index(self.index, str(path))

    @property
    def dim(self) -> int:
        return self.index.d

    def add(self, vectors: np.ndarray) -> np.ndarray:
        """Insert rows; returns their labels."""
        start = self.index.ntotal
        self.index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        labels = np.arange(start, self.index.ntotal)
        if (self.index.ntotal + 7) // 8 > len(self.live):
            grown = np.zeros(max(len(self.live) * 2, (self.index.ntotal + 7) // 8), dtype=np.uint8)
            grown[: len(self.live)] = self.live
            self.live, self._selector = grown, None   # the selector points at the old buffer
        for label in labels:
            self.live[label >> 3] |= 1 << (label & 7)
        self.live_count += len(labels)
        return labels

    def remove(self, label: int) -> None:
        self.live[label >> 3] &= ~np.uint8(1 << (label & 7))
        self.live_count -= 1
        self.removed += 1

    def vector(self, label: int) -> np.ndarray:
        return self.index.reconstruct(int(label))

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, labels), [n, k] each, best first; missing results have label -1."""
        params = self.faiss.SearchParametersHNSW()
        params.efSearch = max(self.ef_search, k)
        if self.removed:
            if self._selector is None:
                self._selector = self.faiss.IDSelectorBitmap(len(self.live), self.faiss.swig_ptr(self.live))
            params.sel = self._selector
        return self.index.search(np.ascontiguousarray(queries, dtype=np.float32), k, params=params)
