"""The one entry to every study: `hotpath study NAME [ARGS]` -> the study module's `main(argv)`."""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from hotpath.errors import HotpathError
from hotpath.perf.measure.host_load import QuietReport, allow_busy_default, require_quiet
from hotpath.perf.studies import STUDIES


def parser(name: str, doc: str | None, allow_busy: bool = True) -> argparse.ArgumentParser:
    """The study's argument parser: its docstring as help, `--allow-busy` unless the study needs no quiet host."""
    p = argparse.ArgumentParser(prog=f"hotpath study {name}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if allow_busy:
        p.add_argument("--allow-busy", action="store_true", default=allow_busy_default(),
                       help="measure even when other processes use the CPU (figures then say so)")
    return p


def quiet_host(args: argparse.Namespace) -> QuietReport:
    """Refuse a busy host unless --allow-busy; the report's summary goes into the study's header."""
    return require_quiet(args.allow_busy)


def run(name: str, argv: list[str]) -> int:
    """Run study `name` with `argv`; a SIGTERM (a timeout) unwinds its with-blocks so no server outlives it."""
    if name not in STUDIES:
        raise HotpathError(f"no study '{name}' (known: {', '.join(sorted(STUDIES))})")
    module = importlib.import_module(STUDIES[name][0])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return module.main(argv) or 0


def listing() -> str:
    """One line per study: name and what it measures."""
    width = max(map(len, STUDIES))
    return "\n".join(f"{n:<{width}}  {what}" for n, (_, what) in sorted(STUDIES.items()))
