"""Write perf_analyzer --input-data for image_classification: a real JPEG photo, base64 encoded.

    .venv/bin/python perf/make_image_payload.py                       # 720x720, ~100 KB
    .venv/bin/python perf/make_image_payload.py --size 2400 --out perf/data/image_jpeg_2400.json
"""

import argparse
import json

from hotpath.perf.payloads import bytes_entry, jpeg_photo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size", type=int, default=720, help="square side in pixels")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--out", default="perf/data/image_jpeg.json")
    args = parser.parse_args()
    data = jpeg_photo(args.size, args.quality)
    with open(args.out, "w") as f:
        json.dump({"data": [{"IMAGE": bytes_entry(data)}]}, f)
    print(f"{args.out}: one {args.size}x{args.size} JPEG, {len(data) / 1024:.0f} KB")


if __name__ == "__main__":
    main()
