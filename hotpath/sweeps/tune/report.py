"""perf/reports/tune-<endpoint>.md: every trial of a tuning run, the winner, its cost, a rival searcher beside it
when one ran (the lab's `python -m perf tune`: Triton Model Analyzer)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from pathlib import Path

from hotpath import paths
from hotpath.sweeps.tune.hill_climb import Objective, Trial, bottleneck_step
from hotpath.sweeps.tune.search_space import SearchSpace, State


@dataclass
class Rival:
    """A rival searcher's (Model Analyzer's) search of one step, its pick measured with hotpath's objective."""

    step: str
    search_seconds: float
    configs_measured: int
    settings: dict
    trial: Trial | None = None
    error: str = ""


def _state_text(state: State, start: State | None = None) -> str:
    """Knob values per step; with `start`, only those that differ from it."""
    parts = []
    for m, kn in state.items():
        vals = [f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in kn.items()
                if start is None or start.get(m, {}).get(k) != v]
        if vals:
            parts.append(f"{m}: " + ", ".join(vals))
    return "; ".join(parts) or "(start config)"


def write_summary(reports_dir: Path | None, endpoint: str, *args, **kwargs) -> Path:
    """<reports_dir, default perf/reports>/tune-<endpoint>.md (the other arguments as for `summary`)."""
    path = Path(reports_dir or paths.ROOT / "perf" / "reports") / f"tune-{endpoint}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(summary(endpoint, *args, **kwargs))
    return path


def summary(endpoint: str, command: str, objective: Objective, space: SearchSpace, best: Trial, trials: list[Trial],
            seconds: float, rival: Rival | None = None, load: list[float] | None = None) -> str:
    """The tuning report: every trial, the winner, the search cost, the rival's pick beside it (when one ran)."""
    sweep = objective.sweep
    lines = [
        f"# tune: {endpoint}", "",
        f"`{command}`: {len(trials)} trials in {seconds:.0f} s "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). Objective: throughput at p95 <= "
        f"{objective.target_ms:g} ms over closed-loop concurrency {', '.join(map(str, sweep))}; ties broken by p95 "
        f"at the declared load ({objective.declared}). Threads (instances x ORT threads, summed over steps) <= "
        f"{space.thread_budget} on {space.cores} cores. Moves ranked by the server-side breakdown; a win is kept "
        f"only when a second measurement confirms it (hotpath/sweeps/tune/hill_climb.py). Trial log: perf/runs/."
        + (f" Host load average (1 min) at start / end: {load[0]:.1f} / {load[-1]:.1f} on {space.cores} cores "
           f"(anything well above the cores means other work shared the CPU and the numbers are noisy)."
           if load else ""), "",
        "| # | change | within target /s | " + " | ".join(f"p95 @{c} ms" for c in sweep)
        + " | bottleneck | s | kept |",
        "|---|---|---:|" + "---:|" * len(sweep) + "---|---:|---|",
    ]
    for t in trials:
        p95s = [("failed" if math.isinf(p.p95_ms) else f"{p.p95_ms:.1f}") if (p := t.at(c)) else "-" for c in sweep]
        worst = bottleneck_step(t, objective, list(space.start)) if t.points else "-"
        lines.append(f"| {t.number} | {t.change} | {objective.goodput(t):.1f} | " + " | ".join(p95s)
                     + f" | {worst} | {t.seconds:.0f} | {'yes' if t.accepted else ''} |")
    base = next(t for t in trials if t.accepted)   # the start's kept measurement (the better of its two)
    lines += ["", f"Start: {_state_text(space.start)}.", "",
              f"Winner: trial {best.number}: {_state_text(best.state, space.start)}; "
              f"{objective.describe(best)} (start: {objective.describe(base)}).", ""]
    if rival is None:
        return "\n".join(lines) + "\n"
    lines += ["## Against Triton Model Analyzer", ""]
    if rival.trial is None:
        lines.append(f"Model Analyzer failed on {rival.step}: {rival.error}")
    else:
        lines += [
            (f"Model Analyzer searched {rival.step}, the endpoint's one model, " if rival.step == endpoint else
             f"Model Analyzer cannot search ensembles: it searched the endpoint's heaviest step ({rival.step}) alone, ")
            + f"{rival.configs_measured} configs (perf/lab/compare/tune_rival.py); its pick was then "
            f"measured on this server with the same objective.", "",
            "| searcher | best config | within target /s | p95 @%d ms | search time s |" % objective.declared,
            "|---|---|---:|---:|---:|",
            f"| hotpath tune | {_state_text(best.state, space.start)} | {objective.goodput(best):.1f} | "
            f"{objective.tie_p95(best):.1f} | {seconds:.0f} |",
            f"| Model Analyzer | {rival.step}: {rival.settings} | {objective.goodput(rival.trial):.1f} | "
            f"{objective.tie_p95(rival.trial):.1f} | {rival.search_seconds:.0f} |",
        ]
    return "\n".join(lines) + "\n"
