"""The retrieval store's write-ahead log and its replay: torn tails, order, compaction, other processes."""

import os

import numpy as np
import pytest

from hotpath.exporters.retrieval_build import exact_top_k, measure_recall, recall_at_k, write_base
from hotpath.exporters.retrieval_corpus import Document
from hotpath.runtime.retrieval.hnsw_store import CORPUS, HnswStore, StoreError
from hotpath.runtime.retrieval.wal import Record, append_records, read_records

DIM = 16


def unit(rows: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(rows, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def base(tmp_path):
    vectors = unit(300, 0)
    write_base(tmp_path / "base", [Document(f"d{i}", f"doc {i}") for i in range(300)], vectors, 16, 100, 64)
    return tmp_path / "base", vectors


def test_records_round_trip_and_a_torn_tail_is_ignored(tmp_path):
    path = tmp_path / "wal.log"
    recs = [Record(1, "upsert", "a", "first", unit(1, 1)[0]), Record(2, "delete", "b"),
            Record(3, "upsert", "ü", "zweite ✓", unit(1, 2)[0])]
    end = append_records(path, recs, 0)
    got, offset = read_records(path)
    assert offset == end == path.stat().st_size
    assert [(r.seq, r.op, r.id, r.document) for r in got] == [(r.seq, r.op, r.id, r.document) for r in recs]
    np.testing.assert_array_equal(got[2].vector, recs[2].vector)
    with open(path, "ab") as f:                  # a crash mid-append: half of a fourth record
        f.write(Record(4, "upsert", "c", "torn", unit(1, 3)[0]).encode()[:-7])
    got, offset = read_records(path)
    assert [r.seq for r in got] == [1, 2, 3] and offset == end
    # The next append drops the torn bytes, so what follows is readable.
    append_records(path, [Record(4, "delete", "a")], offset)
    assert [r.seq for r in read_records(path)[0]] == [1, 2, 3, 4]


def test_a_corrupt_record_ends_the_log(tmp_path):
    path = tmp_path / "wal.log"
    end = append_records(path, [Record(1, "delete", "a"), Record(2, "delete", "b")], 0)
    data = bytearray(path.read_bytes())
    data[end - 2] ^= 0xFF                        # a flipped byte inside the second record's payload
    path.write_bytes(bytes(data))
    assert [r.seq for r in read_records(path)[0]] == [1]


def test_writes_are_searchable_at_once_and_replayed_in_order(base, tmp_path):
    base_dir, vectors = base
    data = tmp_path / "data"
    store = HnswStore(base_dir, data)
    assert store.search(vectors[:1], 1).ids == [["d0"]]
    q = unit(1, 9)
    store.write([("upsert", "new", "v1", q[0]), ("upsert", "new", "v2", q[0]), ("delete", "d0", "", None)])
    hits = store.search(np.vstack([q, vectors[:1]]), 1)
    assert hits.ids[0] == ["new"] and hits.documents[0] == ["v2"] and hits.ids[1] != ["d0"]
    assert store.count() == 300
    reopened = HnswStore(base_dir, data)         # a restart: the WAL replays in order
    assert reopened.get("new") == "v2" and reopened.get("d0") is None and reopened.count() == 300
    assert reopened.search(q, 1).ids == [["new"]]


def test_compaction_keeps_every_write_and_other_processes_follow(base, tmp_path):
    base_dir, vectors = base
    data = tmp_path / "data"
    a, b = HnswStore(base_dir, data), HnswStore(base_dir, data)   # two model instances, one data dir
    a.write([("upsert", f"n{i}", f"doc n{i}", v) for i, v in enumerate(unit(20, 5))])
    a.delete(["d1", "d2", "n3"])
    assert b.get("n4") == "doc n4" and b.get("d1") is None       # b tails a's writes before reading
    b.compact()
    assert sorted(p.name for p in data.iterdir()) == ["CURRENT", "lock", "snapshot-1.log", "wal-1.log"]
    assert (data / "wal-1.log").stat().st_size == 0
    a.upsert(["n3"], unit(1, 6), ["back"])                        # a writes after b's compaction
    assert b.get("n3") == "back"
    fresh = HnswStore(base_dir, data)
    assert fresh.count() == 300 + 20 - 2 and fresh.get("n3") == "back" and fresh.get("d2") is None
    assert fresh.search(unit(1, 6), 1).ids == [["n3"]]


def test_compaction_by_size_and_a_rebuilt_base_keeps_the_writes(base, tmp_path):
    base_dir, vectors = base
    store = HnswStore(base_dir, tmp_path / "data", compact_bytes=1)   # every write compacts
    store.upsert(["x"], unit(1, 7), ["kept"])
    store.upsert(["y"], unit(1, 8), ["kept too"])
    assert (tmp_path / "data" / "CURRENT").read_text() == "2"
    write_base(tmp_path / "rebuilt", [Document("other", "another corpus")], unit(1, 3), 16, 100, 64)
    rebuilt = HnswStore(tmp_path / "rebuilt", tmp_path / "data")
    assert rebuilt.count() == 3 and rebuilt.get("x") == "kept"


def test_a_corpus_that_does_not_match_its_index_is_refused(base):
    base_dir, _ = base
    with open(base_dir / CORPUS, "a") as f:
        f.write('{"id": "extra", "text": "x"}\n')
    with pytest.raises(StoreError, match="does not match"):
        HnswStore(base_dir, base_dir.parent / "data")


def test_rows_past_the_live_documents_are_padded(base, tmp_path):
    base_dir, vectors = base
    store = HnswStore(base_dir, tmp_path / "data")
    hits = store.search(vectors[:2], 301)
    assert hits.ids[0][-1] == "" and hits.scores[0, -1] == -np.inf
    assert np.all(np.diff(hits.scores[0, :300]) <= 1e-6)


def test_recall_is_measured_against_exact_search(base):
    base_dir, vectors = base
    truth = exact_top_k(vectors, vectors[:5], 3)
    assert truth[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert recall_at_k(truth, truth) == 1.0 and recall_at_k(truth[:, ::-1] + 1000, truth) == 0.0
    store = HnswStore(base_dir, base_dir.parent / "d")
    assert measure_recall(store.index, vectors, unit(50, 4)) > 0.9
    assert os.path.exists(base_dir / "index.faiss")
