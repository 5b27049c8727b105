"""Pre-processing never fails with anything but its input-error type, whatever bytes arrive (hypothesis).

An input error becomes INVALID_ARGUMENT in the Python backends; any other exception would be reported
as a server fault (INTERNAL), which clients may retry elsewhere. So the property that matters is: for
arbitrary bytes, decode_utf8 and preprocess either succeed with a well-formed result or raise
TextInputError / ImageInputError.
"""

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile

from hotpath.runtime.images import ImageInputError, PreprocessOptions, preprocess
from hotpath.runtime.parameters import TextParameters
from hotpath.runtime.retrieval.requests import Limits, parse_request
from hotpath.runtime.text import TextInputError, decode_utf8
from tests.imagegen import encode, photo

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _as_tensor(items):
    return np.array(items, dtype=object).reshape(-1, 1)


@FUZZ
@given(st.lists(st.binary(max_size=64), min_size=1, max_size=8))
def test_decode_utf8_accepts_exactly_the_valid_utf8(items):
    try:
        texts = decode_utf8(_as_tensor(items))
    except TextInputError as exc:
        bad = next(i for i, b in enumerate(items) if not _is_utf8(b))  # the first invalid item is named
        assert f"TEXT[{bad}] is not valid UTF-8" in str(exc)
        return
    assert texts == [b.decode("utf-8") for b in items]


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@FUZZ
@given(st.lists(st.text(max_size=40), min_size=1, max_size=6), st.integers(1, 120), st.integers(1, 40))
def test_decode_utf8_limits_bytes_then_characters(texts, max_bytes, max_chars):
    items = [t.encode("utf-8") for t in texts]
    try:
        got = decode_utf8(_as_tensor(items), max_bytes=max_bytes, max_chars=max_chars)
    except TextInputError as exc:
        first = next(i for i, t in enumerate(texts) if len(items[i]) > max_bytes or len(t) > max_chars)
        unit = "bytes" if len(items[first]) > max_bytes else "characters"
        assert f"TEXT[{first}] is" in str(exc) and f"{unit}, over the limit" in str(exc)
        return
    assert got == texts and all(len(b) <= max_bytes and len(t) <= max_chars for b, t in zip(items, texts))


def test_text_limits_come_from_the_config_parameters():
    limits = TextParameters.parse({"max_text_bytes": "10", "max_text_chars": "4"}).text_limits()
    assert limits == {"max_bytes": 10, "max_chars": 4}
    assert TextParameters.parse({}).text_limits() == {"max_bytes": None, "max_chars": None}


SMALL = photo("chelsea").resize((96, 64))
SEEDS = {fmt: encode(SMALL, fmt) for fmt in ("JPEG", "PNG", "WEBP")}
OPTS = PreprocessOptions(max_pixels=4_000_000, max_decoded_pixels=1_000_000)


def _check_preprocess(data: bytes) -> None:
    try:
        out = preprocess(data, OPTS)
    except ImageInputError as exc:
        assert str(exc)  # a reason, for the client
        return
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8


@pytest.mark.parametrize("fmt", sorted(SEEDS))
@FUZZ
@given(data=st.data())
def test_preprocess_on_damaged_images_returns_pixels_or_an_input_error(fmt, data):
    raw = bytearray(SEEDS[fmt])
    for _ in range(data.draw(st.integers(1, 8))):  # overwrite a few bytes anywhere, headers included
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(raw)))
    _check_preprocess(bytes(raw[:cut] if data.draw(st.booleans()) else raw))


@FUZZ
@given(st.binary(max_size=512))
def test_preprocess_on_arbitrary_bytes_returns_pixels_or_an_input_error(raw):
    _check_preprocess(raw)


@FUZZ
@given(st.sampled_from(sorted(SEEDS)), st.binary(min_size=1, max_size=64))
def test_preprocess_on_a_valid_header_then_garbage(fmt, garbage):
    _check_preprocess(SEEDS[fmt][:48] + garbage)


def _png(size, mode="1") -> bytes:
    out = io.BytesIO()
    Image.new(mode, size).save(out, "PNG")
    return out.getvalue()


def test_png_that_inflates_past_the_decoded_pixel_limit_is_refused_from_its_header():
    bomb = _png((3000, 3000))  # ~1 KB on the wire, 9 MP decoded
    assert len(bomb) < 2000
    decoded = []
    real_load = ImageFile.ImageFile.load   # what every file format's decode goes through

    def load(self, *args, **kwargs):
        decoded.append(self.size)
        return real_load(self, *args, **kwargs)

    ImageFile.ImageFile.load = load
    try:
        with pytest.raises(ImageInputError, match="decodes to 3000x3000 = 9000000 pixels, over the limit of 4194304"):
            preprocess(bomb)
    finally:
        ImageFile.ImageFile.load = real_load
    assert not decoded, f"pixels were decoded before the refusal: {decoded}"  # refused from the header alone
    assert Image.open(io.BytesIO(bomb)).load() is not None                     # the bomb itself does decode


def test_large_jpeg_passes_the_decoded_pixel_limit_through_reduced_size_decoding():
    big = encode(photo("chelsea").resize((4000, 3000)), "JPEG", quality=80)  # 12 MP source
    assert preprocess(big).shape == (224, 224, 3)  # decoded at 1/8 scale: 500x375
    with pytest.raises(ImageInputError, match="decodes to 4000x3000"):
        preprocess(big, PreprocessOptions(fast_jpeg=False))  # full decode: over the limit


@FUZZ
@given(st.integers(-2 ** 63, 2 ** 63 - 1))
def test_top_k_is_taken_whole_or_refused_never_wrapped(value):
    r = parse_request(_as_tensor([b"q"]), np.array([[value]], dtype=np.int64), None, None, Limits(10, 100))
    if 1 <= value <= 100:
        assert (r.error, r.k) == (None, value)
    else:
        assert r.error == f"TOP_K must be within 1..100, got {value}"
