"""The `retrieval` endpoint against a real tritonserver: known neighbours in the built Debian corpus,
text_embedding's exact vectors, writes visible at once and kept across a server restart and a killed
stub, bad input failing alone, the CLI."""

import json
import os
import signal
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hotpath.cli import main as cli_main
from hotpath.client import EmbeddingClient, InvalidInputError, RetrievalClient
from hotpath.health.probe import probe
from hotpath.paths import model_repository
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.stubs import stub_pids
from hotpath.server.subset import linked
from hotpath.server.watchdog import Watchdog
from hotpath.specs.repository import Repository

MODELS = ("retrieval", "text_embedding", "sentence_embedder")
# A query about what a well-known package does -> that package, among the built corpus' top 10.
KNOWN = {"compress files with GNU gzip": "gzip",
         "download files from the web on the command line": "wget",
         "split one terminal into several sessions": "tmux"}


def _start(data_dir, repo):
    os.environ["HOTPATH_RETRIEVAL_DATA_DIR"] = str(data_dir)
    try:
        http, grpc, metrics = free_ports(3)
        return LocalTriton(repository=repo, ports=ServerPorts(http=http, grpc=grpc, metrics=metrics),
                           model_control="explicit").start()
    finally:
        del os.environ["HOTPATH_RETRIEVAL_DATA_DIR"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    return linked(MODELS, tmp_path_factory.mktemp("retrieval-repo"))


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("retrieval-data")


@pytest.fixture(scope="module")
def server(repo, data_dir):
    s = _start(data_dir, repo)
    yield s
    s.stop()


@pytest.fixture
def client(server):
    with RetrievalClient(server.grpc_url) as c:
        yield c


def test_the_built_corpus_is_the_index(client):
    export = model_repository() / "retrieval" / "1" / "export"
    manifest = json.loads((export / "manifest.json").read_text())
    ids = {json.loads(line)["id"] for line in (export / "corpus.jsonl").read_text().splitlines()}
    assert len(ids) == manifest["documents"] > 1000
    assert set(KNOWN.values()) <= ids, "the corpus lost a package the neighbour test needs"
    graph = (export / "model.onnx").read_bytes()
    assert graph == (model_repository() / "sentence_embedder" / "1" / "export" / "model.onnx").read_bytes()


def test_known_neighbours(client):
    results = client.search(list(KNOWN), k=10)
    for (query, expected), hits in zip(KNOWN.items(), results):
        assert len(hits) == 10
        assert expected in [h.id for h in hits], (query, [h.id for h in hits])
        scores = [h.score for h in hits]
        assert scores == sorted(scores, reverse=True)
        assert all(h.document.startswith(f"{h.id}: ") for h in hits)


def test_scores_are_text_embedding_cosines(server, client):
    query = "play music files from the terminal"
    hits = client.search([query], k=3)[0]
    with EmbeddingClient(server.grpc_url) as embedder:
        vectors = embedder.embed([query] + [h.document for h in hits])
    np.testing.assert_allclose([h.score for h in hits], vectors[1:] @ vectors[0], atol=2e-5)


def test_default_k_and_k(client):
    assert len(client.search(["a text editor"])[0]) == 10
    assert len(client.search(["a text editor"], k=3)[0]) == 3


def test_writes_are_visible_at_once(client):
    doc_id = f"test-{uuid.uuid4().hex}"
    text = "zorblax quantum flux capacitor calibration suite for time machines"
    assert client.upsert([doc_id], [text]) == [False]
    top = client.search([text], k=1)[0][0]
    assert (top.id, top.document) == (doc_id, text) and top.score == pytest.approx(1.0, abs=1e-5)
    replacement = "zorblax flux capacitor, second edition"
    assert client.upsert([doc_id], [replacement]) == [True]
    assert client.search([text], k=1)[0][0].document == replacement
    assert client.delete([doc_id]) == [True]
    assert doc_id not in [h.id for h in client.search([text], k=10)[0]]
    assert client.delete([doc_id]) == [False]


@pytest.mark.parametrize("texts,k,message", [
    ([""], None, "is empty"),
    ([b"\xff\xfeabc"], None, "not valid UTF-8"),
    (["ok"], 0, "TOP_K must be within"),
    (["ok"], -1, "TOP_K must be within"),
    (["ok"], 101, "TOP_K must be within"),
    (["x" * 40000], None, "over the limit"),
])
def test_bad_input_is_invalid_argument(client, texts, k, message):
    with pytest.raises(InvalidInputError, match=message):
        client.search(texts, k)


def test_bad_input_fails_alone_in_a_batch(server):
    """Good and bad requests sent together (the dynamic batcher groups them): only the bad ones fail."""
    cases = [(["good query about editors"], 5), ([""], 5), (["another good query"], 5), (["bad k"], 0),
             ([b"\xc3\x28"], 5), (["third good query"], 5)] * 3
    def one(case):
        with RetrievalClient(server.grpc_url) as c:
            try:
                return len(c.search(*case)[0])
            except InvalidInputError:
                return "invalid"
    with ThreadPoolExecutor(len(cases)) as pool:
        outcomes = list(pool.map(one, cases))
    assert outcomes == [5, "invalid", 5, "invalid", "invalid", 5] * 3


def test_cli_search(server, capsys):
    assert cli_main(["search", "compress files with GNU gzip", "-k", "5",
                     "--url", server.grpc_url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and any(" gzip " in line for line in out[1:])
    assert cli_main(["search", "x", "-k", "0", "--url", server.grpc_url]) == 65


def test_writes_survive_a_stub_kill_and_a_restart(server, repo, data_dir):
    ids = [f"keep-{uuid.uuid4().hex}" for _ in range(3)]
    docs = [f"durable document number {i} about walrus husbandry" for i in range(3)]
    with RetrievalClient(server.grpc_url) as c:
        c.upsert(ids, docs)
        c.delete(ids[2:])
    guard = kill_retrieval_stub(server)
    assert [r.models for r in guard.recoveries][:1] == [["retrieval"]], guard.recoveries
    assert probe(server.grpc_url, Repository(repo).configs()["retrieval"]).ok

    def found(url):
        with RetrievalClient(url) as c:
            return [h.id for h in c.search([docs[0], docs[2]], k=3)[0]], [h.id for h in c.search([docs[2]], k=3)[0]]
    first, deleted = found(server.grpc_url)
    assert ids[0] in first and ids[1] in first and ids[2] not in deleted
    server.stop()
    restarted = _start(data_dir, repo)
    try:
        first, deleted = found(restarted.grpc_url)
        assert ids[0] in first and ids[1] in first and ids[2] not in deleted
    finally:
        restarted.stop()


def kill_retrieval_stub(server) -> Watchdog:
    """kill -9 the retrieval stub under a watchdog and wait (up to 90 s) until it recovers; the watchdog,
    stopped, holds the recoveries."""
    guard = Watchdog(server, census_s=0.2, probe_s=1.0).start()
    try:
        os.kill(stub_pids(server.process.pid, "retrieval")[0], signal.SIGKILL)
        deadline = time.monotonic() + 90
        while not any(r.recovered_at for r in guard.recoveries) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        guard.stop()
    return guard
