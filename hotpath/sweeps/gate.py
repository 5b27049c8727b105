"""`hotpath perf-check`: does every endpoint meet its p95 target at its declared load?

Before anything is measured: every input file exists (generated when hotpath knows how) and the
machine is quiet. Each endpoint's in-process floor is measured in the same run, so the verdict
carries a ratio that reads the same on any machine.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from hotpath.exporters.samples import ensure_input
from hotpath.sweeps.measure.floor import Floor
from hotpath.sweeps.measure.host_load import QuietReport, require_quiet
from hotpath.sweeps.measure.perf_analyzer import Measurement, PerfPoint
from hotpath.sweeps.measure.point import measure, response_cache_off
from hotpath.sweeps.measure.server_stats import bottleneck
from hotpath.sweeps.registry import get_endpoint
from hotpath.tuning.slo import Slo

logger = logging.getLogger(__name__)


def before_measuring(slos: list[Slo], allow_busy: bool = False, log=logger.info) -> QuietReport:
    """Input files present (or generated) and the machine quiet; raises HotpathError otherwise."""
    for slo in slos:
        get_endpoint(slo.endpoint)
        ensure_input(slo.input_data, f"endpoint {slo.endpoint} in perf/slo.toml")
    return require_quiet(allow_busy, log)


@dataclass
class CheckRow:
    slo: Slo
    point: PerfPoint
    floor: Floor | None = None

    @property
    def absolute_ok(self) -> bool:
        return self.point.p95_ms <= self.slo.p95_ms

    @property
    def relative_target_ms(self) -> float | None:
        """The target scaled to this host: by the floor's batch-1 p50 measured in this run."""
        return self.slo.relative_target_ms(self.floor.single_p50_ms()) if self.floor else None

    @property
    def relative_ok(self) -> bool | None:
        target = self.relative_target_ms
        return None if target is None else self.point.p95_ms <= target

    @property
    def ok(self) -> bool:
        """The verdict the SLO asks for; a relative one falls back to absolute when no floor was measured."""
        if self.slo.verdict == "relative" and self.relative_ok is not None:
            return self.relative_ok
        return self.absolute_ok

    @property
    def floor_throughput(self) -> float:
        return self.floor.throughput(self.slo.p95_ms) if self.floor else 0.0


def check(url: str, slos: list[Slo], measurement: Measurement = Measurement(), log=logger.info) -> list[CheckRow]:
    rows = []
    for slo in slos:
        floor = get_endpoint(slo.endpoint).measure_floor(quick=True, log=log)
        log(f"[perf-check] {slo.endpoint}: measuring at concurrency {slo.concurrency} (target p95 <= {slo.p95_ms:g} ms)")
        with response_cache_off(url, slo.endpoint):  # the target must hold on cache misses too
            point = measure(url, slo.endpoint, "concurrency", slo.concurrency, slo.input_data, measurement)
        rows.append(CheckRow(slo, point, floor))
    return rows


def format_table(rows: list[CheckRow], quiet: QuietReport | None = None) -> str:
    lines = ["| endpoint | load | target p95 | measured p50 | measured p95 | throughput | in-process floor (same run) "
             "| ratio to floor | bottleneck step | absolute | relative to the floor | result |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r.point
        worst = bottleneck({m: s for m, s in p.steps.items() if m != r.slo.endpoint} or p.steps) or "-"
        floor = f"{r.floor_throughput:.1f}/s" if r.floor else "-"
        ratio = f"{p.throughput / r.floor_throughput:.2f}" if r.floor_throughput else "-"
        target = r.relative_target_ms
        relative = "-" if target is None else (
            f"{'PASS' if r.relative_ok else 'MISS'} (p95 <= {target:.1f} ms: {r.slo.p95_ms:g} x floor "
            f"{r.floor.single_p50_ms():.2f} / {r.slo.floor_reference_ms:g} ms)")
        lines.append(f"| {r.slo.endpoint} | concurrency {r.slo.concurrency} | {r.slo.p95_ms:g} ms | {p.p50_ms:.1f} ms "
                     f"| {p.p95_ms:.1f} ms | {p.throughput:.1f}/s | {floor} | {ratio} | {worst} "
                     f"| {'PASS' if r.absolute_ok else 'MISS'} | {relative} "
                     f"| {'PASS' if r.ok else 'MISS'} ({r.slo.verdict}) |")
    lines.append("")
    for r in rows:
        if r.floor:
            lines.append(f"floor {r.slo.endpoint}: {r.floor.describe(r.slo.p95_ms)}")
    lines.append("absolute: the target as written; relative: the target scaled by this host's floor against the "
                 "floor of the host it was set on (perf/slo.toml floor_reference_ms), so a MISS there is the code, "
                 "a MISS only in absolute terms is the machine")
    if quiet:
        lines.append(f"machine before measuring: {quiet.summary()}")
    return "\n".join(lines)
