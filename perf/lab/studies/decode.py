"""JPEG decoding in hotpath.runtime.images.preprocess, by source size.

Default: Pillow's reduced-size (DCT-scaled, `draft`) decode vs its full decode.
`--libraries`: today's Pillow draft path side by side with drop-in preprocessors built on other
libjpeg-turbo bindings (simplejpeg, PyTurboJPEG), on the same photos and the same output tensor:
decode + preprocess time, the pixel difference against today's output and the served classifier's
top-1/top-5 agreement on both outputs.

    flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study decode              # -> perf/reports/image_decode.md
    apt-get install libturbojpeg0                                          # PyTurboJPEG's libturbojpeg.so.0
    flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study decode --libraries  # -> image_decode_libraries.md

`--libraries` installs the bindings (CANDIDATES, pinned) into .hotpath/study-libs/decode/ on first use.

The libraries are not dependencies of hotpath (none was kept: see the report); a binding that is not
importable is listed as such and skipped. PyTurboJPEG 2.x needs libjpeg-turbo >= 3.0 (Debian
bookworm ships 2.1.5), hence 1.8.3. Pillow-SIMD has no binary wheel (sdist only) and is not measured.
"""

from __future__ import annotations

import io
import math
import os
import platform
import statistics
import subprocess
import time
import warnings
from typing import Callable

import numpy as np
from PIL import Image

from hotpath import paths
from hotpath.exporters.samples import jpeg_photo
from hotpath.runtime import images
from hotpath.runtime.images import ImageInputError, PreprocessOptions, preprocess, resize_crop
from perf.lab.studies import runner

SIZES = (300, 720, 1440, 2400, 4000)
# skimage.data's color photographs (the ones that ship with the package, no download).
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina")
# The bindings `--libraries` compares (import name -> pin); not dependencies of hotpath.
CANDIDATES = {"simplejpeg": "simplejpeg==1.9.0", "turbojpeg": "PyTurboJPEG==1.8.3"}
REPORTS = paths.ROOT / "perf" / "reports"
CLASSIFIER = paths.model_repository() / "image_classifier" / "1" / "model.onnx"


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def draft_vs_full() -> None:
    rows = []
    for size in SIZES:
        data = jpeg_photo(size, quality=90)
        repeats = max(5, int(2000 / size))
        fast = median_ms(lambda data=data: preprocess(data, PreprocessOptions(fast_jpeg=True)), repeats)
        full_opts = PreprocessOptions(fast_jpeg=False, max_decoded_pixels=10**9)  # the full decode, unbounded
        full = median_ms(lambda data=data, opts=full_opts: preprocess(data, opts), repeats)
        diff = np.abs(preprocess(data, PreprocessOptions(fast_jpeg=True)).astype(float)
                      - preprocess(data, full_opts).astype(float)).mean()
        rows.append(f"| {size}x{size} | {len(data) / 1024:.0f} KB | {full:.2f} | {fast:.2f} | {full / fast:.1f}x | {diff:.2f} |")
        print(rows[-1], flush=True)
    report = "\n".join([
        "# image_preprocess: fast JPEG decode",
        "",
        f"`perf/lab/studies/decode.py`, single thread, {os.cpu_count()} CPUs, median per image of decode + resize + crop.",
        "",
        "| source | bytes | full decode ms | fast decode ms | speed-up | mean abs pixel diff (0-255) |",
        "|---|---|---|---|---|---|",
        *rows, ""])
    out = REPORTS / "image_decode.md"
    out.write_text(report)
    print(f"wrote {out}")


# --- drop-in preprocessors on other libjpeg-turbo bindings -------------------------------------

# What ImageOps.exif_transpose does for each EXIF orientation value.
_TRANSPOSE = {2: Image.Transpose.FLIP_LEFT_RIGHT, 3: Image.Transpose.ROTATE_180, 4: Image.Transpose.FLIP_TOP_BOTTOM,
              5: Image.Transpose.TRANSPOSE, 6: Image.Transpose.ROTATE_270, 7: Image.Transpose.TRANSVERSE,
              8: Image.Transpose.ROTATE_90}


def _target(w: int, h: int, opts: PreprocessOptions) -> tuple[int, int]:
    scale = opts.resize_shorter / min(w, h)
    return math.ceil(w * scale), math.ceil(h * scale)


def turbo_preprocess(decode_scaled: Callable[[bytes, int, int, int, int], np.ndarray],
                     decoded_size: Callable[[bytes, int, int, int, int], tuple[int, int]],
                     power_of_two: bool) -> Callable[[bytes, PreprocessOptions], np.ndarray]:
    """preprocess() with the JPEG decode done by a libjpeg-turbo binding, everything else as today.

    Pillow still opens the file lazily (no pixel decoded): format, header size, max_bytes and
    max_pixels exactly as images._open, and the EXIF orientation. `power_of_two`: decode at the
    scale Pillow's draft picks (1/2, 1/4, 1/8: the same pixels); else at the smallest M/8 scale
    libjpeg-turbo offers that stays >= the resize target (3/8, 5/8, ...: fewer pixels to decode).
    decode_scaled/decoded_size(data, w, h, min_w, min_h): RGB array / (w, h) it will have.
    Non-JPEG, CMYK and other JPEG modes take Pillow's path unchanged.
    """

    def run(data: bytes, opts: PreprocessOptions = PreprocessOptions()) -> np.ndarray:
        img = images._open(data, opts)
        if img.format != "JPEG" or img.mode not in ("RGB", "L") or not opts.fast_jpeg:
            return preprocess(data, opts)
        w, h = img.size
        orientation = img.getexif().get(0x0112, 1)
        if power_of_two:
            img.draft("RGB", _target(w, h, opts))  # sets the size Pillow would decode to; decodes nothing
            min_w, min_h = img.size
        else:
            min_w, min_h = _target(w, h, opts)
        try:
            dw, dh = decoded_size(data, w, h, min_w, min_h)
            if dw * dh > opts.max_decoded_pixels:
                raise ImageInputError(f"image decodes to {dw}x{dh} = {dw * dh} pixels, over the limit of "
                                      f"{opts.max_decoded_pixels} (JPEGs decode at reduced size; send a smaller image)")
            rgb = Image.fromarray(decode_scaled(data, w, h, min_w, min_h), "RGB")
        except (OSError, ValueError) as exc:  # both bindings raise these on damaged data
            raise ImageInputError(f"corrupt or truncated JPEG image: {exc}") from None
        if orientation in _TRANSPOSE:
            rgb = rgb.transpose(_TRANSPOSE[orientation])
        return resize_crop(rgb, opts)

    return run


def simplejpeg_decoder(power_of_two: bool):
    import simplejpeg

    def decode_scaled(data, w, h, min_w, min_h):
        return simplejpeg.decode_jpeg(data, colorspace="RGB", min_height=min_h, min_width=min_w)

    def decoded_size(data, w, h, min_w, min_h):
        dh, dw, _, _ = simplejpeg.decode_jpeg_header(data, min_height=min_h, min_width=min_w)
        return dw, dh

    return turbo_preprocess(decode_scaled, decoded_size, power_of_two)


def pyturbojpeg_decoder(power_of_two: bool):
    import turbojpeg

    tj = turbojpeg.TurboJPEG()
    factors = sorted((f for f in tj.scaling_factors if f[0] <= f[1]), key=lambda f: f[0] / f[1])

    def factor(w, h, min_w, min_h):
        for num, den in factors:  # smallest first; libjpeg-turbo rounds scaled sizes up
            if -(-w * num // den) >= min_w and -(-h * num // den) >= min_h:
                return num, den
        return 1, 1

    def decoded_size(data, w, h, min_w, min_h):
        num, den = factor(w, h, min_w, min_h)
        return -(-w * num // den), -(-h * num // den)

    def decode_scaled(data, w, h, min_w, min_h):
        # PyTurboJPEG 1.x reports libjpeg-turbo's warnings ("Premature end of JPEG file": a truncated
        # file, the rest filled gray) with warnings.warn, even under TJFLAG_STOPONWARNING: make them errors.
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            try:
                return tj.decode(data, pixel_format=turbojpeg.TJPF_RGB, scaling_factor=factor(w, h, min_w, min_h),
                                 flags=turbojpeg.TJFLAG_STOPONWARNING)
            except UserWarning as exc:
                raise ValueError(str(exc)) from None

    return turbo_preprocess(decode_scaled, decoded_size, power_of_two)


def pillow_draft(data: bytes, opts: PreprocessOptions = PreprocessOptions()) -> np.ndarray:
    return preprocess(data, opts)


def candidates() -> tuple[dict[str, Callable], list[str]]:
    found: dict[str, Callable] = {"Pillow draft (today)": pillow_draft}
    missing = []
    for label, make in (("simplejpeg", simplejpeg_decoder), ("PyTurboJPEG", pyturbojpeg_decoder)):
        try:
            found[f"{label}, Pillow's scale"] = make(True)
            found[f"{label}, M/8 scale"] = make(False)
        except (ImportError, OSError, RuntimeError) as exc:
            missing.append(f"{label}: {type(exc).__name__}: {exc}")
    return found, missing


def square_jpeg(name: str, size: int, quality: int = 90) -> bytes:
    """A skimage.data photo as a size x size JPEG (hotpath.exporters.samples.jpeg_photo for any photo)."""
    import skimage.data

    img = Image.fromarray(getattr(skimage.data, name)()).resize((size, size), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def aspect_jpeg(name: str, size: int, quality: int) -> bytes:
    """The photo with its own aspect ratio, longer side `size`."""
    import skimage.data

    img = Image.fromarray(getattr(skimage.data, name)())
    scale = size / max(img.size)
    img = img.resize((round(img.width * scale), round(img.height * scale)), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def classify(session, pixels: list[np.ndarray]) -> np.ndarray:
    ids = []
    for start in range(0, len(pixels), 16):
        ids.append(session.run(["CLASS_IDS"], {"PIXELS": np.stack(pixels[start:start + 16])})[0])
    return np.concatenate(ids)


def timed_rounds(decoders: dict[str, Callable], data: bytes, rounds: int) -> dict[str, tuple[float, float]]:
    """Median wall and thread-CPU ms per decoder; decoders interleaved so load changes hit them alike."""
    for fn in decoders.values():
        fn(data)
    wall = {k: [] for k in decoders}
    cpu = {k: [] for k in decoders}
    for _ in range(rounds):
        for name, fn in decoders.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(data)
            cpu[name].append(time.thread_time() - c0)
            wall[name].append(time.perf_counter() - t0)
    return {k: (statistics.median(wall[k]) * 1e3, statistics.median(cpu[k]) * 1e3) for k in decoders}


def pillow_breakdown(data: bytes, rounds: int) -> tuple[float, float, float]:
    """Median ms of today's path in three parts: lazy open (header, limits), scaled decode, resize + crop."""
    opts = PreprocessOptions()
    parts: list[list[float]] = [[], [], []]
    for _ in range(rounds + 1):
        t0 = time.perf_counter()
        img = images._open(data, opts)
        t1 = time.perf_counter()
        rgb = images.decode(data, opts)  # opens again: its own time minus the open is the decode
        t2 = time.perf_counter()
        resize_crop(rgb, opts)
        t3 = time.perf_counter()
        parts[0].append(t1 - t0)
        parts[1].append((t2 - t1) - (t1 - t0))
        parts[2].append(t3 - t2)
    del img
    return tuple(statistics.median(p[1:]) * 1e3 for p in parts)


def host_state() -> str:
    return subprocess.run(["uptime"], check=False, capture_output=True, text=True).stdout.strip()


def libraries() -> None:
    import onnxruntime as ort
    import PIL
    from PIL import features

    decoders, missing = candidates()
    names = list(decoders)
    uptime_before = host_state()
    print(uptime_before, flush=True)

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    session = ort.InferenceSession(str(CLASSIFIER), so, providers=["CPUExecutionProvider"])

    rows, breakdown = [], []
    for size in SIZES:
        # Time: the report's photos at this size, each decoder's median per photo, mean over photos.
        datas = [square_jpeg(p, size) for p in PHOTOS]
        rounds = max(25, int(20000 / size))
        per_photo = [timed_rounds(decoders, d, rounds) for d in datas]
        wall = {n: statistics.fmean(t[n][0] for t in per_photo) for n in names}
        cpu = {n: statistics.fmean(t[n][1] for t in per_photo) for n in names}
        # Parity: the same square photos plus each photo at its own aspect ratio, quality 90 and 75.
        parity_set = datas + [aspect_jpeg(p, size, q) for p in PHOTOS for q in (90, 75)]
        ref = [pillow_draft(d) for d in parity_set]
        split = [pillow_breakdown(d, rounds) for d in datas]
        decoded = images.decode(datas[0]).size
        breakdown.append(f"| {size} | {decoded[0]}x{decoded[1]} | "
                         + " | ".join(f"{statistics.fmean(s[i] for s in split):.2f}" for i in range(3)) + " |")
        ref_ids = classify(session, ref)
        kb = statistics.fmean(len(d) for d in datas) / 1024
        for name in names:
            if name == names[0]:
                diff_max, diff_mean, top1, top5 = 0, 0.0, len(ref), len(ref)
            else:
                out = [decoders[name](d) for d in parity_set]
                diffs = [np.abs(o.astype(np.int16) - r.astype(np.int16)) for o, r in zip(out, ref, strict=True)]
                diff_max = max(int(d.max()) for d in diffs)
                diff_mean = statistics.fmean(float(d.mean()) for d in diffs)
                ids = classify(session, out)
                top1 = int((ids[:, 0] == ref_ids[:, 0]).sum())
                top5 = sum(set(a) == set(b) for a, b in zip(ids, ref_ids, strict=True))
            rows.append(f"| {size} | {kb:.0f} KB | {name} | {wall[name]:.2f} | {wall[names[0]] / wall[name]:.2f}x "
                        f"| {cpu[name]:.2f} | {cpu[names[0]] / cpu[name]:.2f}x | {diff_max} | {diff_mean:.3f} "
                        f"| {top1}/{len(ref)} | {top5}/{len(ref)} |")
            print(rows[-1], flush=True)

    uptime_after = host_state()
    versions = [f"Pillow {PIL.__version__} (bundled libjpeg-turbo {features.version('libjpeg_turbo')})"]
    try:
        import simplejpeg
        versions.append(f"simplejpeg {simplejpeg.__version__} (bundled libjpeg-turbo 3.1.2)")
    except ImportError:
        pass
    try:
        import turbojpeg
        versions.append(f"PyTurboJPEG {turbojpeg.__version__} (system libturbojpeg.so.0 from Debian libturbojpeg0)")
    except ImportError:
        pass
    report = "\n".join([
        "# image_preprocess: JPEG decoders side by side",
        "",
        "```",
        "PYTHONPATH=/tmp/decode-libs flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study decode --libraries",
        "```",
        "",
        (f"Host: {os.cpu_count()} CPUs, Python {platform.python_version()}, shared with other work; "
         f"`uptime` before: `{uptime_before}`, after: `{uptime_after}`."),
        f"Versions: {'; '.join(versions)}." + (f" Not importable: {'; '.join(missing)}." if missing else ""),
        "Pillow-SIMD: no binary wheel on PyPI for any Python (sdist only), not measured.",
        "",
        "Every decoder is a drop-in `preprocess`: Pillow's lazy open for format, header, `max_bytes` and",
        "`max_pixels`, EXIF orientation read from the header, the JPEG decoded by the binding, the decoded-size",
        "limit, then the same `resize_crop` (shorter side 256, bilinear, center crop 224, uint8 [224,224,3]).",
        "\"Pillow's scale\": the binding decodes at the scale Pillow's draft picks (1/1, 1/2, 1/4, 1/8);",
        "\"M/8 scale\": at the smallest of libjpeg-turbo's M/8 scales that stays >= the resize target",
        "(720 px decodes at 3/8 = 270 px instead of 1/2 = 360 px; 300 px at 7/8 = 263 px instead of 1/1).",
        "",
        f"Time: the {len(PHOTOS)} skimage.data color photos ({', '.join(PHOTOS)}) as size x size JPEGs at quality",
        "90 (as `hotpath.exporters.samples.jpeg_photo`), single thread, decoders interleaved round by round; per",
        "photo the median of the rounds, then the mean over the photos. Wall ms and the thread's CPU ms",
        "(`time.thread_time`: what the decode costs, without the time other processes took the core).",
        "Speed-ups are Pillow draft's time / the decoder's time (> 1: faster than today).",
        "",
        f"Parity: per size {len(PHOTOS) * 3} images (those {len(PHOTOS)} square photos, and each photo at its own aspect ratio, longer",
        "side = size, quality 90 and 75): the abs difference of the uint8 output to today's output (max over",
        "all images, mean of per-image means) and the served classifier",
        "(`model_repository/image_classifier/1/model.onnx`) on both outputs: images with the same top-1",
        "class, images with the same top-5 set.",
        "",
        "| source px | mean bytes | decoder | wall ms | speed-up | CPU ms | speed-up (CPU) | max abs diff | mean abs diff | top-1 same | top-5 same |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Where today's time goes (Pillow draft, same photos, mean of per-photo medians; the decode includes",
        "the entropy decoding of the whole file, which no DCT scale skips):",
        "",
        "| source px | decoded at | open + header checks ms | scaled decode ms | resize + crop ms |",
        "|---|---|---|---|---|",
        *breakdown,
        "",
    ])
    out = REPORTS / "image_decode_libraries.md"
    if out.exists():  # keep the hand-written conclusions below the generated table
        old = out.read_text()
        marker = "\n## Conclusion"
        if marker in old:
            report += old[old.index(marker) + 1:]
    out.write_text(report)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("decode", __doc__, allow_busy=False)
    parser.add_argument("--libraries", action="store_true",
                        help="compare simplejpeg / PyTurboJPEG with Pillow's draft decode (image_decode_libraries.md)")
    args = parser.parse_args(argv)
    if args.libraries:
        runner.candidates("decode", CANDIDATES)
    libraries() if args.libraries else draft_vs_full()
    return 0
