"""What the tuner may try next: one-rung moves of any step's knob, and joint moves across steps.

A joint move changes two knobs at once where either alone would lose: on a small CPU, a second
encoder instance only pays with fewer ORT threads per instance, and a second tokenizer instance
only with one encoder thread less. Every state keeps the busy threads of all steps (instances x
threads per instance) within a budget, by default the cores of the host or what the start
already uses, whichever is more.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.sweeps.measure.server_stats import step_cost
from hotpath.tuning.knobs import (
    InstanceCount,
    IntraOpThreads,
    Knob,
    apply_knobs,  # noqa: F401  (alternatives/served.py imports it from here)
    knob,
    knobs_for,
    read_knobs,
)

State = dict[str, dict[str, Any]]          # model -> knob name -> value


def state_key(state: State) -> str:
    """A stable, hashable form of a state (tuples and lists compare equal)."""
    return repr(sorted((m, sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in kn.items()))
                       for m, kn in state.items()))


@dataclass(frozen=True)
class Change:
    model: str
    knob: str
    old: Any
    new: Any

    def __str__(self) -> str:
        return f"{self.model}.{self.knob}: {_show(self.old)} -> {_show(self.new)}"


def _show(v: Any) -> str:
    return str(list(v)) if isinstance(v, tuple) else str(v)


@dataclass(frozen=True)
class Move:
    changes: tuple[Change, ...]

    def apply(self, state: State) -> State:
        out = {m: dict(kn) for m, kn in state.items()}
        for c in self.changes:
            out[c.model][c.knob] = c.new
        return out

    def __str__(self) -> str:
        return " + ".join(str(c) for c in self.changes)


class SearchSpace:
    """The knobs of an endpoint's step models, their ladders and the thread budget that bounds them."""

    def __init__(self, configs: dict[str, mc.ModelConfig], cores: int | None = None,
                 thread_budget: int | None = None):
        self.cores = cores or os.cpu_count() or 1
        self.knobs: dict[str, list[Knob]] = {m: knobs_for(c) for m, c in configs.items()}
        self.ladders = {m: {k.name: k.ladder(c) for k in self.knobs[m]} for m, c in configs.items()}
        self.start: State = {m: read_knobs(c) for m, c in configs.items()}
        self.thread_budget = thread_budget or max(self.cores, self.threads(self.start))

    def threads(self, state: State) -> int:
        """Threads the steps keep busy: instances x ORT threads (1 for other backends; 0 threads = all cores)."""
        total = 0
        for knobs in state.values():
            per_instance = knobs.get(IntraOpThreads.name, 1) or self.cores
            total += knobs.get(InstanceCount.name, 1) * per_instance
        return total

    def fits(self, state: State) -> bool:
        return self.threads(state) <= self.thread_budget

    def single_moves(self, state: State) -> list[Move]:
        return [Move((Change(m, k.name, state[m][k.name], v),))
                for m in state for k in self.knobs[m]
                for v in k.neighbors(state[m][k.name], self.ladders[m][k.name])]

    def moves(self, state: State) -> list[Move]:
        """Every move from `state` that stays within the thread budget, singles first, then joint moves."""
        singles = self.single_moves(state)
        joint: list[Move] = []
        # Layout: one thread more in one place, one less in another (same step or across steps).
        resource = [mv for mv in singles if knob(mv.changes[0].knob).uses_threads]
        for a, b in itertools.combinations(resource, 2):
            ca, cb = a.changes[0], b.changes[0]
            if (ca.model, ca.knob) == (cb.model, cb.knob):
                continue
            da, db = self._thread_delta(state, a), self._thread_delta(state, b)
            if da * db < 0:
                joint.append(Move((ca, cb)))
        # Batching: every step's queue delay one rung down (or up) together, so no step keeps
        # waiting for a batch that the step before it no longer forms.
        delays = [mv.changes[0] for mv in singles if mv.changes[0].knob == "max_queue_delay_microseconds"]
        for direction in (-1, 1):
            together = tuple(c for c in delays if (c.new - c.old) * direction > 0)
            if len(together) > 1:
                joint.append(Move(together))
        seen, out = set(), []
        for mv in singles + joint:
            key = state_key(mv.apply(state))
            if key not in seen and self.fits(mv.apply(state)):
                seen.add(key)
                out.append(mv)
        return out

    def _thread_delta(self, state: State, move: Move) -> int:
        return self.threads(move.apply(state)) - self.threads(state)


# How much each kind of move is worth trying, given one step's breakdown. `share`: the step's part
# of all server time per request at the declared load; `queued`: the part of the step's own time
# spent in its queue; `low_*`: the same at the lightest load of the sweep.
def _component_score(change: Change, share: float, queued: float, batch: float, low_share: float,
                     low_queued: float) -> float:
    up = change.new > change.old if not isinstance(change.new, tuple) else sum(change.new) > sum(change.old)
    if change.knob == "max_queue_delay_microseconds":
        if up:
            return 0.5 * share * (1 - queued)
        # Down when requests wait for batches that never fill (at low load, or batches of ~1 at load).
        return low_share * low_queued + (share * queued if batch < 1.5 else 0.0)
    if change.knob == InstanceCount.name:
        return share * queued if up else 0.1 * share
    if change.knob == IntraOpThreads.name:
        return share * (1 - queued) if up else 0.2 * share
    return 0.25 * share


def _shares(steps: dict[str, dict[str, float]], models: set[str]) -> dict[str, float]:
    costs = {m: step_cost(steps.get(m, {})) for m in models}
    total = sum(costs.values()) or 1.0
    return {m: c / total for m, c in costs.items()}


def _queued(step: dict[str, float]) -> float:
    cost = step_cost(step)
    return step.get("queue_us", 0.0) / cost if cost else 0.0


def rank_moves(moves: list[Move], steps: dict[str, dict[str, float]],
               low_load_steps: dict[str, dict[str, float]] | None = None) -> list[Move]:
    """Moves ordered by what the server-side breakdown suggests: the costliest step's cure first.

    `steps` is the breakdown at the declared load; `low_load_steps` the one at the lightest load
    of the sweep (where queue delays show up as pure waiting)."""
    low = low_load_steps or {}
    models = {c.model for mv in moves for c in mv.changes}
    share, low_share = _shares(steps, models), _shares(low, models)

    def score(mv: Move) -> float:
        return sum(_component_score(c, share[c.model], _queued(steps.get(c.model, {})),
                                    steps.get(c.model, {}).get("avg_batch", 1.0), low_share[c.model],
                                    _queued(low.get(c.model, {})))
                   for c in mv.changes)

    return sorted(moves, key=lambda mv: (-score(mv), str(mv)))
