"""Per-tenant collections of the in-process retrieval store: writes land in their collection
only, searches see their own collection plus the shared corpus, the WAL keeps each collection through a
kill -9, and `hotpath retrieval drop-collection` removes one while another process serves."""

import json
import os
import signal
import subprocess
import sys
import zlib

import numpy as np
import pytest

from hotpath.cli import main as cli_main
from hotpath.exporters.retrieval_build import write_base
from hotpath.exporters.retrieval_corpus import Document
from hotpath.runtime.retrieval.hnsw_store import HnswStore
from hotpath.runtime.retrieval.wal import _FRAME, read_records
from hotpath.runtime.tenancy import LOCAL, SHARED
from tests.unit.test_retrieval_wal import unit


@pytest.fixture
def base(tmp_path):
    vectors = unit(200, 0)
    write_base(tmp_path / "base", [Document(f"d{i}", f"doc {i}") for i in range(200)], vectors, 16, 100, 64)
    return tmp_path / "base", vectors


def ids_of(hits, row=0):
    return [i for i in hits.ids[row] if i]


def test_a_write_is_seen_by_its_collection_only(base, tmp_path):
    base_dir, vectors = base
    store = HnswStore(base_dir, tmp_path / "data", ef_search=400)
    q = unit(1, 9)
    assert store.write([("upsert", "mine", "alpha's note", q[0])], "alpha") == [False]
    assert ids_of(store.search(q, 1, "alpha")) == ["mine"]
    for other in ("beta", LOCAL, SHARED):
        assert "mine" not in ids_of(store.search(q, 200, other)), other
    # beta can neither delete nor replace alpha's document: its writes land in beta's collection
    assert store.delete(["mine"], "beta") == 0
    assert store.write([("upsert", "mine", "beta's", unit(1, 10)[0])], "beta") == [False]
    assert store.get("mine", "alpha") == "alpha's note" and store.get("mine", "beta") == "beta's"
    assert store.get("mine", SHARED) is None
    assert store.count("alpha") == store.count("beta") == 1 and store.count(SHARED) == 200
    assert store.count() == 202


def test_searches_merge_own_and_shared_by_score_and_own_wins_on_an_id(base, tmp_path):
    base_dir, vectors = base
    store = HnswStore(base_dir, tmp_path / "data", ef_search=400)
    q = vectors[:1]
    shared_top = ids_of(store.search(q, 5))
    assert shared_top[0] == "d0"
    # alpha replaces d0 for itself only, with a vector far from q, and adds one near q
    far = -q[0]
    near = (q[0] + 0.05 * unit(1, 3)[0]) / np.linalg.norm(q[0] + 0.05 * unit(1, 3)[0])
    store.write([("upsert", "d0", "alpha's d0", far), ("upsert", "a-near", "near", near)], "alpha")
    mine = store.search(q, 5, "alpha")
    assert ids_of(mine) == ["a-near"] + shared_top[1:5]               # shared d0 is hidden, not merged in
    assert (np.diff(mine.scores[0]) <= 1e-6).all()
    everything = store.search(q, 202, "alpha")
    assert ids_of(everything).count("d0") == 1 and ids_of(everything)[-1] == "d0"   # alpha's, last
    assert everything.documents[0][ids_of(everything).index("d0")] == "alpha's d0"
    assert ids_of(store.search(q, 5, "beta")) == shared_top                          # beta sees the shared d0
    assert ids_of(store.search(q, 5, SHARED)) == shared_top                          # an admin: shared only


def test_deleting_a_shared_id_from_a_tenant_removes_nothing(base, tmp_path):
    base_dir, vectors = base
    store = HnswStore(base_dir, tmp_path / "data")
    assert store.write([("delete", "d1", "", None)], "alpha") == [False]
    assert store.delete(["d1"], LOCAL) == 0
    assert store.get("d1", SHARED) == "doc 1" and ids_of(store.search(vectors[1:2], 1, "alpha")) == ["d1"]
    assert store.write([("delete", "d1", "", None)], SHARED) == [True]          # an admin deletes shared
    assert "d1" not in ids_of(store.search(vectors[1:2], 5, "alpha"))


def test_drop_collection_reaches_other_processes_and_survives_compaction(base, tmp_path):
    base_dir, _ = base
    data = tmp_path / "data"
    serving, admin = HnswStore(base_dir, data), HnswStore(base_dir, data)
    serving.write([("upsert", f"a{i}", f"alpha {i}", v) for i, v in enumerate(unit(5, 1))], "alpha")
    serving.write([("upsert", "b0", "beta 0", unit(1, 2)[0])], "beta")
    assert admin.drop_collection("alpha") == 5
    q = unit(5, 1)
    assert not any(i.startswith("a") for i in ids_of(serving.search(q, 10, "alpha")))   # seen on its next call
    assert serving.count("alpha") == 0 and serving.get("b0", "beta") == "beta 0"
    serving.write([("upsert", "a9", "after the drop", q[0])], "alpha")                  # a fresh collection
    admin.compact()
    assert [r.op for r in read_records(data / "snapshot-1.log")[0]] == ["upsert", "drop", "upsert"]   # seq order: b0, the drop, a9
    for store in (serving, HnswStore(base_dir, data)):
        assert store.count("alpha") == 1 and store.get("a9", "alpha") == "after the drop"
        assert store.get("a0", "alpha") is None and store.get("b0", "beta") == "beta 0"
        assert store.count(SHARED) == 200


def test_records_from_before_collections_replay_into_shared(base, tmp_path):
    base_dir, _ = base
    data = tmp_path / "data"
    data.mkdir()
    v = unit(1, 4)[0]
    old = [(json.dumps({"seq": 1, "op": "upsert", "id": "legacy", "document": "old format"}).encode() + b"\0"
            + v.astype("<f4").tobytes()),
           json.dumps({"seq": 2, "op": "delete", "id": "d3"}).encode() + b"\0"]
    (data / "wal-0.log").write_bytes(b"".join(_FRAME.pack(len(p), zlib.crc32(p)) + p for p in old))
    store = HnswStore(base_dir, data)
    assert store.get("legacy", SHARED) == "old format" and store.get("d3", SHARED) is None
    assert store.count(SHARED) == 200 and store.collection_names() == {SHARED: 200}
    assert ids_of(store.search(v[None, :], 1, "alpha")) == ["legacy"]
    store.write([("upsert", "new", "new format", unit(1, 5)[0])], "alpha")   # appended after the old records
    again = HnswStore(base_dir, data)
    assert again.get("legacy", SHARED) == "old format" and again.get("new", "alpha") == "new format"


WRITER = """
import sys
import numpy as np
from hotpath.runtime.retrieval.hnsw_store import HnswStore
base, data = sys.argv[1:3]
store = HnswStore(base, data)
rng = np.random.default_rng(7)
for collection in ("alpha", "beta"):
    v = rng.normal(size=(3, 16)).astype(np.float32)
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    store.write([("upsert", f"doc{i}", f"{collection} doc {i}", v[i]) for i in range(3)], collection)
store.write([("delete", "doc2", "", None)], "beta")
store.write([("upsert", "d5", "alpha's d5", v[0])], "alpha")
print("acknowledged", flush=True)
sys.stdin.read()   # still running, never closing the store: the kill comes now
"""


def test_acknowledged_writes_of_every_collection_survive_kill_9(base, tmp_path):
    base_dir, _ = base
    data = tmp_path / "data"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(base_dir), str(data)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=os.getcwd())
    try:
        assert writer.stdout.readline().strip() == "acknowledged"
        os.kill(writer.pid, signal.SIGKILL)
        assert writer.wait(10) == -signal.SIGKILL
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    store = HnswStore(base_dir, data)
    assert [store.get(f"doc{i}", "alpha") for i in range(3)] == [f"alpha doc {i}" for i in range(3)]
    assert [store.get(f"doc{i}", "beta") for i in range(3)] == ["beta doc 0", "beta doc 1", None]
    assert store.get("d5", "alpha") == "alpha's d5" and store.get("d5", SHARED) == "doc 5"
    assert store.collection_names() == {"alpha": 4, "beta": 2, SHARED: 200}
    assert store.get("doc0", SHARED) is None and store.get("doc0", LOCAL) is None


def test_the_drop_collection_command(base, tmp_path, capsys):
    base_dir, _ = base
    data = tmp_path / "data"
    serving = HnswStore(base_dir, data)   # the model, running
    serving.write([("upsert", "x", "alpha x", unit(1, 1)[0])], "alpha")
    serving.write([("upsert", "y", "beta y", unit(1, 2)[0])], "beta")
    where = ["--store", "hnsw", "--data-dir", str(data), "--export", str(base_dir)]
    assert cli_main(["retrieval", "drop-collection", "alpha", *where]) == 0
    assert "dropped collection alpha: 1 documents" in capsys.readouterr().out
    assert serving.get("x", "alpha") is None and serving.get("y", "beta") == "beta y"
    assert "x" not in ids_of(serving.search(unit(1, 1), 3, "alpha"))
    assert cli_main(["retrieval", "drop-collection", "shared", *where]) == 1
    assert "refusing to drop the shared corpus" in capsys.readouterr().err
    assert cli_main(["retrieval", "drop-collection", "Not A Name", *where]) == 1
    assert serving.count(SHARED) == 200
    assert cli_main(["retrieval", "collections", *where]) == 0
    assert capsys.readouterr().out.split() == ["beta", "1", "shared", "200"]
    assert cli_main(["retrieval", "drop-collection", "shared", "--force", *where]) == 0
    assert serving.count(SHARED) == 0 and HnswStore(base_dir, data).count() == 1
