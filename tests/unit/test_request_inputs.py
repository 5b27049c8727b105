"""Request inputs are checked in hotpath.runtime before any use: a missing, misshapen, mistyped, overflowing or
lying input is an InputError naming the input and the rule (INVALID_ARGUMENT in the models), and a fault of
ours reaches the client as a short INTERNAL message without traceback or server path."""

import io
import re
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from hotpath.runtime.backend_io import guarded, invalid
from hotpath.runtime.images import ImageInputError, jpeg_blocks, preprocess, preprocess_request
from hotpath.runtime.inputs import InputError, column, integers, required
from hotpath.runtime.retrieval.requests import Limits, parse_request
from hotpath.runtime.text import gather_texts
from tests.bad_requests import BIG, LEAKS, jpeg, lying_jpeg

LIMITS = Limits(default_k=10, max_k=100)


def col(*values, dtype=object):
    return np.array(values, dtype=dtype).reshape(-1, 1)


def test_required_and_column_name_the_input_and_the_rule():
    with pytest.raises(InputError, match=r"input TEXT is required \(BYTES \[batch, 1\]\)"):
        required(None, "TEXT", "BYTES [batch, 1]")
    assert column(col(b"a", b"b"), "TEXT").tolist() == [b"a", b"b"]
    # a batch dimension of 2^32 reaches a model as no batch dimension at all
    for shape in ([1], [1, 2], [1, 1, 1]):
        with pytest.raises(InputError, match=re.escape(f"TEXT must have shape [batch, 1], got {shape}")):
            column(np.empty(shape, dtype=object), "TEXT")
    with pytest.raises(InputError, match=r"ID must have shape \[2, 1\], got \[1, 1\]"):
        column(col(b"x"), "ID", rows=2)


@pytest.mark.parametrize("value", [BIG, 2 ** 32 + 1, 2 ** 63 - 1, -2 ** 63, 0, 101])
def test_integers_are_range_checked_as_sent_never_narrowed(value):
    with pytest.raises(InputError, match=f"TOP_K must be within 1..100, got {value}$"):
        integers(col(value, dtype=np.int64), "TOP_K", 1, 100)
    assert np.int64(BIG).astype(np.int32) == 5   # what a narrowing cast would have made of it


def test_integers_accept_any_integer_width_and_refuse_other_kinds():
    for dtype in (np.int32, np.int64, np.uint64, np.int8):
        assert integers(col(7, 7, dtype=dtype), "TOP_K", 1, 100) == [7, 7]
    for values in (col(1.0, dtype=np.float32), col(float("nan"), dtype=np.float64), col(b"5"), col(True, dtype=bool)):
        with pytest.raises(InputError, match="TOP_K must be an integer tensor"):
            integers(values, "TOP_K", 1, 100)


@pytest.mark.parametrize("text,top_k,op,ident,message", [
    (None, col(5, dtype=np.int64), None, None, "input TEXT is required"),
    (None, None, col(b"search"), None, "input TEXT is required"),
    (None, None, col(b"delete"), col(b"x"), "input TEXT is required"),
    (col(b"q"), col(BIG, dtype=np.int64), None, None, "TOP_K must be within 1..100, got 4294967301"),
    (col(b"q"), col(-2 ** 63, dtype=np.int64), None, None, "got -9223372036854775808"),
    (col(b"q"), col(1.5, dtype=np.float64), None, None, "TOP_K must be an integer tensor"),
    (col(b"q"), col(5, 5, dtype=np.int64), None, None, "TOP_K must have shape [1, 1], got [2, 1]"),
    (np.array([b"q"], dtype=object), None, None, None, "TEXT must have shape [batch, 1], got [1]"),
    (col(5, dtype=object), None, None, None, "TEXT[0] must be bytes"),
])
def test_retrieval_refuses_missing_and_overflowing_inputs(text, top_k, op, ident, message):
    r = parse_request(text, top_k, op, ident, LIMITS)
    assert r.error is not None and message in r.error, r.error


def test_retrieval_takes_top_k_as_int64():
    assert parse_request(col(b"q"), col(100, dtype=np.int64), None, None, LIMITS).k == 100


def test_gather_texts_fails_only_the_bad_requests():
    texts, spans, errors = gather_texts([col(b"a"), None, np.array([b"b"], dtype=object), col(7), col(b"c", b"d")],
                                        {"max_bytes": None, "max_chars": None})
    assert texts == ["a", "c", "d"] and spans == [(0, 1), None, None, None, (1, 3)]
    assert errors[1] == "input TEXT is required (BYTES [batch, 1])"
    assert errors[2] == "TEXT must have shape [batch, 1], got [1]"
    assert errors[3] == "TEXT[0] must be bytes (UTF-8), got int"   # bytes(7) would have embedded seven NULs


def test_a_jpeg_whose_header_claims_more_than_its_data_is_refused():
    for width, height in ((8000, 5000), (640, 4800)):
        with pytest.raises(ImageInputError, match=f"JPEG header declares {width}x{height} .* truncated or lying"):
            preprocess(lying_jpeg(width, height))
    assert preprocess(jpeg()).shape == (224, 224, 3)


@pytest.mark.parametrize("mode,options", [("RGB", {"quality": 1, "optimize": True}), ("L", {"quality": 1}),
                                          ("RGB", {"progressive": True, "optimize": True}),
                                          ("RGB", {"subsampling": 0})])
def test_the_jpeg_data_bound_holds_for_the_most_compressible_real_images(mode, options):
    # A flat image is the cheapest a real encoder makes (~2 bits per block): the bound (1 bit) must pass it.
    out = io.BytesIO()
    Image.new(mode, (4000, 3000)).save(out, "JPEG", **options)
    data = out.getvalue()
    img = Image.open(io.BytesIO(data))
    assert len(data) * 8 >= 1.9 * jpeg_blocks(*img.size, [(h, v) for _, h, v, _ in img.layer])
    assert preprocess(data).shape == (224, 224, 3)


def test_jpeg_blocks_counts_each_component_at_its_sampling():
    assert jpeg_blocks(16, 16, [(2, 2), (1, 1), (1, 1)]) == 4 + 1 + 1
    assert jpeg_blocks(17, 9, [(1, 1)]) == 3 * 2


def test_preprocess_request_names_the_input_and_the_item():
    with pytest.raises(InputError, match="input IMAGE is required"):
        preprocess_request(None)
    with pytest.raises(InputError, match=r"IMAGE must have shape \[batch, 1\], got \[1\]"):
        preprocess_request(np.array([jpeg()], dtype=object))
    with pytest.raises(ImageInputError, match=r"IMAGE\[1\]: JPEG header declares 8000x5000"):
        preprocess_request(col(jpeg(), lying_jpeg()))
    with pytest.raises(ImageInputError, match=r"IMAGE\[0\] must be bytes"):
        preprocess_request(col(3))
    assert preprocess_request(col(jpeg(), jpeg())).shape == (2, 224, 224, 3)


class FakeError(Exception):
    INVALID_ARG, INTERNAL = "INVALID_ARG", "INTERNAL"

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self.message, self.code = message, code


PB = SimpleNamespace(TritonError=FakeError, InferenceResponse=lambda error=None: error)


def test_a_fault_of_ours_is_a_short_internal_error_and_its_traceback_goes_to_the_log(capsys):
    class Model:
        @guarded(PB, "demo")
        def execute(self, requests):
            return open("/work/no/such/file.py")

    errors = Model().execute([1, 2])
    assert [e.code for e in errors] == ["INTERNAL", "INTERNAL"]
    assert errors[0].message == "demo: internal error (FileNotFoundError); details in the server log"
    assert not [s for s in LEAKS if s in errors[0].message]
    logged = capsys.readouterr().err
    assert "Traceback" in logged and "/work/no/such/file.py" in logged


def test_an_input_error_is_invalid_argument_with_the_models_name():
    error = invalid(PB, "demo", "TEXT[0] is empty")
    assert (error.message, error.code) == ("demo: TEXT[0] is empty", "INVALID_ARG")
