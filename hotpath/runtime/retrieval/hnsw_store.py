"""The in-process store: the built HNSW index and corpus (read-only build output) plus the live writes
(a write-ahead log in a writable data directory), as one `VectorStore`.

Data directory (one per model; `data_dir` parameter or HOTPATH_RETRIEVAL_DATA_DIR, see
hotpath.runtime.retrieval.open):
- `wal-<gen>.log`: writes since the last compaction, appended and fsync'd before a write returns;
- `snapshot-<gen>.log`: compaction's output, the last write of every id ever written (deletes kept as
  tombstones), in the WAL's record format; `CURRENT` names the generation (atomic rename);
- `lock`: held (flock) while appending or compacting, so writers never interleave.
State = base corpus, then the snapshot, then the WAL. Every record carries a global sequence number and
a record applies only when newer than what its (collection, id) has seen, so replay is idempotent: any
process (a second model instance, a replica restarting beside the old one) tails the WAL before each
search and write and sees every acknowledged write. Writes replay onto a rebuilt base too (ids are the keys).

Collections (hotpath.runtime.retrieval.store): the built index is SHARED; each other collection has an HNSW
index of its own (the build's M and ef_construction), created by its first write, so a search of
collection C is two index searches (C's, and SHARED's with C's ids filtered out) merged by score, and
dropping C frees its index. Every record names its collection; a "drop" record empties one, and a record
of that collection older than the newest drop never applies again (compaction keeps the drop records).
`python -m hotpath retrieval drop-collection` appends one under the lock while the model runs: the model
tails the WAL before every call, so it sees the drop on its next one.
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

from hotpath.runtime.errors import ConfigError
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.retrieval.hnsw import HnswIndex
from hotpath.runtime.retrieval.store import Hits, merge
from hotpath.runtime.retrieval.wal import Record, append_records, fsync_dir, read_records, write_file_atomic
from hotpath.runtime.tenancy import SHARED

MANIFEST, INDEX, CORPUS = "manifest.json", "index.faiss", "corpus.jsonl"


class StoreError(ConfigError):
    """The build output or the data directory is inconsistent (a fault of the deployment, not of a request)."""


def corpus_digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class _Collection:
    """One collection's documents: an HNSW index and, by label, its ids and documents."""

    def __init__(self, index: HnswIndex, ids: list[str], docs: list[str | None]):
        self.index, self.ids, self.docs = index, ids, docs
        self.label_of = {doc_id: i for i, doc_id in enumerate(ids)}

    def remove(self, doc_id: str) -> None:
        old = self.label_of.pop(doc_id, None)
        if old is not None:
            self.index.remove(old)
            self.docs[old] = None

    def add(self, doc_id: str, document: str, vector: np.ndarray) -> None:
        label = int(self.index.add(vector[None, :])[0])
        self.ids.append(doc_id)
        self.docs.append(document)
        self.label_of[doc_id] = label

    def search(self, vectors: np.ndarray, k: int, hide: dict | None = None) -> Hits:
        """Top-k, padded; ids in `hide` are skipped (a tenant's shadowing ids when this is SHARED)."""
        n = len(vectors)
        ids = [[""] * k for _ in range(n)]
        docs = [[""] * k for _ in range(n)]
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        live = len(self.label_of)
        want = min(k, live)
        while want > 0 and n:
            found_scores, labels = self.index.search(vectors, want)
            short = False
            for i in range(n):
                j = 0
                for score, label in zip(found_scores[i], labels[i]):
                    if label < 0 or j >= k:
                        continue
                    doc_id = self.ids[label]
                    if hide and doc_id in hide:
                        continue
                    ids[i][j], docs[i][j], scores[i, j] = doc_id, self.docs[label], score
                    j += 1
                short = short or (j < k and want < live)
            if not short:
                break
            want = min(live, want * 2)   # hidden ids took places: search deeper
        return Hits(ids, scores, docs)


class HnswStore:
    def __init__(self, base_dir: Path, data_dir: Path, ef_search: int | None = None,
                 compact_bytes: int = RetrievalParameters.compact_bytes):
        """`ef_search`: the search breadth (None: the build's, from its manifest)."""
        base_dir, self.data_dir = Path(base_dir), Path(data_dir)
        manifest = json.loads((base_dir / MANIFEST).read_text())
        if corpus_digest(base_dir / CORPUS) != manifest["corpus_sha256"]:
            raise StoreError(f"{base_dir / CORPUS} does not match the index it was built with ({MANIFEST})")
        self.ef_search = ef_search or manifest["ef_search"]
        self.m, self.ef_construction = int(manifest.get("M", 16)), int(manifest.get("ef_construction", 200))
        index = HnswIndex.load(base_dir / INDEX, self.ef_search)
        self.dim = index.dim
        rows = [json.loads(line) for line in (base_dir / CORPUS).read_text(encoding="utf-8").splitlines()]
        if len(rows) != index.index.ntotal:
            raise StoreError(f"{CORPUS} has {len(rows)} documents, the index {index.index.ntotal}")
        self.collections: dict[str, _Collection] = {
            SHARED: _Collection(index, [r["id"] for r in rows], [r["text"] for r in rows])}
        self.applied: dict[tuple[str, str], int] = {}   # (collection, id) -> seq of the newest write applied
        self.dropped: dict[str, int] = {}               # collection -> seq of its newest drop
        self.last_seq = 0
        self.compact_bytes = int(compact_bytes)
        self.gen, self.offset = -1, 0
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._sync()

    @property
    def index(self) -> HnswIndex:
        """The shared corpus' index (the build's)."""
        return self._collection(SHARED).index

    def _collection(self, name: str) -> _Collection:
        found = self.collections.get(name)
        if found is None:
            from hotpath.runtime.retrieval.hnsw import _faiss

            faiss = _faiss()
            raw = faiss.IndexHNSWFlat(self.dim, self.m, faiss.METRIC_INNER_PRODUCT)
            raw.hnsw.efConstruction = self.ef_construction
            found = self.collections[name] = _Collection(HnswIndex(raw, self.ef_search), [], [])
        return found

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
            name = r.collection
            if r.seq <= self.dropped.get(name, 0):
                continue   # written before its collection was dropped
            if r.op == "drop":
                self.dropped[name] = r.seq
                self.collections.pop(name, None)
                for key in [key for key in self.applied if key[0] == name]:
                    del self.applied[key]
                continue
            key = (name, r.id)
            if r.seq <= self.applied.get(key, 0):
                continue
            self.applied[key] = r.seq
            if r.op == "upsert" and (r.vector is None or r.vector.shape != (self.dim,)):
                raise StoreError(f"write {r.seq} for {r.id!r} has no {self.dim}-d vector")
            coll = self.collections.get(name)
            if coll is not None:
                coll.remove(r.id)
            if r.op == "upsert":
                self._collection(name).add(r.id, r.document, r.vector)

    def _write(self, records: list[Record]) -> None:
        self.offset = append_records(self._wal(self.gen), records, self.offset)
        self._apply(records)
        if self.offset >= self.compact_bytes:
            self._compact()

    def _live(self, collection: str) -> dict:
        coll = self.collections.get(collection)
        return coll.label_of if coll is not None else {}

    # -- VectorStore ---------------------------------------------------------------------------------------
    def search(self, vectors: np.ndarray, k: int, collection: str = SHARED) -> Hits:
        """Top-k of `collection` and SHARED merged (an id in both: `collection`'s); SHARED alone for SHARED."""
        self._sync()
        vectors = np.asarray(vectors, dtype=np.float32)
        shared = self.collections.get(SHARED)
        own = self.collections.get(collection) if collection != SHARED else None
        empty = Hits([[""] * k for _ in vectors], np.full((len(vectors), k), -np.inf, dtype=np.float32),
                     [[""] * k for _ in vectors])
        shared_hits = shared.search(vectors, k, hide=own.label_of if own else None) if shared else empty
        if own is None or not own.label_of:
            return shared_hits
        return merge(own.search(vectors, k), shared_hits, k)

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str],
               collection: str = SHARED) -> None:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(len(ids), -1)
        self.write([("upsert", doc_id, doc, vec) for doc_id, vec, doc in zip(ids, vectors, documents)], collection)

    def delete(self, ids: Sequence[str], collection: str = SHARED) -> int:
        with self._locked():
            self._sync()
            live = self._live(collection)
            existed = len({i for i in ids if i in live})
            self._write([Record(self.last_seq + 1 + i, "delete", doc_id, collection=collection)
                         for i, doc_id in enumerate(ids)])
        return existed

    def write(self, ops: Sequence[tuple[str, str, str, np.ndarray | None]], collection: str = SHARED) -> list[bool]:
        """Several upserts and deletes of `collection`, in order, under one lock and one fsync (one execute()'s
        writes). `ops`: (op, id, document, vector); returns per op whether the id existed there before it."""
        with self._locked():
            self._sync()
            live, existed, records = set(self._live(collection)), [], []
            for i, (op, doc_id, doc, vec) in enumerate(ops):
                existed.append(doc_id in live)
                (live.add if op == "upsert" else live.discard)(doc_id)
                records.append(Record(self.last_seq + 1 + i, op, doc_id, doc if op == "upsert" else "",
                                      None if vec is None else np.asarray(vec, dtype=np.float32), collection))
            if records:
                self._write(records)
        return existed

    def drop_collection(self, collection: str) -> int:
        """Remove every document of `collection` with one durable "drop" record; returns how many there were."""
        with self._locked():
            self._sync()
            had = len(self._live(collection))
            self._write([Record(self.last_seq + 1, "drop", "", collection=collection)])
        return had

    def collection_names(self) -> dict[str, int]:
        """Live documents per collection (those that have any)."""
        self._sync()
        return {name: len(c.label_of) for name, c in sorted(self.collections.items()) if c.label_of}

    def count(self, collection: str | None = None) -> int:
        self._sync()
        if collection is not None:
            return len(self._live(collection))
        return sum(len(c.label_of) for c in self.collections.values())

    def get(self, doc_id: str, collection: str = SHARED) -> str | None:
        """The stored document of `doc_id` in `collection`, or None."""
        self._sync()
        coll = self.collections.get(collection)
        label = None if coll is None else coll.label_of.get(doc_id)
        return None if label is None else coll.docs[label]

    def compact(self) -> None:
        """Fold the WAL into a new snapshot generation (the newest write of every id, the newest drop of every
        dropped collection) and start an empty WAL."""
        with self._locked():
            self._compact()

    def _compact(self) -> None:   # the caller holds the lock
        self._sync()
        entries = [(seq, "drop", name, "") for name, seq in self.dropped.items()]
        entries += [(seq, "write", name, doc_id) for (name, doc_id), seq in self.applied.items()]
        records = []
        for seq, kind, name, doc_id in sorted(entries):
            if kind == "drop":
                records.append(Record(seq, "drop", "", collection=name))
                continue
            coll = self.collections.get(name)
            label = None if coll is None else coll.label_of.get(doc_id)
            records.append(Record(seq, "delete", doc_id, collection=name) if label is None else
                           Record(seq, "upsert", doc_id, coll.docs[label], coll.index.vector(label), name))
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
        return {"documents": self.count(), "collections": len(self.collection_names()), "generation": self.gen,
                "wal_bytes": self.offset, "pid": os.getpid()}
