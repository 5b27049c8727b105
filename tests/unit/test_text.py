"""The tokenizer functions the tokenizer Python backend calls, without Triton."""

import numpy as np
import pytest
from transformers import AutoTokenizer

from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.runtime.parameters import MAX_LENGTH
from hotpath.runtime.text import decode_utf8, encode, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(minilm_dir() / "tokenizer.json", max_length=MAX_LENGTH)


def test_pads_to_longest_text_of_the_batch(tok):
    out = encode(tok, ["short", "a somewhat longer sentence than the first one"])
    ids, mask = out["input_ids"], out["attention_mask"]
    assert ids.dtype == np.int64 and ids.shape == mask.shape == out["token_type_ids"].shape
    assert mask[1].all() and not mask[0].all()  # the longest has no padding, the short one has
    assert ids.shape[1] == mask[1].sum()


def test_truncates_at_256_tokens_keeping_special_tokens(tok):
    out = encode(tok, ["word " * 1000])
    assert out["input_ids"].shape == (1, 256)
    assert out["input_ids"][0, 0] == tok.token_to_id("[CLS]") and out["input_ids"][0, -1] == tok.token_to_id("[SEP]")


def test_matches_the_transformers_tokenizer(tok):
    texts = ["hello world", "Низкая задержка", "emoji 🚀", "", "x " * 400]
    ref = AutoTokenizer.from_pretrained(str(minilm_dir()))(texts, padding=True, truncation=True, max_length=MAX_LENGTH,
                                                             return_tensors="np")
    got = encode(tok, texts)
    for name in ("input_ids", "attention_mask", "token_type_ids"):
        np.testing.assert_array_equal(got[name], ref[name])


def test_empty_string_is_cls_sep(tok):
    out = encode(tok, [""])
    assert out["input_ids"].tolist() == [[tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")]]


def test_decode_utf8_names_the_bad_item():
    good = np.array([b"caf\xc3\xa9", b"ok"], dtype=object).reshape(-1, 1)
    assert decode_utf8(good) == ["café", "ok"]
    bad = np.array([b"ok", b"\xff\xfe"], dtype=object).reshape(-1, 1)
    with pytest.raises(ValueError, match=r"TEXT\[1\] is not valid UTF-8"):
        decode_utf8(bad)


def test_pad_to_multiple_of_buckets_lengths():
    tok16 = load_tokenizer(minilm_dir() / "tokenizer.json", max_length=MAX_LENGTH, pad_to_multiple_of=16)
    for text in ["a", "a " * 15, "a " * 40, "a " * 1000]:
        length = encode(tok16, [text])["input_ids"].shape[1]
        assert length % 16 == 0 and length <= 256


def test_pad_multiple_must_divide_max_length():
    with pytest.raises(ValueError, match="multiple"):
        load_tokenizer(minilm_dir() / "tokenizer.json", max_length=MAX_LENGTH, pad_to_multiple_of=48)
