"""The one entry to every study: `python -m perf study NAME [ARGS]` -> the study module's `main(argv)`."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import subprocess
import sys

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.sweeps.measure.host_load import allow_busy_default
from perf.lab.studies import STUDIES

logger = logging.getLogger(__name__)


def parser(name: str, doc: str | None, allow_busy: bool = True) -> argparse.ArgumentParser:
    """The study's argument parser: its docstring as help, and `--allow-busy` for a study that refuses a busy host."""
    p = argparse.ArgumentParser(prog=f"python -m perf study {name}", description=doc,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    if allow_busy:
        p.add_argument("--allow-busy", action="store_true", default=allow_busy_default(),
                       help="measure even when other processes use the CPU (figures then say so)")
    return p


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


def candidates(study: str, pins: dict[str, str]) -> None:
    """Make the libraries a study compares (import name -> exact pin) importable: installed on first use,
    without dependencies, into .hotpath/study-libs/<study>/, never into hotpath's own environment (none of
    them is a dependency of hotpath: the study is how one was chosen or turned down)."""
    target = paths.work_dir() / "study-libs" / study
    stamp = target / ".pins"
    wanted = "\n".join(sorted(pins.values()))
    if not (stamp.exists() and stamp.read_text() == wanted):
        logger.info(f"[study {study}] installing {', '.join(sorted(pins.values()))} into {target}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--upgrade", "--no-deps", "--target", str(target),
                        *sorted(pins.values())], check=True)
        stamp.write_text(wanted)
    if str(target) not in sys.path:
        sys.path.insert(0, str(target))
