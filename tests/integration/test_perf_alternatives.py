"""The alternatives hotpath is compared with serve the same answers as its endpoints, and perf_analyzer drives them."""

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from hotpath.client import ClassificationClient, EmbeddingClient
from hotpath.exporters.samples import jpeg_photo, payload_for
from hotpath.sweeps.measure import perf_analyzer as analyzer
from hotpath.sweeps.measure.perf_analyzer import Measurement
from perf.lab.compare.alternatives import launch
from perf.lab.compare.rivals import rivals_for
from perf.lab.compare.side_by_side import configured_models

SHORT = Measurement(interval_ms=1000, stability_pct=100, max_trials=3)


def _context(url: str, endpoint: str) -> launch.Context:
    return launch.Context(url, endpoint, configured_models(endpoint), rivals_for(endpoint).searched_step, 60.0, 1,
                          log=lambda m: None)


def _alternative(endpoint: str, label: str) -> launch.Alternative:
    (alt,) = [a for a in rivals_for(endpoint).alternatives if a.label == label]
    return alt


def _infer(client, module, name: str, data: bytes, outputs: list[str]):
    inp = module.InferInput(name, [1, 1], "BYTES")
    inp.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    result = client.infer("image_classification" if name == "IMAGE" else "text_embedding", [inp])
    return {o: result.as_numpy(o) for o in outputs}


def test_fastapi_image_alternative_classifies_like_the_endpoint_and_takes_perf_analyzer_load(grpc_url):
    photo = jpeg_photo()
    with ClassificationClient(grpc_url) as c:
        (ours,) = c.classify([photo])
    with launch.fastapi("async", 1, "").serve(_context(grpc_url, "image_classification")) as target:
        assert target.protocol == "http" and not target.statistics
        client = httpclient.InferenceServerClient(target.url)
        out = _infer(client, httpclient, "IMAGE", photo, ["CLASS_IDS", "SCORES", "LABELS"])
        assert out["CLASS_IDS"][0].tolist() == ours.class_ids
        np.testing.assert_allclose(out["SCORES"][0], ours.scores, atol=1e-4)
        assert [label.decode() for label in out["LABELS"][0]] == ours.labels
        point = analyzer.run("image_classification", target.url, "concurrency", 1,
                             payload_for("image_classification"), protocol="http", measurement=SHORT)
        assert point.throughput > 0 and point.p50_ms > 0


def test_fastapi_text_alternative_embeds_like_the_endpoint(grpc_url):
    text = "where does the time of a request go"
    with EmbeddingClient(grpc_url) as c:
        ours = c.embed([text])[0]
    with launch.fastapi("sync", 1, "").serve(_context(grpc_url, "text_embedding")) as target:
        out = _infer(httpclient.InferenceServerClient(target.url), httpclient, "TEXT", text.encode(), ["EMBEDDING"])
    np.testing.assert_allclose(out["EMBEDDING"][0], ours, atol=1e-4)


def test_fastapi_retrieval_alternative_finds_what_the_endpoint_finds(grpc_url):
    from hotpath.client import RetrievalClient

    query = "compress files with GNU gzip"
    with RetrievalClient(grpc_url) as c:
        ours = c.search([query], k=10)[0]   # the spec's default_k, which the alternative answers with
    with launch.fastapi("sync", 1, "").serve(_context(grpc_url, "retrieval")) as target:
        inp = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        inp.set_data_from_numpy(np.array([[query.encode()]], dtype=np.object_))
        result = httpclient.InferenceServerClient(target.url).infer("retrieval", [inp])
    assert [i.decode() for i in result.as_numpy("IDS")[0]] == [h.id for h in ours]
    np.testing.assert_allclose(result.as_numpy("SCORES")[0], [h.score for h in ours], atol=1e-4)


def test_pytriton_image_alternative_classifies_like_the_endpoint(grpc_url):
    photo = jpeg_photo()
    with ClassificationClient(grpc_url) as c:
        (ours,) = c.classify([photo])
    with launch.pytriton().serve(_context(grpc_url, "image_classification")) as target:
        assert target.statistics
        with grpcclient.InferenceServerClient(target.url) as client:
            out = _infer(client, grpcclient, "IMAGE", photo, ["CLASS_IDS", "LABELS"])
    assert out["CLASS_IDS"][0].tolist() == ours.class_ids
    assert [label.decode() for label in out["LABELS"][0]] == ours.labels
