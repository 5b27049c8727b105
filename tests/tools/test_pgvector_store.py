"""PgVectorStore against a real Postgres + pgvector (the pgserver wheel's binaries; no mock).

If the server cannot start, every test here errors: nothing is skipped.
"""

from __future__ import annotations

import numpy as np
import pytest

from hotpath.errors import HotpathError
from hotpath.retrieval.pgserver_local import LocalPostgres
from hotpath.runtime.retrieval.pgvector_store import DSN_ENV, PgVectorStore, StoreUnavailableError

DIM = 16


@pytest.fixture
def table(request) -> str:
    return request.node.name.lower().replace("[", "_").replace("]", "").replace("-", "_")[:60]


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def corpus(n: int, seed: int = 0) -> tuple[list[str], np.ndarray, list[str]]:
    vectors = unit(np.random.default_rng(seed).standard_normal((n, DIM)))
    return [f"doc-{i}" for i in range(n)], vectors, [f"text of document {i}" for i in range(n)]


def exact(ids: list[str], vectors: np.ndarray, queries: np.ndarray, k: int) -> tuple[list[list[str]], np.ndarray]:
    scores = queries @ vectors.T
    order = np.argsort(-scores, axis=1)[:, :k]
    return [[ids[j] for j in row] for row in order], np.take_along_axis(scores, order, axis=1)


def store(pg: LocalPostgres, table: str, **kw) -> PgVectorStore:
    # ef_search above the corpus size: HNSW then finds the exact neighbours of these small corpora.
    return PgVectorStore(pg.dsn, DIM, table=table, ef_search=kw.pop("ef_search", 400), **kw)


def test_search_equals_exact_search(pg, table):
    ids, vectors, docs = corpus(300)
    s = store(pg, table)
    s.upsert(ids[:150], vectors[:150], docs[:150])
    s.upsert(ids[150:], vectors[150:], docs[150:])
    queries = unit(np.random.default_rng(1).standard_normal((20, DIM)))
    hits = s.search(queries, 10)
    want_ids, want_scores = exact(ids, vectors, queries, 10)
    assert hits.ids == want_ids
    np.testing.assert_allclose(hits.scores, want_scores, atol=1e-5)
    assert (np.diff(hits.scores, axis=1) <= 0).all()
    assert hits.documents[3] == [docs[ids.index(i)] for i in want_ids[3]]
    assert s.count() == 300
    s.close()


def test_replace_and_delete_match_exact_search(pg, table):
    ids, vectors, docs = corpus(200, seed=2)
    s = store(pg, table)
    s.upsert(ids, vectors, docs)
    fresh = unit(np.random.default_rng(3).standard_normal((20, DIM)))
    s.upsert(ids[:20], fresh, [f"replaced {i}" for i in range(20)])
    vectors = vectors.copy()
    vectors[:20] = fresh
    assert s.delete(ids[180:] + ["never-there"]) == 20
    live_ids, live = ids[:180], vectors[:180]
    assert s.count() == 180

    hits = s.search(fresh[:5], 1)
    assert [row[0] for row in hits.ids] == ids[:5]
    assert [row[0] for row in hits.documents] == [f"replaced {i}" for i in range(5)]
    queries = unit(np.random.default_rng(4).standard_normal((15, DIM)))
    want_ids, want_scores = exact(live_ids, live, queries, 10)
    got = s.search(queries, 10)
    assert got.ids == want_ids
    np.testing.assert_allclose(got.scores, want_scores, atol=1e-5)
    assert s.delete(ids[180:]) == 0
    s.close()


def test_repeated_id_in_one_batch_keeps_the_last(pg, table):
    _, vectors, _ = corpus(3, seed=5)
    s = store(pg, table)
    s.upsert(["a", "a", "b"], vectors, ["first", "second", "other"])
    assert s.count() == 2
    hits = s.search(vectors[1:2], 1)
    assert hits.ids == [["a"]] and hits.documents == [["second"]]
    assert hits.scores[0, 0] == pytest.approx(1.0, abs=1e-6)


def test_short_rows_are_padded_and_k_above_ef_search_is_complete(pg, table):
    ids, vectors, docs = corpus(50, seed=6)
    s = store(pg, table, ef_search=8)
    s.upsert(ids, vectors, docs)
    assert [len([i for i in row if i]) for row in s.search(vectors[:2], 30).ids] == [30, 30]
    hits = s.search(vectors[:1], 60)
    assert hits.ids[0][50:] == [""] * 10 and hits.documents[0][50:] == [""] * 10
    assert np.isneginf(hits.scores[0, 50:]).all() and np.isfinite(hits.scores[0, :50]).all()
    assert sorted(hits.ids[0][:50]) == sorted(ids)


def test_bad_input_is_a_value_error(pg, table):
    s = store(pg, table)
    ids, vectors, docs = corpus(2)
    with pytest.raises(ValueError):
        s.search(np.zeros((1, DIM + 1), np.float32), 3)
    with pytest.raises(ValueError):
        s.search(vectors, 0)
    with pytest.raises(ValueError):
        s.upsert(ids, vectors, ["ok", "nul\x00inside"])
    with pytest.raises(ValueError):
        s.upsert(ids, vectors[:1], docs)
    with pytest.raises(ValueError):
        s.upsert(["", "x"], vectors, docs)
    assert s.count() == 0


def test_replicas_see_each_others_writes_at_once(pg, table):
    ids, vectors, docs = corpus(40, seed=7)
    first, second = store(pg, table), store(pg, table)
    first.upsert(ids, vectors, docs)
    assert second.search(vectors[7:8], 1).ids == [[ids[7]]]
    second.delete([ids[7]])
    assert ids[7] not in first.search(vectors[7:8], 5).ids[0]


def test_load_replaces_everything_and_builds_the_index(pg, table):
    ids, vectors, docs = corpus(500, seed=8)
    s = store(pg, table, m=8, ef_construction=32)
    s.upsert(["old"], vectors[:1], ["old document"])
    timings = s.load(ids, vectors, docs)
    assert set(timings) == {"copy_s", "index_s"} and min(timings.values()) > 0
    assert s.count() == 500
    sizes = s.sizes()
    assert sizes["table_bytes"] > 500 * DIM * 4 and sizes["index_bytes"] > 0
    assert s.search(vectors[:1], 1).ids == [[ids[0]]]
    options = s._conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s", (f"{table}_hnsw",)).fetchone()[0]
    assert sorted(options) == ["ef_construction=32", "m=8"]
    with pytest.raises(ValueError):
        s.load(["same", "same"], vectors[:2], docs[:2])


def test_from_params_reads_the_spec_and_the_environment(pg, table, monkeypatch):
    params = {"pg_dsn": pg.dsn, "dim": str(DIM), "pg_table": table, "m": "12", "ef_construction": "48",
              "ef_search": "77"}
    s = PgVectorStore.from_params(params)
    assert (s.dim, s.table, s.m, s.ef_construction, s.ef_search) == (DIM, table, 12, 48, 77)
    s.search(unit(np.ones((1, DIM))), 5)
    assert s._conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "77"
    monkeypatch.setenv(DSN_ENV, pg.dsn)
    assert PgVectorStore.from_params({"dim": DIM, "pg_table": table}).count() == 0
    unreachable = "postgresql://postgres@127.0.0.1:1/postgres"
    assert PgVectorStore.from_params({"pg_dsn": unreachable, "dim": DIM, "pg_table": table}).dsn == pg.dsn  # env first
    assert PgVectorStore.from_params({"pg_dsn": pg.dsn, "pg_table": table}).dim == DIM   # the table's
    monkeypatch.delenv(DSN_ENV)
    with pytest.raises(ValueError, match="pg_dsn"):
        PgVectorStore.from_params({"dim": DIM})
    with pytest.raises(ValueError, match="dim"):
        PgVectorStore.from_params({"pg_dsn": pg.dsn, "pg_table": "no_such_table"})
    with pytest.raises(HotpathError, match="vector"):
        PgVectorStore(pg.dsn, DIM * 2, table=table)


def test_acknowledged_writes_survive_a_crash_and_the_store_reconnects(pg, table):
    ids, vectors, docs = corpus(120, seed=9)
    s = store(pg, table)
    s.upsert(ids, vectors, docs)
    s.upsert(ids[:1], vectors[1:2], ["moved"])
    s.delete(ids[100:])
    pg.kill()   # SIGKILL to the postmaster and its backends: no shutdown checkpoint
    with pytest.raises(StoreUnavailableError) as err:
        s.search(vectors[:1], 3)
    assert isinstance(err.value, ConnectionError) and not isinstance(err.value, ValueError)
    with pytest.raises(StoreUnavailableError):
        s.upsert(ids[:1], vectors[:1], ["lost"])
    pg.start()
    assert s.count() == 100     # the same object, reconnected
    hits = s.search(vectors[1:2], 2)
    assert sorted(hits.ids[0]) == sorted([ids[0], ids[1]]) and "moved" in hits.documents[0]
    assert s.search(vectors[110:111], 100).ids[0].count("") == 0 and ids[110] not in s.search(vectors[110:111], 100).ids[0]


def test_a_restarted_server_keeps_writes_and_broken_connections_are_retried(pg, table):
    ids, vectors, docs = corpus(30, seed=10)
    s = store(pg, table)
    s.upsert(ids, vectors, docs)
    pg.restart()   # the store's open connection is now broken: the next call reconnects and retries
    assert s.search(vectors[4:5], 1).ids == [[ids[4]]]
    s.close()
    assert store(pg, table).count() == 30


def test_an_unreachable_server_is_unavailable_not_bad_input():
    from hotpath.server.ports import free_ports

    with pytest.raises(StoreUnavailableError, match="cannot connect"):
        PgVectorStore(f"postgresql://postgres@127.0.0.1:{free_ports(1)[0]}/postgres", DIM, connect_timeout_s=2)


def test_write_applies_ops_in_order_and_reports_what_existed(pg, table):
    ids, vectors, docs = corpus(4, seed=11)
    s = store(pg, table)
    s.upsert(ids[:1], vectors[:1], docs[:1])
    existed = s.write([("upsert", ids[0], "new text", vectors[1]), ("upsert", ids[2], docs[2], vectors[2]),
                       ("delete", ids[2], "", None), ("delete", ids[3], "", None), ("upsert", ids[3], "x", vectors[3])])
    assert existed == [True, False, True, False, False]
    assert (s.get(ids[0]), s.get(ids[2]), s.get(ids[3]), s.count()) == ("new text", None, "x", 2)
    assert s.search(vectors[1:2], 1).ids == [[ids[0]]]
    with pytest.raises(ValueError):
        s.write([("upsert", "y", "doc", vectors[0]), ("rename", "y", "", None)])
    assert s.get("y") is None


def test_seeded_once_from_the_build_output_with_its_vectors(pg, table, tmp_path):
    from hotpath.exporters.retrieval_build import write_base
    from hotpath.exporters.retrieval_corpus import Document
    from hotpath.runtime.retrieval.pgvector_seed import build_arrays

    ids, vectors, docs = corpus(64, seed=12)
    write_base(tmp_path, [Document(i, d) for i, d in zip(ids, docs)], vectors, m=8, ef_construction=32, ef_search=64)
    got_ids, got_vectors, got_docs = build_arrays(tmp_path)
    assert (got_ids, got_docs) == (ids, docs)
    np.testing.assert_array_equal(got_vectors, vectors)

    params = {"pg_dsn": pg.dsn, "pg_table": table, "ef_search": "200"}
    first = PgVectorStore.from_params(params, base_dir=tmp_path)   # dim from the build's manifest
    assert (first.dim, first.m, first.ef_construction, first.ef_search) == (DIM, 8, 32, 200)   # the build's, but ef_search
    assert first.count() == 64
    assert first.search(vectors[5:6], 1).ids == [[ids[5]]]
    first.delete(ids[:10])
    again = PgVectorStore.from_params(params, base_dir=tmp_path)   # a second replica: no second seed
    assert again.count() == 54


# -- collections: the SQL keeps tenants apart ------------------------------------------------------

def test_collections_are_apart_and_searches_merge_own_and_shared(pg, table):
    ids, vectors, docs = corpus(100, seed=13)
    s = store(pg, table)
    s.load(ids, vectors, docs)                                   # the built corpus: "shared"
    q = vectors[:1]
    shared_top = s.search(q, 5).ids[0]
    assert shared_top[0] == ids[0]
    near = unit(vectors[:1] + 0.05 * unit(np.random.default_rng(14).standard_normal((1, DIM))))
    assert s.write([("upsert", ids[0], "alpha's own", -q[0]), ("upsert", "a-near", "near", near[0])],
                   "alpha") == [False, False]                    # alpha shadows ids[0] for itself only
    mine = s.search(q, 5, "alpha")
    assert mine.ids[0] == ["a-near"] + shared_top[1:5]           # shared ids[0] hidden, alpha's far away
    assert (np.diff(mine.scores[0]) <= 1e-6).all()
    everything = s.search(q, 101, "alpha")   # 100 shared - 1 hidden + 2 own
    assert everything.ids[0].count(ids[0]) == 1 and everything.ids[0][-1] == ids[0]
    assert everything.documents[0][-1] == "alpha's own"
    for other in ("beta", "local", "shared"):
        assert s.search(q, 5, other).ids[0] == shared_top, other
        assert "a-near" not in s.search(q, 102, other).ids[0]
    # another tenant cannot delete or replace alpha's, nor a shared document
    assert s.delete(["a-near", ids[1]], "beta") == 0
    assert s.write([("delete", ids[2], "", None)], "alpha") == [False]
    assert s.get("a-near", "alpha") == "near" and s.get(ids[2]) == docs[2] and s.get("a-near") is None
    assert s.collection_names() == {"alpha": 2, "shared": 100}
    s.upsert(["b"], near, ["beta's"], "beta")
    assert (s.count("alpha"), s.count("beta"), s.count("shared"), s.count()) == (2, 1, 100, 103)
    assert s.drop_collection("alpha") == 2
    assert s.collection_names() == {"beta": 1, "shared": 100} and s.search(q, 1, "alpha").ids == [[ids[0]]]
    s.load(ids[:50], vectors[:50], docs[:50])                    # a rebuilt corpus keeps the tenants
    assert s.collection_names() == {"beta": 1, "shared": 50}


def test_every_statement_names_its_collection(pg, table):
    """The partition is in the SQL: the key is (collection, id), and the text of each write and search carries
    a collection condition (a statement without one would fail this, whatever the Python around it does)."""
    s = store(pg, table)
    key = s._conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND "
                          "contype = 'p'", (table,)).fetchone()[0]
    assert key == "PRIMARY KEY (collection, id)"
    seen = []
    real = s._conn.execute

    def spy(query, *args, **kwargs):
        text = query if isinstance(query, str) else query.as_string(s._conn)
        seen.append(text)
        return real(query, *args, **kwargs)
    s._conn.execute = spy
    _, vectors, _ = corpus(2, seed=15)
    s.write([("upsert", "x", "doc", vectors[0]), ("delete", "y", "", None)], "alpha")
    s.upsert(["z"], vectors[1:], ["z"], "alpha")
    s.delete(["z"], "alpha")
    s.get("x", "alpha")
    s.search(vectors, 3, "alpha")
    s.drop_collection("alpha")
    statements = [t for t in seen if table in t]
    assert len(statements) == 7
    assert all("collection = %s" in t or "collection = ANY(%s)" in t or "(collection, id" in t for t in statements)
    assert all("collection" in t for t in statements)


def test_a_table_from_before_collections_is_migrated_once(pg, table):
    import psycopg
    from pgvector.psycopg import register_vector

    ids, vectors, docs = corpus(20, seed=16)
    with psycopg.connect(pg.dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
        conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY, embedding vector({DIM}) NOT NULL, "
                     "document text NOT NULL)")
        conn.execute(f"CREATE INDEX {table}_hnsw ON {table} USING hnsw (embedding vector_ip_ops)")
        for row in zip(ids, vectors, docs):
            conn.execute(f"INSERT INTO {table} (id, embedding, document) VALUES (%s, %s, %s)", row)
    s = store(pg, table)                      # migrates: the old rows become the shared corpus
    again = store(pg, table)                  # a second replica: nothing left to do
    assert again.collection_names() == {"shared": 20} and s.get(ids[3]) == docs[3]
    assert s.search(vectors[3:4], 1, "alpha").ids == [[ids[3]]]
    s.upsert([ids[3]], vectors[4:5], ["alpha's"], "alpha")          # the same id in another collection
    assert s.get(ids[3]) == docs[3] and s.get(ids[3], "alpha") == "alpha's"
    key = s._conn.execute("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conrelid = %s::regclass AND "
                          "contype = 'p'", (table,)).fetchone()[0]
    assert key == "PRIMARY KEY (collection, id)"


def test_acknowledged_writes_of_every_collection_survive_a_crash(pg, table):
    ids, vectors, docs = corpus(10, seed=17)
    s = store(pg, table)
    s.upsert(ids[:5], vectors[:5], docs[:5], "alpha")
    s.upsert(ids[:3], vectors[5:8], ["beta"] * 3, "beta")
    s.delete(ids[:1], "beta")
    pg.kill()
    pg.start()
    assert s.collection_names() == {"alpha": 5, "beta": 2}
    assert s.get(ids[0], "alpha") == docs[0] and s.get(ids[0], "beta") is None and s.get(ids[1], "beta") == "beta"


def test_the_drop_collection_command_on_pgvector(pg, table, capsys):
    from hotpath.cli import main as cli_main

    ids, vectors, docs = corpus(6, seed=18)
    serving = store(pg, table)            # a replica, running
    serving.load(ids[:3], vectors[:3], docs[:3])
    serving.upsert(ids[3:5], vectors[3:5], docs[3:5], "alpha")
    serving.upsert(ids[5:], vectors[5:], docs[5:], "beta")
    where = ["--store", "pgvector", "--pg-dsn", pg.dsn, "--pg-table", table]
    assert cli_main(["retrieval", "drop-collection", "alpha", *where]) == 0
    assert "dropped collection alpha: 2 documents" in capsys.readouterr().out
    assert serving.collection_names() == {"beta": 1, "shared": 3}
    assert ids[3] not in serving.search(vectors[3:4], 6, "alpha").ids[0]
    assert cli_main(["retrieval", "drop-collection", "shared", *where]) == 1
    assert serving.count("shared") == 3
    assert cli_main(["retrieval", "collections", *where]) == 0
    assert capsys.readouterr().out.split() == ["beta", "1", "shared", "3"]
