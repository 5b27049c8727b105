"""Test images made from scikit-image's real sample photos: variants in every mode and format."""

from __future__ import annotations

import io

import numpy as np
import skimage.data
from PIL import Image


def photo(name: str) -> Image.Image:
    arr = getattr(skimage.data, name)()
    if arr.dtype == bool:
        arr = arr.astype(np.uint8) * 255
    return Image.fromarray(arr)


def encode(img: Image.Image, fmt: str, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt, **kwargs)
    return buf.getvalue()


# How a camera stores an upright view for each EXIF orientation value (the inverse of what a viewer,
# and ImageOps.exif_transpose, applies): 6 = stored rotated 90 CCW, shown after rotating 90 CW.
_STORED = {
    1: None,
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def exif_rotated_jpeg(img: Image.Image, orientation: int = 6, quality: int = 95) -> bytes:
    """JPEG whose pixels are stored transposed, with the EXIF tag that tells viewers to turn them upright."""
    stored = img if _STORED[orientation] is None else img.transpose(_STORED[orientation])
    exif = Image.Exif()
    exif[0x0112] = orientation
    return encode(stored, "JPEG", quality=quality, exif=exif.tobytes())


def variants() -> dict[str, bytes]:
    """Named encoded images covering formats, modes, orientation and odd sizes."""
    chelsea, coffee, rocket, astronaut = (photo(n) for n in ("chelsea", "coffee", "rocket", "astronaut"))
    logo = photo("logo")  # RGBA with transparency
    hubble = photo("hubble_deep_field")
    return {
        "chelsea.jpg": encode(chelsea, "JPEG", quality=90),
        "coffee.png": encode(coffee, "PNG"),
        "rocket.webp": encode(rocket, "WEBP", quality=90),
        "astronaut.jpg": encode(astronaut, "JPEG", quality=90),
        "retina_large.jpg": encode(photo("retina"), "JPEG", quality=90),
        "immunohistochemistry.png": encode(photo("immunohistochemistry"), "PNG"),
        "coffee_q10.jpg": encode(coffee, "JPEG", quality=10),
        "logo_alpha.png": encode(logo, "PNG"),
        "camera_gray.png": encode(photo("camera"), "PNG"),
        "chelsea_gray.jpg": encode(chelsea.convert("L"), "JPEG", quality=90),
        "chelsea_palette.png": encode(chelsea.convert("P", palette=Image.Palette.ADAPTIVE), "PNG"),
        "coffee_cmyk.jpg": encode(coffee.convert("CMYK"), "JPEG", quality=95),
        "chelsea_exif_rotated.jpg": exif_rotated_jpeg(chelsea),
        "astronaut_tiny_32.png": encode(astronaut.resize((32, 32)), "PNG"),
        "hubble_very_wide.jpg": encode(hubble.resize((2000, 120)), "JPEG", quality=90),
        "page_gray_wide.png": encode(photo("page"), "PNG"),
    }


def bad_inputs() -> dict[str, tuple[bytes, str]]:
    """Named bad inputs and a fragment of the error each must produce."""
    good = encode(photo("chelsea"), "JPEG", quality=90)
    corrupt = bytearray(good)
    corrupt[200:4000] = bytes(3800)  # wipe headers and entropy-coded data after the SOI marker
    return {
        "empty": (b"", "empty input"),
        "truncated_jpeg": (good[: len(good) // 3], "truncated"),
        "corrupt_jpeg": (bytes(corrupt), "image"),
        "text": (b"hello, this is not an image at all", "not a recognized image"),
        "gif": (encode(photo("chelsea"), "GIF"), "unsupported format GIF"),
        "pixel_bomb_png": (encode(Image.new("1", (8000, 8000)), "PNG"), "over the limit"),
    }
