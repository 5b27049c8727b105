"""Console logging for hotpath's command-line entry points: call `configure()` once in a `main()`.

Library modules log to `logging.getLogger(__name__)` and never configure logging themselves, so a
program that imports them decides what it sees. `configure()` shows hotpath's INFO progress lines
("[build] ...", "[serve] ...") as they were printed before: the message alone, INFO on stdout,
warnings and errors on stderr. Other libraries stay at WARNING. Stdlib only: the container's
entry points (hotpath.server.supervise) use it too.
"""

from __future__ import annotations

import logging
import sys


class _Console(logging.Handler):
    """INFO and below to stdout, WARNING and above to stderr: sys.stdout / sys.stderr looked up at each record,
    never kept (a stream swapped out and closed meanwhile, as test capture does, is never written or flushed)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if record.levelno < logging.WARNING else sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own policy: report, never raise into the caller
            self.handleError(record)


def configure(level: int = logging.INFO) -> None:
    """Message-only console output for the `hotpath` loggers at `level`; a second call changes nothing."""
    root = logging.getLogger()
    if not any(isinstance(h, _Console) for h in root.handlers):
        handler = _Console()
        handler.setFormatter(logging.Formatter("%(message)s"))
        root.addHandler(handler)
    for name in ("hotpath", "__main__"):   # a module run with `python -m` logs as __main__
        logging.getLogger(name).setLevel(level)
