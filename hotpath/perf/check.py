"""`hotpath perf-check`: does every endpoint meet its p95 target at its declared load?"""

from __future__ import annotations

from dataclasses import dataclass

from hotpath.perf.analyzer import Measurement, PerfPoint
from hotpath.perf.measure import measure, response_cache_off
from hotpath.perf.slo import Slo
from hotpath.perf.stats import bottleneck


@dataclass
class CheckRow:
    slo: Slo
    point: PerfPoint

    @property
    def ok(self) -> bool:
        return self.point.p95_ms <= self.slo.p95_ms


def check(url: str, slos: list[Slo], measurement: Measurement = Measurement(), log=print) -> list[CheckRow]:
    rows = []
    for slo in slos:
        log(f"[perf-check] {slo.endpoint}: measuring at concurrency {slo.concurrency} (target p95 <= {slo.p95_ms:g} ms)")
        with response_cache_off(url, slo.endpoint):  # the target must hold on cache misses too
            rows.append(CheckRow(slo, measure(url, slo.endpoint, "concurrency", slo.concurrency, slo.input_data,
                                              measurement)))
    return rows


def format_table(rows: list[CheckRow]) -> str:
    lines = ["| endpoint | load | target p95 | measured p50 | measured p95 | throughput | bottleneck step | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p = r.point
        worst = bottleneck({m: s for m, s in p.steps.items() if m != r.slo.endpoint}) or "-"
        lines.append(f"| {r.slo.endpoint} | concurrency {r.slo.concurrency} | {r.slo.p95_ms:g} ms | {p.p50_ms:.1f} ms "
                     f"| {p.p95_ms:.1f} ms | {p.throughput:.1f}/s | {worst} | {'PASS' if r.ok else 'MISS'} |")
    return "\n".join(lines)
