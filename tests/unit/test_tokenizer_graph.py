"""The in-graph WordPiece tokenizer (onnxruntime-extensions) against HF tokenizers, without Triton."""

import numpy as np
import onnxruntime as ort
import pytest

from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.exporters.tokenized_encoder import _in_contract
from hotpath.exporters.tokenizer_graph import OUTPUTS, bert_tokenizer_graph, extensions_library
from hotpath.runtime.ort_session import local_op_library
from hotpath.runtime.text import encode, load_tokenizer

LATIN = ["hello world", "The quick brown fox jumps over the lazy dog.", "Café naïve résumé ÅNGSTRÖM",
         "emoji 🚀 and punctuation?!", "", "  spaces\tand\nnewlines  ", "低延迟推理服务器"]


@pytest.fixture(scope="module")
def session():
    options = ort.SessionOptions()
    options.register_custom_ops_library(extensions_library())
    return ort.InferenceSession(bert_tokenizer_graph(minilm_dir() / "vocab.txt", 256).SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def _run(session, texts):
    return dict(zip(OUTPUTS, session.run(list(OUTPUTS), {"TEXT": np.array(texts, dtype=object).reshape(-1, 1)})))


def test_batch_matches_hf_tokenizers_padded_to_the_longest(session):
    got = _run(session, LATIN)
    want = encode(load_tokenizer(minilm_dir() / "tokenizer.json", 256), LATIN)
    for name in OUTPUTS:
        assert got[name].dtype == np.int64
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_each_text_is_tokenized_alone_not_as_a_sentence_pair(session):
    # The op reads two texts as a pair; the graph loops so that a batch of two is two sentences.
    pair = _run(session, ["first text", "second one"])
    assert (pair["token_type_ids"] == 0).all()
    alone = _run(session, ["first text"])
    np.testing.assert_array_equal(pair["input_ids"][0, :alone["input_ids"].shape[1]], alone["input_ids"][0])


def test_long_text_is_truncated_at_max_length_with_sep(session):
    got = _run(session, ["word " * 600])
    assert got["input_ids"].shape == (1, 256)
    assert got["input_ids"][0, 0] == 101 and got["input_ids"][0, -1] == 102   # [CLS] ... [SEP]


def test_contract_covers_latin_and_cjk_only():
    assert all(_in_contract(t) for t in LATIN)
    assert not any(_in_contract(t) for t in ("Ελληνικά", "한국어", "हिन्दी"))


def test_production_op_library_name_maps_to_the_wheel():
    assert local_op_library("/opt/hotpath/lib/libortextensions.so") == extensions_library()
    assert local_op_library("/opt/custom/libmyops.so") == "/opt/custom/libmyops.so"
