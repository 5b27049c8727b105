"""`hotpath perf`: sweep every endpoint on a local server, optionally compare alternatives, report."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.perf.analyzer import PerfPoint
from hotpath.perf.measure import response_cache_off
from hotpath.perf.slo import Slo
from hotpath.perf.sweep import FULL, QUICK, sweep_endpoint


def reports_dir() -> Path:
    d = paths.ROOT / "perf" / "reports"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_perf(url: str, slos: dict[str, Slo], endpoints: list[str], quick: bool = False, compare: bool = False,
             name: str | None = None, log=print) -> Path:
    """Sweep `endpoints`; with `compare`, measure the alternatives too; returns the report path."""
    from hotpath.perf.report import write_report

    plan = QUICK if quick else FULL
    name = name or ("perf-quick" if quick else ("compare" if compare else "perf"))
    t0 = time.perf_counter()
    results: dict[str, list[PerfPoint]] = {}
    sections: list[str] = []
    for endpoint in endpoints:
        slo = slos[endpoint]
        log(f"[perf] {endpoint}: sweep ({'quick' if quick else 'full'} plan)")
        with response_cache_off(url, endpoint):
            results[endpoint] = sweep_endpoint(url, slo, plan, "tuned", steps=not compare, log=log)
            if compare:
                from hotpath.perf.compare import compare_endpoint

                points, section = compare_endpoint(url, slo, plan, results[endpoint], log=log)
                results[endpoint] += points
                sections += section
        if compare and endpoint == "text_embedding":
            from hotpath.perf.cache import measure_cache

            try:
                sections += measure_cache(url, endpoint, log=log)
            except HotpathError as exc:
                log(f"[perf] response cache measurement failed: {exc}")
                sections += ["", f"### {endpoint}: response cache", "", f"Measurement failed: {exc}"]
    elapsed = time.perf_counter() - t0
    run_dir = paths.ROOT / "perf" / "runs" / time.strftime("%Y%m%dT%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "results.json").write_text(json.dumps({e: [p.to_dict() for p in ps] for e, ps in results.items()},
                                                     indent=1))
    preamble = [f"Made by `hotpath perf{' --quick' if quick else ''}{' --compare' if compare else ''}` in "
                f"{elapsed / 60:.1f} min on this host; perf_analyzer 2.50 over gRPC, real payloads "
                f"(`perf/data/`); raw points: `{run_dir.relative_to(paths.ROOT)}/results.json` (not committed)."]
    path = write_report(name, results, slos, reports_dir(), preamble, sections)
    log(f"[perf] report: {path} ({elapsed / 60:.1f} min)")
    return path
