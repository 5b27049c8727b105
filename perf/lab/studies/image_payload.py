"""Write perf_analyzer --input-data for image_classification: a real JPEG photo, base64 encoded.

    .venv/bin/python -m perf study image_payload                       # 720x720, ~100 KB
    .venv/bin/python -m perf study image_payload --size 2400 --out perf/data/image_jpeg_2400.json
"""

import json

from hotpath.exporters.samples import bytes_entry, jpeg_photo
from perf.lab.studies import runner


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("image_payload", __doc__, allow_busy=False)
    parser.add_argument("--size", type=int, default=720, help="square side in pixels")
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--out", default="perf/data/image_jpeg.json")
    args = parser.parse_args(argv)
    data = jpeg_photo(args.size, args.quality)
    with open(args.out, "w") as f:
        json.dump({"data": [{"IMAGE": bytes_entry(data)}]}, f)
    print(f"{args.out}: one {args.size}x{args.size} JPEG, {len(data) / 1024:.0f} KB")
    return 0
