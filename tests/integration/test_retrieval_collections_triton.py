"""Per-tenant collections of the `retrieval` endpoint through a real tritonserver, on both stores:
`retrieval` (the in-process HNSW index + WAL) and `retrieval_pg` (the same model on a real Postgres + pgvector).

The test sets the gateway's headers (x-hotpath-collection, x-hotpath-tenant) itself on each gRPC and HTTP
call; tritonserver forwards them to the model as request parameters (hotpath.server.command). A tenant's
writes stay in its collection, its searches see it plus the shared corpus, a request naming its collection
twice fails alone, the per-tenant usage counters move, acknowledged writes of two collections survive a
kill -9 of the stub, and `hotpath retrieval drop-collection` empties one collection under a running server.
"""

import re
import urllib.request
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from hotpath.cli import main as cli_main
from hotpath.retrieval.pg_variant import VARIANT, build_dir, pgvector_repository
from hotpath.runtime.retrieval.pgvector_store import PgVectorStore
from tests.integration import test_retrieval as endpoint_tests
from tests.transcript import Transcript

TABLE = "retrieval_collections"
MODELS = ("retrieval", VARIANT)
SEEN = Transcript("retrieval_collections", "Cross-collection attempts on both stores (the gateway's headers set by "
                  "the test, straight to tritonserver)", ("store, door", "tried", "answer"))
STORES = {"retrieval": "co-located HNSW", VARIANT: "pgvector"}


@pytest.fixture(scope="module", autouse=True)
def _transcript():
    yield
    SEEN.write("tests/integration/test_retrieval_collections_triton.py")



@pytest.fixture(scope="module")
def repo(pg, built_repository, tmp_path_factory):   # built_repository: model.py copied from python_backends/
    PgVectorStore.from_params({"pg_dsn": pg.dsn, "pg_table": TABLE}, base_dir=build_dir()).close()
    return pgvector_repository(tmp_path_factory.mktemp("collections-repo") / "r", pg.dsn, TABLE,
                               models=["retrieval"], name=VARIANT)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("collections-data")


@pytest.fixture(scope="module")
def server(repo, data_dir):
    s = endpoint_tests._start(data_dir, repo)
    yield s
    s.stop()


def headers(collection):
    return {} if collection is None else {"x-hotpath-collection": collection, "x-hotpath-tenant": collection}


def _inputs(module, texts, op=None, ids=None, k=None):
    def column(name, values):
        t = module.InferInput(name, [len(values), 1], "BYTES")
        t.set_data_from_numpy(np.array([[v.encode()] for v in values], dtype=np.object_))
        return t
    inputs = [column("TEXT", texts)]
    if op:
        inputs += [column("OP", [op] * len(texts)), column("ID", ids)]
    if k:
        t = module.InferInput("TOP_K", [len(texts), 1], "INT64")
        t.set_data_from_numpy(np.full((len(texts), 1), k, dtype=np.int64))
        inputs.append(t)
    return inputs


def grpc_call(server, model, collection, texts, op=None, ids=None, k=None, parameters=None):
    with grpcclient.InferenceServerClient(server.grpc_url.removeprefix("grpc://")) as c:
        return c.infer(model, _inputs(grpcclient, texts, op, ids, k), headers=headers(collection),
                       parameters=parameters)


def http_call(server, model, collection, texts, op=None, ids=None, k=None):
    with httpclient.InferenceServerClient(server.http_url.removeprefix("http://")) as c:
        return c.infer(model, _inputs(httpclient, texts, op, ids, k), headers=headers(collection))


def found(result, row=0):
    return [i.decode() for i in result.as_numpy("IDS")[row] if i]


def existed(result):
    return [bool(s[0] > 0) for s in result.as_numpy("SCORES")]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("call", [grpc_call, http_call], ids=["grpc", "http"])
def test_a_tenants_writes_stay_in_its_collection(server, model, call):
    note, doc_id = f"walrus tenancy almanac {uuid.uuid4().hex[:6]}", f"note-{uuid.uuid4().hex}"
    assert existed(call(server, model, "alpha", [note], "upsert", [doc_id])) == [False]
    assert found(call(server, model, "alpha", [note], k=1)) == [doc_id]
    where = f"{STORES[model]}, {call.__name__.removesuffix('_call')}"
    for other in ("beta", None, "shared"):        # another tenant, a direct call ("local"), an admin
        assert doc_id not in (seen := found(call(server, model, other, [note], k=10))), other
        SEEN.row(where, f"{other or 'a direct call (local)'} searches alpha's note, k=10",
                 f"{len(seen)} hits, none alpha's")
    assert (gone := existed(call(server, model, "beta", [note], "delete", [doc_id]))) == [False]   # cannot delete it
    replaced = existed(call(server, model, "beta", ["beta's text"], "upsert", [doc_id]))
    assert replaced == [False]   # nor replace it
    top = call(server, model, "alpha", [note], k=1)
    assert found(top) == [doc_id] and top.as_numpy("DOCUMENTS")[0, 0].decode() == note
    SEEN.row(where, "beta deletes, then upserts, alpha's id", f"existed {gone}, {replaced}; alpha reads its own note")
    # a shared document: alpha's delete removes nothing; alpha's replacement is alpha's only
    assert existed(call(server, model, "alpha", ["-"], "delete", ["gzip"])) == [False]
    replacement = f"gzip according to alpha {uuid.uuid4().hex[:6]}"
    call(server, model, "alpha", [replacement], "upsert", ["gzip"])
    assert found(call(server, model, "alpha", [replacement], k=1)) == ["gzip"]
    beta = call(server, model, "beta", ["compress files with GNU gzip"], k=10)
    docs = dict(zip(found(beta), (d.decode() for d in beta.as_numpy("DOCUMENTS")[0])))
    assert docs.get("gzip", "").startswith("gzip: ")   # the shared corpus' own text
    SEEN.row(where, "alpha deletes, then replaces, the shared document 'gzip'",
             f"beta still reads {docs['gzip'][:40]!r}")
    assert existed(call(server, model, "alpha", ["-"], "delete", [doc_id])) == [True]
    call(server, model, "alpha", ["-"], "delete", ["gzip"])
    call(server, model, "beta", ["-"], "delete", [doc_id])


@pytest.mark.parametrize("model", MODELS)
def test_an_admin_writes_the_shared_corpus(server, model):
    text, doc_id = f"operators' walrus bulletin {uuid.uuid4().hex[:6]}", f"bulletin-{uuid.uuid4().hex}"
    assert existed(grpc_call(server, model, "shared", [text], "upsert", [doc_id])) == [False]
    for reader in ("alpha", "beta", None, "shared"):
        assert found(grpc_call(server, model, reader, [text], k=1)) == [doc_id], reader
    assert existed(grpc_call(server, model, "shared", ["-"], "delete", [doc_id])) == [True]


@pytest.mark.parametrize("model", MODELS)
def test_a_collection_named_twice_fails_alone(server, model):
    with pytest.raises(InferenceServerException) as err:   # the header and a body parameter of that name
        grpc_call(server, model, "alpha", ["a query"], k=3, parameters={"x-hotpath-collection": "beta"})
    assert "x-hotpath-collection" in str(err.value) and "INVALID_ARG" in str(err.value.status())
    SEEN.row(f"{STORES[model]}, grpc", "alpha's call also names collection beta in a body parameter", err.value)
    assert len(found(grpc_call(server, model, "alpha", ["a query"], k=3))) == 3


def test_usage_is_counted_per_tenant(server):
    def counted(kind, tenant, model):
        with urllib.request.urlopen(server.metrics_url) as r:
            text = r.read().decode()
        pattern = (rf'^hotpath_usage_{kind}_total\{{(?=[^}}]*tenant="{tenant}")(?=[^}}]*model="{model}")[^}}]*\}} '
                   r'(\S+)$')
        match = re.search(pattern, text, re.M)
        return float(match.group(1)) if match else 0.0
    before = {m: counted("documents_written", "gamma", m) for m in MODELS}
    tokens = counted("embedding_tokens", "gamma", "retrieval")
    for model in MODELS:
        grpc_call(server, model, "gamma", ["one", "two"], "upsert", [f"u-{uuid.uuid4().hex}", f"v-{uuid.uuid4().hex}"])
    grpc_call(server, "retrieval", "gamma", ["a query about walruses"], k=2)
    assert {m: counted("documents_written", "gamma", m) - before[m] for m in MODELS} == {m: 2 for m in MODELS}
    assert counted("embedding_tokens", "gamma", "retrieval") - tokens > 4


def test_drop_collection_under_a_running_server(server, pg, repo, data_dir, capsys):
    text = f"a tenant that leaves {uuid.uuid4().hex[:6]}"
    for model in MODELS:
        grpc_call(server, model, "leaving", [text], "upsert", ["bye"])
        grpc_call(server, model, "staying", [text], "upsert", ["hi"])
    assert cli_main(["retrieval", "drop-collection", "leaving", "--repository", str(repo),
                     "--data-dir", str(data_dir / "retrieval")]) == 0     # the model's config: store hnsw
    assert cli_main(["retrieval", "drop-collection", "leaving", "--repository", str(repo), "--model", VARIANT,
                     "--pg-dsn", pg.dsn]) == 0                             # its config: pgvector, its table
    assert capsys.readouterr().out.count("dropped collection leaving: 1 documents") == 2
    for model in MODELS:
        assert "bye" not in found(grpc_call(server, model, "leaving", [text], k=5)), model
        assert found(grpc_call(server, model, "staying", [text], k=1)) == ["hi"], model


def test_writes_of_two_collections_survive_a_stub_kill(server, repo, data_dir):
    tag = uuid.uuid4().hex[:8]
    docs = {c: [f"{c} keeps walrus record {i} {tag}" for i in range(2)] for c in ("alpha", "beta")}
    for c, texts in docs.items():
        assert existed(grpc_call(server, "retrieval", c, texts, "upsert", [f"{tag}-0", f"{tag}-1"])) == [False, False]
    grpc_call(server, "retrieval", "beta", ["-"], "delete", [f"{tag}-1"])
    guard = endpoint_tests.kill_retrieval_stub(server)
    assert any(r.recovered_at and r.models == ["retrieval"] for r in guard.recoveries), guard.recoveries

    def document(c, doc_id, text):
        hits = grpc_call(server, "retrieval", c, [text], k=3)
        return dict(zip(found(hits), (d.decode() for d in hits.as_numpy("DOCUMENTS")[0]))).get(doc_id)
    assert document("alpha", f"{tag}-0", docs["alpha"][0]) == docs["alpha"][0]
    assert document("alpha", f"{tag}-1", docs["alpha"][1]) == docs["alpha"][1]
    assert document("beta", f"{tag}-0", docs["beta"][0]) == docs["beta"][0]
    assert document("beta", f"{tag}-1", docs["beta"][1]) is None                 # its delete kept too
    assert document("gamma", f"{tag}-0", docs["alpha"][0]) is None               # and apart
