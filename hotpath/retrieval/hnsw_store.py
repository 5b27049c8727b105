"""The in-process store: the built HNSW index and corpus (read-only build output) plus the live writes
(a write-ahead log in a writable data directory), as one `VectorStore`.

Data directory (one per model; `data_dir` parameter or HOTPATH_RETRIEVAL_DATA_DIR, see
hotpath.retrieval.open):
- `wal-<gen>.log`: writes since the last compaction, appended and fsync'd before a write returns;
- `snapshot-<gen>.log`: compaction's output, the last write of every id ever written (deletes kept as
  tombstones), in the WAL's record format; `CURRENT` names the generation (atomic rename);
- `lock`: held (flock) while appending or compacting, so writers never interleave.
State = base corpus, then the snapshot, then the WAL. Every record carries a global sequence number and
a record applies only when newer than what its id has seen, so replay is idempotent: any process (a
second model instance, a replica restarting beside the old one) tails the WAL before each search and
write and sees every acknowledged write. Writes replay onto a rebuilt base too (ids are the keys).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Sequence

import numpy as np

from hotpath.retrieval.hnsw import HnswIndex
from hotpath.retrieval.store import Hits
from hotpath.retrieval.wal import Record, append_records, fsync_dir, read_records, write_file_atomic
from hotpath.runtime.parameters import RetrievalParameters

MANIFEST, INDEX, CORPUS = "manifest.json", "index.faiss", "corpus.jsonl"


class StoreError(RuntimeError):
    """The build output or the data directory is inconsistent (a fault of the deployment, not of a request)."""


def corpus_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class HnswStore:
    def __init__(self, base_dir: Path, data_dir: Path, ef_search: int | None = None,
                 compact_bytes: int = RetrievalParameters.compact_bytes):
        """`ef_search`: the search breadth (None: the build's, from its manifest)."""
        base_dir, self.data_dir = Path(base_dir), Path(data_dir)
        manifest = json.loads((base_dir / MANIFEST).read_text())
        if corpus_digest(base_dir / CORPUS) != manifest["corpus_sha256"]:
            raise StoreError(f"{base_dir / CORPUS} does not match the index it was built with ({MANIFEST})")
        self.index = HnswIndex.load(base_dir / INDEX, ef_search or manifest["ef_search"])
        self.dim = self.index.dim
        rows = [json.loads(line) for line in (base_dir / CORPUS).read_text(encoding="utf-8").splitlines()]
        if len(rows) != self.index.index.ntotal:
            raise StoreError(f"{CORPUS} has {len(rows)} documents, the index {self.index.index.ntotal}")
        self.ids: list[str] = [r["id"] for r in rows]          # by label
        self.docs: list[str | None] = [r["text"] for r in rows]
        self.label_of = {doc_id: i for i, doc_id in enumerate(self.ids)}
        self.applied: dict[str, int] = {}    # id -> seq of the newest write applied to it
        self.last_seq = 0
        self.compact_bytes = int(compact_bytes)
        self.gen, self.offset = -1, 0
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._sync()

    # -- files -------------------------------------------------------------------------------------------
    def _wal(self, gen: int) -> Path:
        return self.data_dir / f"wal-{gen}.log"

    def _snapshot(self, gen: int) -> Path:
        return self.data_dir / f"snapshot-{gen}.log"

    def _current(self) -> int:
        try:
            return int((self.data_dir / "CURRENT").read_text())
        except FileNotFoundError:
            return 0

    @contextmanager
    def _locked(self):
        with open(self.data_dir / "lock", "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    # -- replay ------------------------------------------------------------------------------------------
    def _sync(self) -> None:
        """Apply every write acknowledged so far (by any process)."""
        while True:
            gen = self._current()
            if gen != self.gen:
                self._apply(read_records(self._snapshot(gen))[0])
                self.gen, self.offset = gen, 0
            records, self.offset = read_records(self._wal(gen), self.offset)
            self._apply(records)
            if self._current() == gen:   # else a compaction ran meanwhile: its snapshot holds what we missed
                return

    def _apply(self, records: Sequence[Record]) -> None:
        for r in records:
            self.last_seq = max(self.last_seq, r.seq)
            if r.seq <= self.applied.get(r.id, 0):
                continue
            self.applied[r.id] = r.seq
            old = self.label_of.pop(r.id, None)
            if old is not None:
                self.index.remove(old)
                self.docs[old] = None
            if r.op == "upsert":
                if r.vector is None or r.vector.shape != (self.dim,):
                    raise StoreError(f"write {r.seq} for {r.id!r} has no {self.dim}-d vector")
                label = int(self.index.add(r.vector[None, :])[0])
                self.ids.append(r.id)
                self.docs.append(r.document)
                self.label_of[r.id] = label

    def _write(self, records: list[Record]) -> None:
        self.offset = append_records(self._wal(self.gen), records, self.offset)
        self._apply(records)
        if self.offset >= self.compact_bytes:
            self._compact()

    # -- VectorStore ---------------------------------------------------------------------------------------
    def search(self, vectors: np.ndarray, k: int) -> Hits:
        self._sync()
        n, want = len(vectors), min(int(k), len(self.label_of))
        ids = [[""] * k for _ in range(n)]
        docs = [[""] * k for _ in range(n)]
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        if want > 0 and n:
            found_scores, labels = self.index.search(vectors, want)
            for i in range(n):
                for j, label in enumerate(labels[i]):
                    if label >= 0:
                        ids[i][j], docs[i][j], scores[i, j] = self.ids[label], self.docs[label], found_scores[i, j]
        return Hits(ids, scores, docs)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str]) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        with self._locked():
            self._sync()
            self._write([Record(self.last_seq + 1 + i, "upsert", doc_id, doc, vec)
                         for i, (doc_id, vec, doc) in enumerate(zip(ids, vectors, documents))])

    def delete(self, ids: Sequence[str]) -> int:
        with self._locked():
            self._sync()
            live = set(self.label_of)
            existed = len({i for i in ids if i in live})
            self._write([Record(self.last_seq + 1 + i, "delete", doc_id) for i, doc_id in enumerate(ids)])
        return existed

    def write(self, ops: Sequence[tuple[str, str, str, np.ndarray | None]]) -> list[bool]:
        """Several upserts and deletes, in order, under one lock and one fsync (one execute()'s writes).
        `ops`: (op, id, document, vector); returns per op whether the id existed before it."""
        with self._locked():
            self._sync()
            live, existed, records = set(self.label_of), [], []
            for i, (op, doc_id, doc, vec) in enumerate(ops):
                existed.append(doc_id in live)
                (live.add if op == "upsert" else live.discard)(doc_id)
                records.append(Record(self.last_seq + 1 + i, op, doc_id, doc if op == "upsert" else "",
                                      None if vec is None else np.asarray(vec, dtype=np.float32)))
            if records:
                self._write(records)
        return existed

    def count(self) -> int:
        self._sync()
        return len(self.label_of)

    def get(self, doc_id: str) -> str | None:
        """The stored document of `doc_id`, or None."""
        self._sync()
        label = self.label_of.get(doc_id)
        return None if label is None else self.docs[label]

    def compact(self) -> None:
        """Fold the WAL into a new snapshot generation (the newest write of every id) and start an empty WAL."""
        with self._locked():
            self._compact()

    def _compact(self) -> None:   # the caller holds the lock
        self._sync()
        records = []
        for doc_id, seq in sorted(self.applied.items(), key=lambda item: item[1]):
            label = self.label_of.get(doc_id)
            records.append(Record(seq, "delete", doc_id) if label is None else
                           Record(seq, "upsert", doc_id, self.docs[label], self.index.vector(label)))
        new = self.gen + 1
        write_file_atomic(self._snapshot(new), b"".join(r.encode() for r in records))
        write_file_atomic(self._wal(new), b"")
        write_file_atomic(self.data_dir / "CURRENT", str(new).encode())
        for old in (self._snapshot(self.gen), self._wal(self.gen)):
            old.unlink(missing_ok=True)
        fsync_dir(self.data_dir)
        self.gen, self.offset = new, 0

    def close(self) -> None:
        pass

    def stats(self) -> dict:
        return {"documents": len(self.label_of), "generation": self.gen, "wal_bytes": self.offset,
                "pid": os.getpid()}
