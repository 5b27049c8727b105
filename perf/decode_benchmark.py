"""Fast (reduced-size DCT) vs full JPEG decode in hotpath.runtime.images.preprocess, by source size.

    .venv/bin/python perf/decode_benchmark.py   # writes perf/reports/image_decode.md
"""

import os
import statistics
import time
from pathlib import Path

import numpy as np

from hotpath.runtime.images import PreprocessOptions, preprocess
from hotpath.perf.payloads import jpeg_photo

SIZES = (300, 720, 1440, 2400, 4000)


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main() -> None:
    rows = []
    for size in SIZES:
        data = jpeg_photo(size, quality=90)
        repeats = max(5, int(2000 / size))
        fast = median_ms(lambda: preprocess(data, PreprocessOptions(fast_jpeg=True)), repeats)
        full_opts = PreprocessOptions(fast_jpeg=False, max_decoded_pixels=10**9)  # the full decode, unbounded
        full = median_ms(lambda: preprocess(data, full_opts), repeats)
        diff = np.abs(preprocess(data, PreprocessOptions(fast_jpeg=True)).astype(float)
                      - preprocess(data, full_opts).astype(float)).mean()
        rows.append(f"| {size}x{size} | {len(data) / 1024:.0f} KB | {full:.2f} | {fast:.2f} | {full / fast:.1f}x | {diff:.2f} |")
        print(rows[-1], flush=True)
    report = "\n".join([
        "# image_preprocess: fast JPEG decode",
        "",
        f"`perf/decode_benchmark.py`, single thread, {os.cpu_count()} CPUs, median per image of decode + resize + crop.",
        "",
        "| source | bytes | full decode ms | fast decode ms | speed-up | mean abs pixel diff (0-255) |",
        "|---|---|---|---|---|---|",
        *rows, ""])
    out = Path(__file__).parent / "reports" / "image_decode.md"
    out.write_text(report)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
