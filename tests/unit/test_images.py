"""hotpath.runtime.images: decode, convert, orient, resize+crop, and refuse bad input (no Triton)."""

import numpy as np
import pytest
from PIL import Image, ImageFile

from hotpath.runtime.images import ImageInputError, PreprocessOptions, decode, preprocess, resize_crop
from tests.imagegen import bad_inputs, encode, exif_rotated_jpeg, photo, variants


@pytest.mark.parametrize("name,data", list(variants().items()), ids=list(variants()))
def test_every_variant_becomes_224_rgb_uint8(name, data):
    out = preprocess(data)
    assert out.shape == (224, 224, 3) and out.dtype == np.uint8
    assert out.std() > 1.0, "image came out flat"


def test_grayscale_becomes_three_equal_channels():
    out = preprocess(encode(photo("camera"), "PNG"))
    assert np.array_equal(out[..., 0], out[..., 1]) and np.array_equal(out[..., 1], out[..., 2])


def test_alpha_is_composited_over_white():
    img = Image.new("RGBA", (300, 300), (255, 0, 0, 255))
    img.paste((0, 0, 0, 0), (0, 0, 300, 150))  # top half fully transparent (black underneath)
    out = preprocess(encode(img, "PNG"))
    assert (out[5, 112] == [255, 255, 255]).all() and (out[220, 112] == [255, 0, 0]).all()


def test_palette_with_transparency_is_composited_too():
    img = Image.new("P", (300, 300), 1)
    img.putpalette([0, 0, 0, 0, 200, 0] + [0] * 762)
    img.paste(0, (0, 0, 300, 150))
    img.info["transparency"] = 0
    out = preprocess(encode(img, "PNG", transparency=0))
    assert (out[5, 112] == [255, 255, 255]).all() and (out[220, 112] == [0, 200, 0]).all()


def test_cmyk_jpeg_matches_the_rgb_original():
    coffee = photo("coffee")
    rgb = preprocess(encode(coffee, "PNG")).astype(float)
    cmyk = preprocess(encode(coffee.convert("CMYK"), "JPEG", quality=95)).astype(float)
    assert np.abs(rgb - cmyk).mean() < 6.0


def test_exif_orientation_is_applied():
    chelsea = photo("chelsea")  # 451 x 300, landscape
    img = decode(exif_rotated_jpeg(chelsea), PreprocessOptions(fast_jpeg=False))
    assert img.size == chelsea.size
    upright = np.asarray(decode(encode(chelsea, "JPEG", quality=95), PreprocessOptions(fast_jpeg=False)), float)
    assert np.abs(np.asarray(img, float) - upright).mean() < 3.0


def test_resize_crop_equals_resize_then_center_crop():
    img = photo("astronaut").resize((640, 400))
    ours = resize_crop(img).astype(float)
    big = img.resize((410, 256), Image.Resampling.BILINEAR)  # 640 * 256 / 400 = 409.6
    left, top = (410 - 224) // 2, (256 - 224) // 2
    classic = np.asarray(big.crop((left, top, left + 224, top + 224)), float)
    assert np.abs(ours - classic).mean() < 4.0  # same up to sub-pixel crop alignment


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_is_applied_on_the_reduced_size_path(orientation):
    # 1344 x 896 (16-pixel blocks, so transposing moves no partial block): decoded at 1/2 by default.
    img = photo("chelsea").resize((1344, 896), Image.Resampling.BICUBIC)
    data = exif_rotated_jpeg(img, orientation)
    assert decode(data).size == (672, 448)
    upright = preprocess(encode(img, "JPEG", quality=95)).astype(float)
    diff = np.abs(preprocess(data).astype(float) - upright)
    assert diff.mean() < 1.5 and diff.max() <= 16  # stored transposed and ignored: mean diff 32-36


@pytest.mark.parametrize("size,decoded", [(300, 300), (720, 360), (1440, 360), (2400, 300), (4000, 500)])
def test_jpegs_decode_at_the_smallest_power_of_two_scale_above_the_resize_target(size, decoded):
    """What keeps image_preprocess fast (perf/reports/image_decode.md), with the pixels of the full decode."""
    data = encode(photo("astronaut").resize((size, size), Image.Resampling.BICUBIC), "JPEG", quality=90)
    assert decode(data).size == (decoded, decoded)
    full_opts = PreprocessOptions(fast_jpeg=False, max_decoded_pixels=10**8)
    assert decode(data, full_opts).size == (size, size)
    diff = np.abs(preprocess(data).astype(float) - preprocess(data, full_opts).astype(float))
    assert diff.mean() < 1.5


def test_fast_jpeg_decode_is_close_to_full_decode():
    data = encode(photo("retina").resize((2800, 2800)), "JPEG", quality=90)
    fast = preprocess(data, PreprocessOptions(fast_jpeg=True)).astype(float)
    full = preprocess(data, PreprocessOptions(fast_jpeg=False, max_decoded_pixels=10**8)).astype(float)
    assert np.abs(fast - full).mean() < 1.5


@pytest.mark.parametrize("name", list(bad_inputs()))
def test_bad_input_raises_a_clear_error(name):
    data, fragment = bad_inputs()[name]
    with pytest.raises(ImageInputError, match=fragment):
        preprocess(data)


def test_limits_are_configurable():
    data = encode(photo("chelsea"), "PNG")
    with pytest.raises(ImageInputError, match="pixels, over the limit of 1000"):
        preprocess(data, PreprocessOptions(max_pixels=1000))
    with pytest.raises(ImageInputError, match="bytes, over the limit of 100"):
        preprocess(data, PreprocessOptions(max_bytes=100))


def refused_without_decoding(data, fragment, opts=PreprocessOptions()):
    """preprocess(data) raises ImageInputError matching `fragment` without decoding any pixel."""
    def load(self):
        raise AssertionError(f"pixels decoded ({self.format} {self.size}) before the limit refused them")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ImageFile.ImageFile, "load", load)
        with pytest.raises(ImageInputError, match=fragment):
            preprocess(data, opts)


def test_max_bytes_is_checked_before_anything_else():
    refused_without_decoding(b"not an image " * 15 + b"12345", "input is 200 bytes, over the limit of 100",
                             PreprocessOptions(max_bytes=100))
    big = encode(photo("chelsea"), "PNG")
    refused_without_decoding(big, f"input is {len(big)} bytes, over the limit of 1000", PreprocessOptions(max_bytes=1000))


def test_pixel_limits_refuse_from_the_header_without_decoding():
    bomb, _ = bad_inputs()["pixel_bomb_png"]
    refused_without_decoding(bomb, "8000x8000 = 64000000 pixels, over the limit of 40000000")
    # Under max_pixels but over max_decoded_pixels (PNG has no reduced-size decode): refused as well.
    refused_without_decoding(encode(Image.new("L", (2100, 2100)), "PNG"),
                             "decodes to 2100x2100 = 4410000 pixels, over the limit of 4194304")


def test_decoded_pixel_limit_counts_the_reduced_size_decode():
    data = encode(photo("astronaut").resize((1440, 1440)), "JPEG", quality=90)
    refused_without_decoding(data, "decodes to 360x360 = 129600 pixels, over the limit of 100000",
                             PreprocessOptions(max_decoded_pixels=100_000))
    assert preprocess(data, PreprocessOptions(max_decoded_pixels=129_600)).shape == (224, 224, 3)


def test_a_large_jpeg_passes_because_it_decodes_at_reduced_size():
    data = encode(photo("astronaut").resize((6000, 4000), Image.Resampling.NEAREST), "JPEG", quality=85)
    assert decode(data).size == (750, 500)  # 24 MP source, 1/8 scale
    assert preprocess(data).shape == (224, 224, 3)
    with pytest.raises(ImageInputError, match="decodes to 6000x4000 = 24000000 pixels, over the limit of 4194304"):
        preprocess(data, PreprocessOptions(fast_jpeg=False))
