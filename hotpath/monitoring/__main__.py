"""`hotpath monitoring [--check]` (or `python -m hotpath.monitoring`): regenerate monitoring/ and deploy/'s generated files."""

from __future__ import annotations

import argparse
import logging
import sys

from hotpath import logs, paths
from hotpath.monitoring.generate import stale, write

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.monitoring", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail when a generated file is stale; write nothing")
    args = parser.parse_args(argv)
    logs.configure()
    if args.check:
        old = stale()
        for path in old:
            log.error(f"[monitoring] stale: {path.relative_to(paths.ROOT)}")
        return 1 if old else 0
    for path in write():
        log.info(f"[monitoring] wrote {path.relative_to(paths.ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
