"""Image bytes -> model-ready uint8 pixels, for the image_preprocess Python backend.

Decode (JPEG, PNG, WebP) with EXIF orientation applied, convert any mode to RGB (alpha composited
over white), resize so the shorter side is 256 (bilinear, antialiased), center-crop 224. Large JPEGs
are decoded at reduced size (libjpeg DCT scaling through Pillow's `draft`), which skips most of
the decode work while staying at or above the resize target. The resize and the crop are one
`Image.resize(box=...)` call, so only the cropped region is ever resampled. Pillow's wheel bundles
libjpeg-turbo, so other bindings of it (simplejpeg, PyTurboJPEG) decode the same pixels no faster
(within +-8% per image; their finer M/8 scales change the classifier's answers):
perf/reports/image_decode_libraries.md.

Work per image is bounded before any pixel is decoded: encoded bytes (`max_bytes`), the size the
header declares (`max_pixels`) and the pixels the decoder will actually produce after reduced-size
JPEG decoding (`max_decoded_pixels`): a 40-megapixel JPEG decodes at 1/8 scale and passes, a
4.9 KB PNG that would inflate to 40 megapixels is refused from its header. A JPEG whose header declares
more blocks than its data could code is refused too: libjpeg fills the blocks missing before an early
end marker with gray and reports success, so such a file would be classified as if it were whole.
"""

from __future__ import annotations

import io
import math
import struct
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from hotpath.runtime.inputs import InputError, column, required
from hotpath.runtime.parameters import Parameters

FORMATS = ("JPEG", "PNG", "WEBP")


class ImageInputError(InputError):
    """An input that is not a usable image; the message says why."""


@dataclass(frozen=True)
class PreprocessOptions(Parameters):
    """image_preprocess's parameters (build/image_preprocess.toml), with their defaults."""

    resize_shorter: int = 256
    crop: int = 224
    max_pixels: int = 40_000_000      # decompression-bomb guard, checked before decoding
    max_bytes: int = 8 * 1024 * 1024
    max_decoded_pixels: int = 4_194_304  # pixels actually decoded (after reduced-size JPEG decoding)
    fast_jpeg: bool = True            # reduced-size JPEG decoding


def _open(data: bytes, opts: PreprocessOptions) -> Image.Image:
    if len(data) == 0:
        raise ImageInputError("empty input (0 bytes)")
    if len(data) > opts.max_bytes:
        raise ImageInputError(f"input is {len(data)} bytes, over the limit of {opts.max_bytes}")
    try:
        img = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as exc:
        raise ImageInputError(f"image too large: {exc}") from None
    except UnidentifiedImageError:
        raise ImageInputError(f"not a recognized image (first bytes {data[:8]!r})") from None
    except (OSError, SyntaxError, ValueError, EOFError, struct.error) as exc:  # a header Pillow cannot parse
        raise ImageInputError(f"corrupt image header: {exc}") from None
    if img.format not in FORMATS:
        raise ImageInputError(f"unsupported format {img.format}; send JPEG, PNG or WebP")
    w, h = img.size
    if w < 1 or h < 1:
        raise ImageInputError(f"image has no pixels ({w}x{h})")
    if w * h > opts.max_pixels:
        raise ImageInputError(f"image is {w}x{h} = {w * h} pixels, over the limit of {opts.max_pixels}")
    if img.format == "JPEG":
        _check_jpeg_size(img, len(data))
    return img


def jpeg_blocks(width: int, height: int, sampling: list[tuple[int, int]]) -> int:
    """8x8 blocks a JPEG of this size codes, per component (h, v sampling factors), without MCU padding."""
    h_max, v_max = max(h for h, _ in sampling), max(v for _, v in sampling)
    return sum(math.ceil(math.ceil(width * h / h_max) / 8) * math.ceil(math.ceil(height * v / v_max) / 8)
               for h, v in sampling)


def _check_jpeg_size(img: Image.Image, size: int) -> None:
    # Every Huffman-coded block costs at least one bit (its DC code), so a file with fewer bits than blocks
    # cannot hold the image its header declares: it ends early and libjpeg would fill the rest with gray.
    sampling = [(h, v) for _, h, v, _ in getattr(img, "layer", [])]
    if not sampling or min(min(h, v) for h, v in sampling) < 1:
        raise ImageInputError("corrupt JPEG header: no sampling factors")
    blocks = jpeg_blocks(*img.size, sampling)
    if size * 8 < blocks:
        w, h = img.size
        raise ImageInputError(f"JPEG header declares {w}x{h} ({blocks} blocks), more than its {size} bytes can "
                              f"hold (at least {math.ceil(blocks / 8)}): truncated or lying header")


def _to_rgb(img: Image.Image) -> Image.Image:
    if img.mode == "RGB":
        return img
    if img.mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    if img.mode in ("RGBA", "LA", "RGBa", "La"):
        rgba = img.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    if img.mode.startswith("I;16") or img.mode in ("I", "F"):
        # 16-bit and float grayscale: scale to 8 bits instead of clipping.
        arr = np.asarray(img, dtype=np.float64)
        hi = arr.max() or 1.0
        img = Image.fromarray(np.clip(arr / hi * 255.0, 0, 255).astype(np.uint8), "L")
    return img.convert("RGB")


def decode(data: bytes, opts: PreprocessOptions = PreprocessOptions()) -> Image.Image:
    """Bytes -> RGB image, upright. Raises ImageInputError with a reason for bad input."""
    img = _open(data, opts)
    if opts.fast_jpeg and img.format == "JPEG":
        w, h = img.size
        scale = opts.resize_shorter / min(w, h)
        # draft() picks the smallest DCT scale (1/2, 1/4, 1/8) that stays >= the requested size.
        img.draft("RGB", (math.ceil(w * scale), math.ceil(h * scale)))
    w, h = img.size  # what load() will decode
    if w * h > opts.max_decoded_pixels:
        raise ImageInputError(f"image decodes to {w}x{h} = {w * h} pixels, over the limit of "
                              f"{opts.max_decoded_pixels} (JPEGs decode at reduced size; send a smaller image)")
    try:
        img.load()
        img = ImageOps.exif_transpose(img)
        return _to_rgb(img)
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, KeyError, TypeError,
            ZeroDivisionError) as exc:  # what Pillow's decoders and EXIF parser raise on damaged files
        raise ImageInputError(f"corrupt or truncated {img.format} image: {exc}") from None


def resize_crop(img: Image.Image, opts: PreprocessOptions = PreprocessOptions()) -> np.ndarray:
    """Shorter side -> resize_shorter (bilinear), center crop -> uint8 [crop, crop, 3]."""
    w, h = img.size
    scale = opts.resize_shorter / min(w, h)
    # The crop window in source coordinates: resize+crop as one resample of that window.
    side = opts.crop / scale
    left = (w - side) / 2
    top = (h - side) / 2
    out = img.resize((opts.crop, opts.crop), Image.Resampling.BILINEAR, box=(left, top, left + side, top + side))
    return np.asarray(out, dtype=np.uint8)


def preprocess(data: bytes, opts: PreprocessOptions = PreprocessOptions()) -> np.ndarray:
    """Encoded image bytes -> uint8 [crop, crop, 3] RGB."""
    return resize_crop(decode(data, opts), opts)


def preprocess_request(values: np.ndarray | None, opts: PreprocessOptions = PreprocessOptions()) -> np.ndarray:
    """One request's IMAGE tensor [batch, 1] -> uint8 [batch, crop, crop, 3]; ImageInputError names the item."""
    images = column(required(values, "IMAGE", "BYTES [batch, 1]"), "IMAGE")
    out = np.empty((len(images), opts.crop, opts.crop, 3), dtype=np.uint8)
    for i, value in enumerate(images):
        if not isinstance(value, bytes):   # Triton hands BYTES items over as bytes; anything else is not an image
            raise ImageInputError(f"IMAGE[{i}] must be bytes, got {type(value).__name__}")
        try:
            out[i] = preprocess(value, opts)
        except ImageInputError as exc:
            raise ImageInputError(f"IMAGE[{i}]: {exc}") from None
    return out
