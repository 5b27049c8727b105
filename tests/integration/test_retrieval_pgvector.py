"""The `retrieval` endpoint on Postgres + pgvector (store = "pgvector"): the endpoint's own tests
(tests/integration/test_retrieval.py, imported below and run against this module's fixtures; pytest
runs them in this module's order, the server-stopping durability test last), then
what only a shared store does: two Triton replicas see each other's writes at once, and a Postgres
that dies is a server fault until it is back, when the endpoint reconnects by itself.

A real Postgres 16 + pgvector from the pgserver wheel (hotpath.retrieval.pgserver_local); if it cannot
start, these tests error (nothing is skipped). The table is seeded from the `retrieval` build output
(its documents and vectors) before the servers start.
"""

import uuid

import pytest

from hotpath.client import RetrievalClient, ServerUnavailableError
from hotpath.retrieval.pg_variant import SOURCE, build_dir, pgvector_repository
from hotpath.runtime.retrieval.pgvector_store import PgVectorStore
from tests.integration import test_retrieval as endpoint_tests
from tests.integration.test_retrieval import (  # noqa: F401  (collected here too, on pgvector)
    test_bad_input_fails_alone_in_a_batch,
    test_bad_input_is_invalid_argument,
    test_cli_search,
    test_default_k_and_k,
    test_known_neighbours,
    test_scores_are_text_embedding_cosines,
    test_writes_are_visible_at_once,
)

TABLE = "retrieval_documents"



@pytest.fixture(scope="module")
def repo(pg, tmp_path_factory):
    seeded = PgVectorStore.from_params({"pg_dsn": pg.dsn, "pg_table": TABLE}, base_dir=build_dir())
    seeded.close()
    # The endpoint under its own name (the imported tests address "retrieval"), configured for pgvector.
    return pgvector_repository(tmp_path_factory.mktemp("retrieval-pg-repo") / "r", pg.dsn, TABLE,
                               models=[m for m in endpoint_tests.MODELS if m != SOURCE], name=SOURCE)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("retrieval-pg-data")   # the in-process store's WAL dir: unused here


@pytest.fixture(scope="module")
def server(repo, data_dir):   # as the endpoint tests' fixture, on this module's repo
    s = endpoint_tests._start(data_dir, repo)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    with RetrievalClient(server.grpc_url) as c:
        yield c


def test_the_table_holds_the_built_corpus(pg, server):
    import json

    export = build_dir()
    manifest = json.loads((export / "manifest.json").read_text())
    store = PgVectorStore.from_params({"pg_dsn": pg.dsn, "pg_table": TABLE})
    try:
        assert store.count() >= manifest["documents"] > 1000
        options = store._call(lambda conn: conn.execute("SELECT reloptions FROM pg_class WHERE relname = %s",
                                                        (f"{TABLE}_hnsw",)).fetchone()[0])
        assert sorted(options) == sorted([f"m={manifest['M']}", f"ef_construction={manifest['ef_construction']}"])
    finally:
        store.close()


def test_replicas_share_one_index(server, repo, data_dir):
    """A second Triton on the same Postgres: a write through either is found through the other at once."""
    other = endpoint_tests._start(data_dir, repo)
    doc_id = f"fleet-{uuid.uuid4().hex}"
    text = "a shared catalogue entry about narwhal tusk polishing kits"
    try:
        with RetrievalClient(server.grpc_url) as a, RetrievalClient(other.grpc_url) as b:
            assert a.upsert([doc_id], [text]) == [False]
            top = b.search([text], k=1)[0][0]
            assert (top.id, top.document) == (doc_id, text)
            assert b.delete([doc_id]) == [True]
            assert doc_id not in [h.id for h in a.search([text], k=10)[0]]
    finally:
        other.stop()


def test_a_dead_postgres_is_a_server_fault_and_the_endpoint_reconnects(pg, server):
    query = "compress files with GNU gzip"
    with RetrievalClient(server.grpc_url) as c:
        before = [h.id for h in c.search([query], k=5)[0]]
        pg.kill()
        try:
            with pytest.raises(ServerUnavailableError):   # UNAVAILABLE (retried, then raised), not bad input
                c.search([query], k=5)
        finally:
            pg.start()
        assert [h.id for h in c.search([query], k=5)[0]] == before   # same server, same model: reconnected


def test_writes_survive_a_stub_kill_and_a_restart(server, repo, data_dir):
    """The endpoint's own durability test, last: it stops the module's server."""
    endpoint_tests.test_writes_survive_a_stub_kill_and_a_restart(server, repo, data_dir)
