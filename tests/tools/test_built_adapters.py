"""python_backends/*/model.py adapters that need the build's exports (the MiniLM graph, the retrieval index),
without Triton: imported against the stand-in of triton_python_backend_utils (tests/pb_stand_in.py),
initialized from the committed config.pbtxt on the built version folder, and compared with the library
they wrap, computed beside them. No tritonserver starts; the built repository is read, never written."""

import numpy as np
import onnxruntime as ort
import pytest

from hotpath.exporters.sentence_encoder import minilm_tokenizer, tokenizer_recipe
from hotpath.runtime.backend_args import parameters
from hotpath.runtime.embedder import EXPORT_DIR, Embedder
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.retrieval.open import open_store
from hotpath.runtime.text import encode
from hotpath.specs.repository import read_config
from tests.pb_stand_in import InferenceRequest as Request
from tests.pb_stand_in import TritonError, bytes_column, error_of, initialize_args, load_adapter, outputs

TEXTS = ["low latency inference on a CPU", "the cat sat on the mat", "Привет, мир"]


def _model(built_repository, name, monkeypatch, adapter=None):
    config = read_config(built_repository / name)
    version = built_repository / name / "1"
    model = load_adapter(adapter or name, monkeypatch)()
    model.initialize(initialize_args(config, version))
    return model, parameters(initialize_args(config, version)), version


def test_sentence_embedder_adapter_equals_the_embedder_it_wraps(built_repository, monkeypatch):
    model, params, version = _model(built_repository, "sentence_embedder", monkeypatch)
    responses = model.execute([Request(TEXT=bytes_column(*TEXTS[:2])), Request(TEXT=bytes_column(b"\xc3\x28")),
                               Request(TEXT=bytes_column(TEXTS[2]))])
    reference = Embedder(version, params).embed(TEXTS)
    first, third = outputs(responses[0])["EMBEDDING"], outputs(responses[2])["EMBEDDING"]
    np.testing.assert_allclose(first, reference[:2], atol=1e-5)
    np.testing.assert_allclose(third, reference[2:], atol=1e-5)
    assert first.dtype == np.float32 and np.allclose(np.linalg.norm(first, axis=1), 1, atol=1e-4)
    code, message = error_of(responses[1])
    assert code == TritonError.INVALID_ARG and message.startswith("sentence_embedder: TEXT[0] is not valid UTF-8")


def test_retrieval_adapter_searches_like_the_store_and_reads_its_own_writes(built_repository, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("HOTPATH_RETRIEVAL_DATA_DIR", str(tmp_path / "adapter"))   # the WAL, not the build's
    model, params, version = _model(built_repository, "retrieval", monkeypatch)
    k = np.array([[3], [3]], dtype=np.int64)
    try:
        searched, refused, zero_k = model.execute([
            Request(TEXT=bytes_column(*TEXTS[:2]), TOP_K=k), Request(TEXT=bytes_column("x"), OP=bytes_column("drop")),
            Request(TEXT=bytes_column("x"), TOP_K=np.array([[0]], dtype=np.int64))])
        store = open_store(RetrievalParameters.parse(params), tmp_path / "reference", base_dir=version / EXPORT_DIR)
        try:
            hits = store.search(Embedder(version, params).embed(TEXTS[:2]), 3)
        finally:
            store.close()
        got = outputs(searched)
        assert got["IDS"].tolist() == [[i.encode() for i in row] for row in hits.ids]
        assert got["DOCUMENTS"].tolist() == [[d.encode() for d in row] for row in hits.documents]
        np.testing.assert_allclose(got["SCORES"], hits.scores, atol=1e-5)
        assert error_of(refused)[0] == TritonError.INVALID_ARG and "OP must be one of" in error_of(refused)[1]
        assert error_of(zero_k)[0] == TritonError.INVALID_ARG and "TOP_K" in error_of(zero_k)[1]

        document = "a sentence no corpus holds: adapters tested without Triton"
        (upserted,) = model.execute([Request(TEXT=bytes_column(document), OP=bytes_column("upsert"),
                                             ID=bytes_column("adapter-test"))])
        assert outputs(upserted)["IDS"].tolist() == [[b"adapter-test"]]
        (found,) = model.execute([Request(TEXT=bytes_column(document), TOP_K=np.array([[1]], dtype=np.int64))])
        found = outputs(found)
        assert found["IDS"].tolist() == [[b"adapter-test"]] and found["SCORES"][0, 0] == pytest.approx(1, abs=1e-4)
    finally:
        model.finalize()


def test_onnxruntime_runner_on_the_built_text_encoder_equals_a_plain_session(built_repository, monkeypatch):
    model, params, version = _model(built_repository, "text_encoder", monkeypatch, adapter="onnxruntime_runner")
    tokenizer = minilm_tokenizer(tokenizer_recipe("tokenizer"))   # as the tokenizer step feeding text_encoder
    feeds = [encode(tokenizer, TEXTS[:2]), encode(tokenizer, ["a much longer text " * 12])]
    wrong = {name: values.astype(np.int32) for name, values in feeds[1].items()}
    served, refused, alone = model.execute([Request(**feeds[0]), Request(**wrong), Request(**feeds[1])])
    session = ort.InferenceSession(str(version / params.get("default_model_filename", "model.onnx")),
                                   providers=["CPUExecutionProvider"])
    for response, feed in ((served, feeds[0]), (alone, feeds[1])):
        (reference,) = session.run(["embedding"], feed)
        np.testing.assert_allclose(outputs(response)["embedding"], reference, atol=1e-5)
    code, message = error_of(refused)
    assert code == TritonError.INTERNAL and message.startswith("onnxruntime: ")
