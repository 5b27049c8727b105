"""`hotpath perf`: sweep every endpoint on a local server, optionally compare alternatives, report.

Every endpoint's in-process floor is measured in the same run and every report states the ratios
to it; the registry (hotpath.perf.registry) says what each endpoint is compared with.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.perf.measure.host_load import QuietReport
from hotpath.perf.measure.perf_analyzer import PerfPoint
from hotpath.perf.measure.point import response_cache_off
from hotpath.perf.measure.sweep import FULL, QUICK, sweep_endpoint
from hotpath.perf.registry import get_endpoint
from hotpath.slo import Slo

logger = logging.getLogger(__name__)


def reports_dir() -> Path:
    d = paths.ROOT / "perf" / "reports"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_perf(url: str, slos: dict[str, Slo], endpoints: list[str], quick: bool = False, compare: bool = False,
             name: str | None = None, quiet: QuietReport | None = None, alternatives: list[str] | None = None,
             log=logger.info) -> Path:
    """Sweep `endpoints`; with `compare`, measure the alternatives too (only those labelled in
    `alternatives` when given); returns the report path."""
    from hotpath.perf.compare.side_by_side import choose, compare_endpoint, section
    from hotpath.perf.report import floor_section, write_report

    for endpoint in endpoints if compare else ():
        choose(get_endpoint(endpoint), alternatives)  # a wrong label fails now, not after the sweeps
    plan = QUICK if quick else FULL
    name = name or ("perf-quick" if quick else ("compare" if compare else "perf"))
    t0 = time.perf_counter()
    results: dict[str, list[PerfPoint]] = {}
    floors = {}
    sections: list[str] = []
    for endpoint in endpoints:
        slo, entry = slos[endpoint], get_endpoint(endpoint)
        floors[endpoint] = floor = entry.measure_floor(quick=quick, log=log)  # the server is idle meanwhile
        log(f"[perf] {endpoint}: sweep ({'quick' if quick else 'full'} plan)")
        notes: dict[str, str] = {}
        with response_cache_off(url, endpoint):
            results[endpoint] = sweep_endpoint(url, slo, plan, "tuned", steps=not compare, log=log)
            if compare:
                points, notes = compare_endpoint(url, slo, entry, plan, only=alternatives, log=log)
                results[endpoint] += points
        sections += floor_section(slo, floor, results[endpoint])
        if compare:
            sections += section(slo, entry, results[endpoint], floor, notes)
            if entry.extra_sections:
                try:
                    sections += entry.extra_sections(url, endpoint, log)
                except HotpathError as exc:
                    log(f"[perf] {endpoint}: extra measurement failed: {exc}")
                    sections += ["", f"### {endpoint}: extra measurement failed", "", str(exc)]
    elapsed = time.perf_counter() - t0
    run_dir = paths.ROOT / "perf" / "runs" / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps(
        {"points": {e: [p.to_dict() for p in ps] for e, ps in results.items()},
         "floors": {e: f.rows for e, f in floors.items()}}, indent=1))
    command = f"hotpath perf{' --quick' if quick else ''}{' --compare' if compare else ''}"
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
