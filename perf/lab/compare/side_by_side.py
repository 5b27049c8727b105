"""`python -m perf compare`: an endpoint's alternatives side by side, same machine, same load, one run.

hotpath's own (tuned) config against the endpoint's alternatives (perf.lab.compare.rivals:
Triton's default config, FastAPI + uvicorn + ORT with sync and async handlers, PyTriton, Model
Analyzer's best config) and the in-process floor. Each is reported as throughput at the endpoint's
p95 target, p50 at concurrency 1, and as ratios to hotpath and to the floor.
"""

from __future__ import annotations

import logging

from hotpath.errors import HotpathError
from hotpath.sweeps.measure import perf_analyzer as analyzer
from hotpath.sweeps.measure.floor import Floor
from hotpath.sweeps.measure.perf_analyzer import PerfPoint
from hotpath.sweeps.measure.point import endpoint_steps
from hotpath.sweeps.measure.sweep import SweepPlan, sweep_endpoint, throughput_at_target
from hotpath.sweeps.registry import PerfEntry, get_endpoint
from hotpath.tuning.slo import Slo
from perf.lab.compare.alternatives.launch import Context
from perf.lab.compare.rivals import Rivals, rivals_for

logger = logging.getLogger(__name__)

COMPARE_CONCURRENCIES = (1, 2, 4, 8)
OURS = "tuned"


def _perf_analyzer_sweep(url: str, protocol: str, slo: Slo, plan: SweepPlan, label: str, points: list[PerfPoint],
                         log) -> None:
    """perf_analyzer alone, for servers without Triton's statistics API; appends to `points` as it goes,
    so the points measured before a failure stay in the report."""
    for c in plan.concurrencies:
        p = analyzer.run(slo.endpoint, url, "concurrency", c, slo.input_data, protocol=protocol,
                         measurement=plan.measurement)
        p.label = label
        points.append(p)
        log(f"[perf] {label:>14} {slo.endpoint:<22} concurrency {c}: p50 {p.p50_ms:6.1f} ms  p95 {p.p95_ms:6.1f} ms"
            f"  {p.throughput:6.1f}/s")


def choose(endpoint: str, only: list[str] | None) -> list:
    """The endpoint's alternatives labelled in `only` (all without it); an unknown label is an error."""
    alternatives = rivals_for(endpoint).alternatives
    unknown = set(only or ()) - {a.label for a in alternatives}
    if unknown:
        raise HotpathError(f"{endpoint} has no alternative {', '.join(sorted(unknown))} (known: "
                           f"{', '.join(a.label for a in alternatives)})")
    return [a for a in alternatives if not only or a.label in only]


def configured_models(endpoint: str) -> list[str]:
    """The models whose configs an alternative such as Triton's default config changes: an ensemble's
    steps, or a single-model endpoint itself."""
    return [m for m in endpoint_steps(endpoint) if m != endpoint] or [endpoint]


def compare_endpoint(url: str, slo: Slo, plan: SweepPlan, only: list[str] | None = None,
                     log=logger.info) -> tuple[list[PerfPoint], dict[str, str]]:
    """Measure the registered alternatives of one endpoint (those labelled in `only`, when given);
    returns their points and a note per label.

    One failing alternative is reported as failed and the others still run."""
    chosen = choose(slo.endpoint, only)
    alt_plan = SweepPlan(COMPARE_CONCURRENCIES, (), (), plan.measurement)
    ctx = Context(url, slo.endpoint, configured_models(slo.endpoint), rivals_for(slo.endpoint).searched_step, slo.p95_ms,
                  slo.concurrency, log)
    points: list[PerfPoint] = []
    notes: dict[str, str] = {}
    for alt in chosen:
        log(f"[perf] {slo.endpoint}: {alt.title}")
        try:
            with alt.serve(ctx) as target:
                if target.statistics:
                    points += sweep_endpoint(target.url, slo, alt_plan, alt.label, steps=False, log=log)
                else:
                    _perf_analyzer_sweep(target.url, target.protocol, slo, alt_plan, alt.label, points, log)
            notes[alt.label] = target.note or alt.note
        except HotpathError as exc:
            notes[alt.label] = f"failed: {str(exc).splitlines()[0]}"
            log(f"[perf] {alt.title} failed: {exc}")
    return points, notes


def _own(points: list[PerfPoint], slo: Slo, label: str) -> list[PerfPoint]:
    return [p for p in points if p.label == label and p.model == slo.endpoint and p.load_kind == "concurrency"]


def _at(points: list[PerfPoint], slo: Slo, label: str, load: int) -> PerfPoint | None:
    hit = [p for p in _own(points, slo, label) if p.load == load]
    return hit[0] if hit else None


def section(slo: Slo, entry: PerfEntry, rivals: Rivals, points: list[PerfPoint], floor: Floor | None,
            notes: dict[str, str]) -> list[str]:
    """compare.md's table for one endpoint: every option against hotpath and against the floor."""
    def ratio(a: float, b: float) -> str:
        return f"{a / b:.2f}" if a and b else "-"

    def ms(p: PerfPoint | None, attr: str) -> str:
        return f"{getattr(p, attr):.1f} ms" if p else "-"

    ours = throughput_at_target(_own(points, slo, OURS), slo.p95_ms)
    floor_tput = floor.throughput(slo.p95_ms) if floor else 0.0
    rows = [(OURS, "hotpath (tuned config in the specs)", "")]
    rows += [(a.label, a.title, notes.get(a.label, a.note)) for a in rivals.alternatives
             if a.label in notes or any(p.label == a.label for p in points)]
    lines = ["", f"### {slo.endpoint}: side by side (same run, same load)", "",
             f"Throughput at the p95 target ({slo.p95_ms:g} ms), best over concurrency {list(COMPARE_CONCURRENCIES)}. "
             f"Model: `{entry.graph}`, precision {entry.precision()}, the same file in every option (FastAPI, "
             "PyTriton and the floor load it too), so the ratios are server overhead, not precision. "
             "Both views of the comparison (same FP32 model; same INT8 model) are this table run with the "
             "spec's `precision` set to each.", "",
             f"| option | throughput at p95 target ({entry.unit}/s) | ratio to hotpath | ratio to floor | p50 at "
             f"concurrency 1 | p95 at concurrency {slo.concurrency} | notes |", "|---|---|---|---|---|---|---|"]
    best_alt: tuple[float, str, PerfPoint | None] = (0.0, "", None)
    for label, title, note in rows:
        t = throughput_at_target(_own(points, slo, label), slo.p95_ms)
        one = _at(points, slo, label, 1)
        lines.append(f"| {title} | {t:.1f} | {ratio(t, ours)} | {ratio(t, floor_tput)} | {ms(one, 'p50_ms')} | "
                     f"{ms(_at(points, slo, label, slo.concurrency), 'p95_ms')} | {note} |")
        if label != OURS and t > best_alt[0]:
            best_alt = (t, title, one)
    if floor:
        lines.append(f"| in-process floor (no server) | {floor_tput:.1f} | {ratio(floor_tput, ours)} | 1.00 | "
                     f"{floor.single_p50_ms():.1f} ms (batch 1) | - | {floor.describe(slo.p95_ms)} |")
    if best_alt[1]:
        ours_one = _at(points, slo, OURS, 1)
        lines += ["", f"hotpath / best alternative ({best_alt[1]}): throughput {ratio(ours, best_alt[0])}x; p50 at "
                  f"concurrency 1: {ms(ours_one, 'p50_ms')} vs {ms(best_alt[2], 'p50_ms')}."]
    return lines


class SideBySide:
    """What `python -m perf compare` adds to `hotpath perf`'s run (hotpath.sweeps.run.run_perf's `beside`): each
    endpoint's alternatives measured after its sweep (only those labelled in `only`, when given), and their table."""

    name = "compare"

    def __init__(self, only: list[str] | None = None):
        self.only = only
        self.notes: dict[str, dict[str, str]] = {}

    def command(self, quick: bool) -> str:
        return f"python -m perf compare{' --quick' if quick else ''}"

    def check(self, endpoints: list[str]) -> None:
        """A wrong label fails now, not after the sweeps."""
        for endpoint in endpoints:
            choose(endpoint, self.only)

    def measure(self, url: str, slo: Slo, plan: SweepPlan, log) -> list[PerfPoint]:
        points, self.notes[slo.endpoint] = compare_endpoint(url, slo, plan, only=self.only, log=log)
        return points

    def sections(self, url: str, slo: Slo, points: list[PerfPoint], floor: Floor, log) -> list[str]:
        rivals = rivals_for(slo.endpoint)
        lines = section(slo, get_endpoint(slo.endpoint), rivals, points, floor, self.notes.get(slo.endpoint, {}))
        if rivals.extra_sections:
            try:
                lines += rivals.extra_sections(url, slo.endpoint, log)
            except HotpathError as exc:
                log(f"[perf] {slo.endpoint}: extra measurement failed: {exc}")
                lines += ["", f"### {slo.endpoint}: extra measurement failed", "", str(exc)]
        return lines
