"""Load sweeps: each endpoint over concurrency and request-rate ranges, each of its steps alone."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from hotpath.sweeps.measure.perf_analyzer import Measurement, PerfPoint
from hotpath.sweeps.measure.point import endpoint_steps, measure
from hotpath.tuning.slo import Slo

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class SweepPlan:
    concurrencies: tuple[int, ...]
    rate_fractions: tuple[float, ...]      # request rates as fractions of the best closed-loop throughput
    step_concurrencies: tuple[int, ...]
    measurement: Measurement = field(default_factory=Measurement)


FULL = SweepPlan((1, 2, 4, 8, 12), (0.5, 0.8, 0.95), (1, 8), Measurement(3000, 25, 6))
QUICK = SweepPlan((1, 8), (), (), Measurement(1500, 30, 4))


def throughput_at_target(points: list[PerfPoint], target_ms: float) -> float:
    """The highest throughput among points whose p95 meets the target (0 when none does)."""
    return max((p.throughput for p in points if p.p95_ms <= target_ms), default=0.0)


def sweep_endpoint(url: str, slo: Slo, plan: SweepPlan, label: str = "tuned", steps: bool = True,
                   log=logger.info) -> list[PerfPoint]:
    """Closed-loop concurrency sweep, open-loop request rates, then each step model alone."""
    points = []

    def run(model: str, kind: str, load: float, data=None) -> None:
        point = measure(url, model, kind, load, data, plan.measurement, label)
        points.append(point)
        log(f"[perf] {label:>10} {model:<22} {kind} {load:g}: p50 {point.p50_ms:6.1f} ms  p95 {point.p95_ms:6.1f} ms"
            f"  {point.throughput:6.1f}/s")

    for c in plan.concurrencies:
        run(slo.endpoint, "concurrency", c, slo.input_data)
    peak = max((p.throughput for p in points), default=0.0)
    for fraction in plan.rate_fractions:
        if peak > 0:
            run(slo.endpoint, "request_rate", round(peak * fraction, 1), slo.input_data)
    if steps:
        for model in endpoint_steps(slo.endpoint):
            if model != slo.endpoint:
                for c in plan.step_concurrencies:
                    run(model, "concurrency", c)
    return points
