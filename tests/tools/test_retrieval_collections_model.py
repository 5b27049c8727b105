"""The retrieval model's collections per tenant, without Triton: python_backends/retrieval/model.py
against the pb_utils stand-in (tests/pb_stand_in.py) on the built repository, with the gateway's
x-hotpath-collection / x-hotpath-tenant request parameters set by the test, on both stores (the WAL in a
temporary directory; a real Postgres + pgvector seeded from the build)."""

import json

import numpy as np
import pytest

from hotpath.specs.repository import read_config
from tests.pb_stand_in import (
    InferenceRequest,
    MetricFamily,
    TritonError,
    bytes_column,
    error_of,
    initialize_args,
    load_adapter,
    outputs,
)

NOTE = "zorblax walrus husbandry almanac for tenants"



@pytest.fixture(params=["hnsw", "pgvector"])
def model(request, built_repository, tmp_path, monkeypatch):
    monkeypatch.setenv("HOTPATH_RETRIEVAL_DATA_DIR", str(tmp_path / "wal"))
    config = read_config(built_repository / "retrieval")
    if request.param == "pgvector":
        monkeypatch.setenv("HOTPATH_PG_DSN", request.getfixturevalue("pg").dsn)
        config.parameters["store"].string_value = "pgvector"
        config.parameters["pg_table"].string_value = f"collections_{tmp_path.name[-20:].lower()}"[:60]
    MetricFamily.families.clear()
    m = load_adapter("retrieval", monkeypatch)()
    m.initialize(initialize_args(config, built_repository / "retrieval" / "1"))
    yield m
    m.finalize()


def call(collection=None, tenant=None, raw=None, **inputs):
    params = {}
    if collection:
        params["x-hotpath-collection"] = collection
    if tenant or collection:
        params["x-hotpath-tenant"] = tenant or collection
    return InferenceRequest(raw if raw is not None else json.dumps(params), **inputs)


def search(collection, text=NOTE, k=10, **kw):
    return call(collection, TEXT=bytes_column(text), TOP_K=np.array([[k]], dtype=np.int64), **kw)


def write(collection, op, doc_id, text="", **kw):
    return call(collection, TEXT=bytes_column(text or "-"), OP=bytes_column(op), ID=bytes_column(doc_id), **kw)


def ids(response):
    return [i.decode() for i in outputs(response)["IDS"][0] if i]


def existed(response):
    return bool(outputs(response)["SCORES"][0, 0] > 0)


def usage(kind):
    family = MetricFamily.families[f"hotpath_usage_{kind}_total"]
    return {s.labels["tenant"]: s.value for s in family.series}


def test_tenants_are_isolated_in_one_mixed_batch(model):
    bad = call(raw='{"x-hotpath-collection": "alpha", "X-Hotpath-Collection": "beta"}', TEXT=bytes_column(NOTE))
    responses = model.execute([
        write("alpha", "upsert", "note-1", NOTE), write("beta", "delete", "note-1"), bad,
        search(None), search("alpha"), search("beta"), search("shared"),
        call("beta", TEXT=bytes_column(""))])
    assert existed(responses[0]) is False and existed(responses[1]) is False   # beta's delete removed nothing
    code, message = error_of(responses[2])
    assert code == TritonError.INVALID_ARG and "x-hotpath-collection" in message
    assert "note-1" not in ids(responses[3]) and len(ids(responses[3])) == 10  # local: the shared corpus
    assert ids(responses[4])[0] == "note-1"                                     # alpha reads its own write
    assert "note-1" not in ids(responses[5]) and "note-1" not in ids(responses[6])
    assert error_of(responses[7])[0] == TritonError.INVALID_ARG
    (again,) = model.execute([search("alpha")])
    assert ids(again)[0] == "note-1"                                            # beta's delete did not reach it
    assert usage("documents_written") == {"alpha": 1, "beta": 1}
    tokens = usage("embedding_tokens")
    assert set(tokens) == {"alpha", "beta", "local", "shared"} and min(tokens.values()) > 2


def test_a_tenant_replaces_a_shared_document_for_itself_only(model):
    (shared_gzip,) = model.execute([search("beta", "compress files with GNU gzip")])
    assert "gzip" in ids(shared_gzip)
    replacement = "gzip, as alpha describes it: a walrus that squeezes files"
    upserted, deleted = model.execute([write("alpha", "upsert", "gzip", replacement),
                                       write("alpha", "delete", "wget")])
    assert existed(upserted) is False and existed(deleted) is False            # neither is alpha's
    found = model.execute([search("alpha", replacement, k=1), search("beta", replacement, k=20),
                           search("alpha", "download files from the web on the command line")])
    assert ids(found[0]) == ["gzip"] and outputs(found[0])["DOCUMENTS"][0, 0].decode() == replacement
    beta_docs = dict(zip(ids(found[1]), (d.decode() for d in outputs(found[1])["DOCUMENTS"][0])))
    assert "gzip" not in beta_docs or beta_docs["gzip"] != replacement
    assert "wget" in ids(found[2])                                              # the shared wget is still there
    alpha_hits = ids(model.execute([search("alpha", replacement, k=50)])[0])
    assert alpha_hits.count("gzip") == 1                                        # own wins, no duplicate


def test_an_admin_writes_the_shared_corpus_that_every_tenant_sees(model):
    admin_note = "an announcement from the operators about walrus maintenance windows"
    (upserted,) = model.execute([write("shared", "upsert", "announcement", admin_note)])
    assert existed(upserted) is False
    found = model.execute([search(c, admin_note, k=1) for c in ("alpha", "beta", None, "shared")])
    assert [ids(r) for r in found] == [["announcement"]] * 4
    model.execute([write("local", "upsert", "local-only", admin_note + " (local copy)")])
    assert "local-only" in ids(model.execute([search(None, admin_note, k=3)])[0])
    assert "local-only" not in ids(model.execute([search("shared", admin_note, k=3)])[0])
    (deleted,) = model.execute([write("shared", "delete", "announcement")])
    assert existed(deleted) is True
    assert "announcement" not in ids(model.execute([search("alpha", admin_note, k=5)])[0])
