"""`hotpath monitoring [--check]` (or `python -m hotpath.monitoring`): regenerate monitoring/ and deploy/'s generated files."""

from __future__ import annotations

import argparse
import sys

from hotpath import paths
from hotpath.monitoring.generate import stale, write


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.monitoring", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when a generated file is stale; write nothing")
    args = parser.parse_args(argv)
    if args.check:
        old = stale()
        for path in old:
            print(f"[monitoring] stale: {path.relative_to(paths.ROOT)}", file=sys.stderr)
        return 1 if old else 0
    for path in write():
        print(f"[monitoring] wrote {path.relative_to(paths.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
