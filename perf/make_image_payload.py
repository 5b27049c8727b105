"""Write perf_analyzer --input-data for image_classification: a real JPEG photo, base64 encoded.

    .venv/bin/python perf/make_image_payload.py                       # 720x720, ~100 KB
    .venv/bin/python perf/make_image_payload.py --size 2400 --out perf/data/image_jpeg_2400.json
"""

import argparse
import base64
import io
import json
import struct

import skimage.data
from PIL import Image


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=720, help="square side in pixels")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--out", default="perf/data/image_jpeg.json")
    args = parser.parse_args()
    img = Image.fromarray(skimage.data.astronaut()).resize((args.size, args.size), Image.Resampling.BICUBIC)
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=args.quality)
    data = buf.getvalue()
    # perf_analyzer sends b64 content as the raw serialized BYTES tensor: each element is
    # prefixed with its length as a little-endian uint32.
    serialized = struct.pack("<I", len(data)) + data
    payload = {"data": [{"IMAGE": {"b64": base64.b64encode(serialized).decode(), "shape": [1]}}]}
    with open(args.out, "w") as f:
        json.dump(payload, f)
    print(f"{args.out}: one {args.size}x{args.size} JPEG, {len(data) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
