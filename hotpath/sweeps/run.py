"""`hotpath perf`: sweep every endpoint on a local server, report.

Every endpoint's in-process floor is measured in the same run and every report states the ratios
to it. The lab's `python -m perf compare` is this run with rivals measured beside each sweep (`beside`).
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Protocol

from hotpath import paths
from hotpath.sweeps.measure.floor import Floor
from hotpath.sweeps.measure.host_load import QuietReport
from hotpath.sweeps.measure.perf_analyzer import PerfPoint
from hotpath.sweeps.measure.point import response_cache_off
from hotpath.sweeps.measure.sweep import FULL, QUICK, SweepPlan, sweep_endpoint
from hotpath.sweeps.registry import get_endpoint
from hotpath.tuning.slo import Slo

logger = logging.getLogger(__name__)


def reports_dir() -> Path:
    d = paths.ROOT / "perf" / "reports"
    d.mkdir(parents=True, exist_ok=True)
    return d


class Beside(Protocol):
    """What a run measures beside each endpoint's sweep, in the same run (the lab's perf.lab.compare.side_by_side)."""

    name: str                                       # the report's default name

    def command(self, quick: bool) -> str: ...      # the command line the report quotes
    def check(self, endpoints: list[str]) -> None: ...   # fail before any sweep
    def measure(self, url: str, slo: Slo, plan: SweepPlan, log) -> list[PerfPoint]: ...
    def sections(self, url: str, slo: Slo, points: list[PerfPoint], floor: Floor, log) -> list[str]: ...


def run_perf(url: str, slos: dict[str, Slo], endpoints: list[str], quick: bool = False, name: str | None = None,
             quiet: QuietReport | None = None, beside: Beside | None = None, log=logger.info) -> Path:
    """Sweep `endpoints` (and what `beside` measures next to each); returns the report path."""
    from hotpath.sweeps.report import floor_section, write_report

    if beside:
        beside.check(endpoints)
    plan = QUICK if quick else FULL
    name = name or (beside.name if beside else ("perf-quick" if quick else "perf"))
    t0 = time.perf_counter()
    results: dict[str, list[PerfPoint]] = {}
    floors = {}
    sections: list[str] = []
    for endpoint in endpoints:
        slo, entry = slos[endpoint], get_endpoint(endpoint)
        floors[endpoint] = floor = entry.measure_floor(quick=quick, log=log)  # the server is idle meanwhile
        log(f"[perf] {endpoint}: sweep ({'quick' if quick else 'full'} plan)")
        with response_cache_off(url, endpoint):
            results[endpoint] = sweep_endpoint(url, slo, plan, "tuned", steps=beside is None, log=log)
            if beside:
                results[endpoint] += beside.measure(url, slo, plan, log)
        sections += floor_section(slo, floor, results[endpoint])
        if beside:
            sections += beside.sections(url, slo, results[endpoint], floor, log)
    elapsed = time.perf_counter() - t0
    run_dir = paths.ROOT / "perf" / "runs" / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(
        {"points": {e: [p.to_dict() for p in ps] for e, ps in results.items()},
         "floors": {e: f.rows for e, f in floors.items()}}, indent=1))
    command = beside.command(quick) if beside else f"hotpath perf{' --quick' if quick else ''}"
    preamble = [f"Made by `{command}` in {elapsed / 60:.1f} min on this host ({_host()}); perf_analyzer 2.50 over "
                f"gRPC, real payloads (`perf/data/`); raw points: `{run_dir.relative_to(paths.ROOT)}/results.json` "
                "(not committed). Each endpoint's in-process floor was measured in this run; ratios to it compare "
                "across machines."]
    if quiet:
        preamble += ["", f"Machine before measuring: {quiet.summary()}."]
    path = write_report(name, results, slos, reports_dir(), preamble, sections)
    log(f"[perf] report: {path} ({elapsed / 60:.1f} min)")
    return path


def _host() -> str:
    import os
    import platform

    return f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}"
