"""Hill climbing over all steps' knobs at once, ranked by the server-side breakdown, against a p95 target.

Objective: first a constraint, then throughput. The constraint: p50 at concurrency 1 (where an
endpoint spends its quiet hours, and where a user first tries it) no worse than the starting
configuration's by more than `low_load_slack`, so a layout that buys throughput with low-load latency
is never kept. Then the highest throughput among the points of a short concurrency sweep whose p95
meets the target; the p95 at the declared load breaks ties. Brute force over every knob of every step
is combinatorial (Model Analyzer's approach, and it cannot search ensembles at all). Instead each
round takes the moves of the best state so far (single rungs and joint moves, hotpath.sweeps.tune.search_space),
ranks them by the best trial's breakdown (queue vs compute per step) and measures them in that
order. The first move that wins is measured a second time and kept only when it wins again; then
the moves are ranked afresh (the start is measured twice too). The search stops when no move wins
or the trial budget is spent.
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass, field, replace
from typing import Callable

from hotpath.errors import HotpathError
from hotpath.sweeps.measure.server_stats import step_cost
from hotpath.sweeps.tune.search_space import SearchSpace, State, rank_moves, state_key

logger = logging.getLogger(__name__)


@dataclass
class Point:
    concurrency: int
    p50_ms: float
    p95_ms: float
    throughput: float
    steps: dict[str, dict[str, float]] = field(default_factory=dict)   # server-side breakdown per model


@dataclass
class Trial:
    number: int
    state: State
    points: list[Point]
    change: str = "baseline"
    accepted: bool = False
    seconds: float = 0.0

    def at(self, concurrency: int) -> Point | None:
        return next((p for p in self.points if p.concurrency == concurrency), None)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["state"] = {m: {k: list(v) if isinstance(v, tuple) else v for k, v in kn.items()}
                      for m, kn in self.state.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "Trial":
        state = {m: {k: tuple(v) if isinstance(v, list) else v for k, v in kn.items()} for m, kn in d["state"].items()}
        return cls(d["number"], state, [Point(**p) for p in d["points"]], d["change"], d["accepted"],
                   d.get("seconds", 0.0))


@dataclass(frozen=True)
class Objective:
    """p50 at concurrency 1 within the start's (a constraint), then throughput at p95 <= target over a
    concurrency sweep; p95 at the declared load breaks ties."""

    target_ms: float
    concurrencies: tuple[int, ...]
    declared: int
    noise: float = 0.03     # differences inside this fraction are measurement noise on a shared host
    low_load_slack: float = 0.10          # how much slower at concurrency 1 than the start a trial may be
    low_load_p50_ms: float | None = None  # the start's p50 at concurrency 1; set by tune() after the baseline

    @property
    def sweep(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.concurrencies) | {self.declared, 1}))

    def low_load_ok(self, t: Trial) -> bool:
        """Does `t` keep concurrency 1 as fast as the start (within the slack)?"""
        if self.low_load_p50_ms is None:
            return True
        p = t.at(1)
        return p is not None and p.p50_ms <= self.low_load_p50_ms * (1 + self.low_load_slack)

    def goodput(self, t: Trial) -> float:
        return max((p.throughput for p in t.points if p.p95_ms <= self.target_ms), default=0.0)

    def tie_p95(self, t: Trial) -> float:
        p = t.at(self.declared)
        return p.p95_ms if p else float("inf")

    def better(self, a: Trial, b: Trial | None) -> bool:
        """Does `a` beat `b` by more than noise? Throughput within target first, then p95 at the declared load."""
        if b is None:
            return True
        if self.low_load_ok(a) != self.low_load_ok(b):
            return self.low_load_ok(a)
        ga, gb = self.goodput(a), self.goodput(b)
        if ga > gb * (1 + self.noise):
            return True
        if gb > ga * (1 + self.noise):
            return False
        return self.tie_p95(a) < self.tie_p95(b) * (1 - self.noise)

    def describe(self, t: Trial) -> str:
        tie = t.at(self.declared)
        tie_text = ("not measured" if tie is None else f"failed at concurrency {self.declared}"
                    if math.isinf(tie.p95_ms) else f"p95 {tie.p95_ms:.1f} ms at concurrency {self.declared}")
        one = t.at(1)
        low = "" if one is None else f"; c=1 p50 {one.p50_ms:.1f} ms" + (
            "" if self.low_load_ok(t) else f" (over the start's {self.low_load_p50_ms:.1f} ms + {self.low_load_slack:.0%})")
        return f"{self.goodput(t):.1f}/s within {self.target_ms:g} ms, {tie_text}{low}"


Evaluate = Callable[[State, str], Trial]


def tune(space: SearchSpace, evaluate: Evaluate, objective: Objective, max_trials: int = 12,
         log: Callable[[str], None] = logger.info) -> tuple[Trial, list[Trial]]:
    """Search `space` from its start state; returns (best, every trial in order).

    `evaluate(state, change)` applies a state to the server, sweeps it and returns a Trial."""
    trials: list[Trial] = []

    def run(state: State, change: str) -> Trial:
        t = evaluate(state, change)
        t.number = len(trials)
        trials.append(t)
        log(_line(t, objective))
        return t

    # Every state the search keeps is measured twice and stands for the better of the two, so an
    # unlucky measurement of the incumbent (a 2-core host shared with other work moves +-10% and
    # more) does not let any move through; a challenger must beat it both times.
    first = run(space.start, "baseline")
    if not first.points:
        raise HotpathError(f"the starting configuration could not be measured: {first.change}")
    repeat = run(space.start, "baseline (repeat)") if max_trials > 1 else first
    quiet_p50 = [t.at(1).p50_ms for t in (first, repeat) if t.at(1) and math.isfinite(t.at(1).p50_ms)]
    if quiet_p50 and objective.low_load_p50_ms is None:
        objective = replace(objective, low_load_p50_ms=min(quiet_p50))
        log(f"[tune] constraint: p50 at concurrency 1 <= {objective.low_load_p50_ms:.1f} ms "
            f"+ {objective.low_load_slack:.0%} (the start's)")
    best = _keep(first, repeat, objective)
    seen = {state_key(space.start)}
    improved = True
    while improved and len(trials) < max_trials:
        improved = False
        # The breakdown at the heaviest load that was served (a refused load has none) and at the lightest.
        served = [p for p in best.points if p.steps] or best.points
        high, low = max(served, key=lambda p: p.concurrency), min(served, key=lambda p: p.concurrency)
        for move in rank_moves(space.moves(best.state), high.steps, low.steps):
            if len(trials) >= max_trials:
                break
            candidate = move.apply(best.state)
            if state_key(candidate) in seen:
                continue
            seen.add(state_key(candidate))
            trial = run(candidate, str(move))
            if objective.better(trial, best) and len(trials) < max_trials:
                confirm = run(candidate, f"{move} (confirm)")
                if objective.better(confirm, best):
                    best = _keep(trial, confirm, objective)
                    improved = True
                    log(f"[tune] kept: {move}")
                    break  # rank the moves afresh from the new best trial's breakdown
    return best, trials


def _keep(a: Trial, b: Trial, objective: Objective) -> Trial:
    """The better of two measurements of one state, marked as kept."""
    kept = a if a is b or not objective.better(b, a) else b
    kept.accepted = True
    return kept


def bottleneck_step(t: Trial, objective: Objective, models: list[str]) -> str:
    """The step with the most server time per request at the heaviest load served (the declared one if it was)."""
    served = [p for p in t.points if p.steps]
    if not served:
        return "-"
    p = next((q for q in served if q.concurrency == objective.declared), None) or \
        max(served, key=lambda q: q.concurrency)
    return max(models, key=lambda m: step_cost(p.steps.get(m, {})))


def _line(t: Trial, objective: Objective) -> str:
    return f"[tune] trial {t.number:2d} {t.change:<60} {objective.describe(t)}"
