"""The retrieval endpoint's request checks (hotpath.runtime.retrieval.requests): each bad input names itself."""

import numpy as np
import pytest

from hotpath.runtime.retrieval.requests import Limits, parse_request

LIMITS = Limits(default_k=10, max_k=100, max_bytes=64, max_chars=32, max_id_bytes=16)


def col(*values, dtype=object):
    return np.array(values, dtype=dtype).reshape(-1, 1)


def test_a_search_takes_the_default_k_or_its_own():
    r = parse_request(col(b"compress files"), None, None, None, LIMITS)
    assert (r.error, r.op, r.texts, r.k) == (None, "search", ["compress files"], 10)
    r = parse_request(col(b"a", b"b"), col(3, 3, dtype=np.int32), col(b"search", b"search"), None, LIMITS)
    assert (r.error, r.k, r.texts) == (None, 3, ["a", "b"])


@pytest.mark.parametrize("text,top_k,op,ident,message", [
    (col(b""), None, None, None, "TEXT[0] is empty"),
    (col(b"  "), None, None, None, "TEXT[0] is empty"),
    (col(b"\xff\xfe"), None, None, None, "not valid UTF-8"),
    (col(b"x" * 65), None, None, None, "over the limit of 64"),
    (col("é" * 33), None, None, None, "33 characters"),
    (col(b"q"), col(0, dtype=np.int32), None, None, "TOP_K must be within 1..100, got 0"),
    (col(b"q"), col(-5, dtype=np.int32), None, None, "got -5"),
    (col(b"q"), col(101, dtype=np.int32), None, None, "got 101"),
    (col(b"q", b"r"), col(1, 2, dtype=np.int32), None, None, "the same TOP_K"),
    (col(b"q"), None, col(b"drop"), None, "OP must be one of"),
    (col(b"q"), None, col(b"upsert"), None, "needs an ID"),
    (col(b"q"), None, col(b"upsert"), col(b""), "ID[0] is empty"),
    (col(b"q"), None, col(b"upsert"), col(b"\xff"), "ID[0] is not valid UTF-8"),
    (col(b"q"), None, col(b"upsert"), col(b"x" * 17), "ID[0] is 17 bytes"),
    (col(b""), None, col(b"upsert"), col(b"id"), "the document) is empty"),
    (col(b"a", b"b"), None, col(b"upsert", b"upsert"), col(b"id", b"id"), "must differ"),
    (col(b"a", b"b"), None, col(b"upsert", b"delete"), col(b"x", b"y"), "the same OP"),
    (np.array([[b"a", b"b"]], dtype=object), None, None, None, "shape [batch, 1]"),
    (col(b"a"), np.array([[1, 2]], dtype=np.int32), None, None, "TOP_K must have shape"),
])
def test_bad_input_is_refused_with_its_reason(text, top_k, op, ident, message):
    r = parse_request(text, top_k, op, ident, LIMITS)
    assert r.error is not None and message in r.error


def test_writes():
    r = parse_request(col(b"doc one", b"doc two"), None, col(b"upsert", b"upsert"), col(b"a", b"b"), LIMITS)
    assert (r.error, r.op, r.ids, r.texts) == (None, "upsert", ["a", "b"], ["doc one", "doc two"])
    r = parse_request(col(b""), None, col(b"delete"), col(b"a"), LIMITS)   # a delete needs no document
    assert (r.error, r.op, r.ids, r.texts) == (None, "delete", ["a"], [])
