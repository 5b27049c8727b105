"""Coordinate descent on the bottleneck step, against a p95 target at a declared load.

Brute force over all knobs of all steps is combinatorial (Model Analyzer's approach, and it
cannot search ensembles at all). Instead, each round reads the server-side breakdown of the best
trial so far, picks the step with the most queue + compute time per request, and tries one-rung
moves of that step's knobs (queue delay, preferred batch sizes, instances, ORT threads), keeping a
move only when it wins. When no move of the bottleneck wins, the next-worst step gets a round;
the search stops when a full round over all steps finds nothing or the trial budget is spent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.perf.search_space import Knob, knobs_for, read_knobs
from hotpath.perf.stats import step_cost

State = dict[str, dict[str, Any]]          # model -> knob -> value


@dataclass
class Trial:
    number: int
    state: State
    p95_ms: float
    p50_ms: float
    throughput: float
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    change: str = "baseline"
    accepted: bool = False

    def to_dict(self) -> dict:
        d = asdict(self)
        d["state"] = {m: {k: list(v) if isinstance(v, tuple) else v for k, v in kn.items()} for m, kn in self.state.items()}
        return d


def better(a: Trial, b: Trial | None, target_ms: float) -> bool:
    """Is `a` better than `b`? Meeting the target first, then throughput; else lower p95."""
    if b is None:
        return True
    a_ok, b_ok = a.p95_ms <= target_ms, b.p95_ms <= target_ms
    if a_ok != b_ok:
        return a_ok
    if a_ok:
        return a.throughput > b.throughput * 1.02  # ignore wins inside measurement noise
    return a.p95_ms < b.p95_ms * 0.98


def step_ranking(steps: dict[str, dict[str, float]], models: list[str]) -> list[str]:
    """Tunable models, worst (most server time per request) first."""
    return sorted(models, key=lambda m: step_cost(steps.get(m, {})), reverse=True)


def _key(state: State) -> tuple:
    return tuple(sorted((m, tuple(sorted(kn.items()))) for m, kn in state.items()))


def tune(configs: dict[str, mc.ModelConfig], evaluate: Callable[[State, str], Trial], target_ms: float,
         max_trials: int = 12, log: Callable[[str], None] = print) -> tuple[Trial, list[Trial]]:
    """Search knob values of `configs` (the endpoint's step models); returns (best, all trials).

    `evaluate(state, change)` applies a state to the server, measures it and returns a Trial.
    """
    knobs: dict[str, list[Knob]] = {m: knobs_for(c, 1) for m, c in configs.items()}
    state: State = {m: read_knobs(c) for m, c in configs.items()}
    trials = [evaluate(state, "baseline")]
    best = trials[0]
    best.accepted = True
    seen = {_key(state)}
    log(_describe(best, target_ms))
    while len(trials) < max_trials:
        improved = False
        for model in step_ranking(best.steps, list(configs)):
            for knob in knobs[model]:
                for value in knob.neighbors(best.state[model][knob.name]):
                    if len(trials) >= max_trials:
                        break
                    candidate = {m: dict(kn) for m, kn in best.state.items()}
                    candidate[model][knob.name] = value
                    if _key(candidate) in seen:
                        continue
                    seen.add(_key(candidate))
                    change = f"{model}.{knob.name}: {best.state[model][knob.name]} -> {value}"
                    trial = evaluate(candidate, change)
                    trial.number = len(trials)
                    trials.append(trial)
                    log(_describe(trial, target_ms))
                    if better(trial, best, target_ms) and len(trials) < max_trials:
                        # One measurement on a shared 2-core host moves +-10%: a win must repeat.
                        confirm = evaluate(candidate, f"{change} (confirm)")
                        confirm.number = len(trials)
                        trials.append(confirm)
                        if better(confirm, best, target_ms):
                            confirm.accepted = True
                            best = confirm
                            improved = True
                        log(_describe(confirm, target_ms))
                if improved:
                    break
            if improved:
                break  # re-rank steps from the new best trial's breakdown
        if not improved:
            break
    return best, trials


def _describe(t: Trial, target_ms: float) -> str:
    mark = "accepted" if t.accepted else "rejected"
    ok = "meets" if t.p95_ms <= target_ms else "misses"
    return (f"[tune] trial {t.number:2d} {t.change:<55} p95 {t.p95_ms:7.1f} ms ({ok} {target_ms:g}) "
            f"p50 {t.p50_ms:7.1f} ms {t.throughput:7.1f}/s  {mark}")
