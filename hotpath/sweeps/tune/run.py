"""`hotpath tune ENDPOINT`: tune the endpoint's step models on a live server, record every trial."""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.utils import InferenceServerException

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.exporters.samples import ensure_input
from hotpath.sweeps.measure import perf_analyzer as analyzer
from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.measure.point import endpoint_steps, measure, response_cache_off
from hotpath.sweeps.measure.reconfigure import load_config, served_config
from hotpath.sweeps.tune.hill_climb import Objective, Point, Trial, tune
from hotpath.sweeps.tune.report import Rival, write_summary
from hotpath.sweeps.tune.search_space import SearchSpace, State
from hotpath.sweeps.tune.spec_writer import write_back
from hotpath.tuning.knobs import apply_knobs, read_knobs
from hotpath.tuning.slo import Slo

logger = logging.getLogger(__name__)

# Tuning compares many configs: short windows and a loose stability bound (a retry doubles the
# window and costs more than it saves); the tuner's own confirmations make up for the noise.
TUNE_MEASUREMENT = Measurement(2000, 50, 4)
WARM_UP = Measurement(1000, 100, 3)
TUNE_SWEEP = (2, 4, 8)


def runs_dir() -> Path:
    d = paths.ROOT / "perf" / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d


class LiveEvaluator:
    """Apply a state to the server (reloading only the models whose knobs changed) and sweep it."""

    def __init__(self, url: str, slo: Slo, objective: Objective, measurement: Measurement, record: Path, log=logger.info):
        self.url, self.slo, self.objective, self.measurement, self.record = url, slo, objective, measurement, record
        self.client = grpcclient.InferenceServerClient(url)
        # An ensemble's steps, or the endpoint itself when it is one model.
        self.models = [m for m in endpoint_steps(slo.endpoint) if m != slo.endpoint] or [slo.endpoint]
        self.base = {m: served_config(self.client, m) for m in self.models}
        self.loaded: dict[str, dict | None] = {m: read_knobs(c) for m, c in self.base.items()}
        self.log = log

    def load(self, state: State) -> None:
        changed = [m for m, knobs in state.items() if knobs != self.loaded[m]]
        for m in changed:
            self.loaded[m] = None   # unknown until the load succeeds
            load_config(self.client, m, apply_knobs(self.base[m], state[m]))
            self.loaded[m] = dict(state[m])
        if changed:
            self.warm_up()

    def warm_up(self) -> None:
        """An untimed pass after a reload: fresh instances meet new shapes (ORT plans per shape), so a
        trial measured right after its reload and its confirmation see the same warm server."""
        with contextlib.suppress(HotpathError):   # cold requests may fail or be refused: warm all the same
            analyzer.run(self.slo.endpoint, self.url, "concurrency", self.objective.declared, self.slo.input_data,
                         measurement=WARM_UP, retries=0)

    def __call__(self, state: State, change: str) -> Trial:
        """One trial of the search, appended to the trial log as soon as it is measured."""
        trial = self.sweep(state, change)
        with open(self.record, "a") as f:
            f.write(json.dumps(trial.to_dict()) + "\n")
        return trial

    def sweep(self, state: State, change: str) -> Trial:
        t0 = time.perf_counter()
        points: list[Point] = []
        try:
            self.load(state)
        except InferenceServerException as exc:
            self.log(f"[tune] {change}: reload failed: {exc}")
            change = f"{change} (reload failed: {' '.join(str(exc).split())[:100]})"
        else:
            for c in self.objective.sweep:
                if any(p.p95_ms > self.objective.target_ms for p in points) and c != self.objective.declared:
                    continue  # closed-loop p95 only grows with concurrency: it would miss too
                try:
                    pp = measure(self.url, self.slo.endpoint, "concurrency", c, self.slo.input_data,
                                 self.measurement)
                except HotpathError as exc:
                    # Requests refused or failing: this load is out of reach.
                    self.log(f"[tune] {change}: concurrency {c} counted as a miss: {' '.join(str(exc).split())}")
                    points.append(Point(c, math.inf, math.inf, 0.0))
                    continue
                points.append(Point(c, pp.p50_ms, pp.p95_ms, pp.throughput, pp.steps))
        return Trial(0, {m: dict(k) for m, k in state.items()}, points, change, seconds=time.perf_counter() - t0)


class RivalSearch(Protocol):
    """Another searcher, given the live evaluator after hotpath's search (the lab's perf.lab.compare.tune_rival)."""

    command: str    # the command line the report quotes

    def __call__(self, evaluate: LiveEvaluator, space: SearchSpace, objective: Objective, log) -> Rival: ...


def run_tune(url: str, slo: Slo, max_trials: int = 12, concurrencies: tuple[int, ...] = TUNE_SWEEP,
             thread_budget: int | None = None, measurement: Measurement = TUNE_MEASUREMENT,
             rival: RivalSearch | None = None, reports_dir: Path | None = None,
             log=logger.info, command: str | None = None) -> tuple[Trial, list[Trial], Path]:
    """Tune every step of `slo.endpoint`; returns (best, trials, trial log path) and writes the summary report.
    `rival`: another searcher run after hotpath's, its pick reported beside (the lab's `python -m perf tune`)."""
    objective = Objective(slo.p95_ms, tuple(concurrencies), slo.concurrency)
    ensure_input(slo.input_data, f"endpoint {slo.endpoint} in perf/slo.toml")   # payloads made on first use
    record = runs_dir() / f"tune-{slo.endpoint}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"
    against = None
    load = [os.getloadavg()[0]]
    with response_cache_off(url, slo.endpoint):
        # Configs are read with the response cache off: every reload of a trial keeps it off.
        evaluate = LiveEvaluator(url, slo, objective, measurement, record, log)
        evaluate.warm_up()
        space = SearchSpace(evaluate.base, thread_budget=thread_budget)
        # What the search started from, so that a recorded run can be replayed (tests/unit/test_tuner.py).
        record.with_suffix(".start.json").write_text(json.dumps({
            "objective": asdict(objective), "cores": space.cores, "thread_budget": space.thread_budget,
            "configs": {m: json_format.MessageToDict(c, preserving_proto_field_name=True)
                        for m, c in evaluate.base.items()},
        }, indent=1))
        log(f"[tune] {slo.endpoint}: tuning {', '.join(evaluate.models)}; objective: throughput at p95 <= "
            f"{slo.p95_ms:g} ms over concurrency {', '.join(map(str, objective.sweep))}, ties by p95 at "
            f"{slo.concurrency}; threads <= {space.thread_budget} on {space.cores} cores; budget {max_trials} "
            f"trials; log {record}")
        t0 = time.perf_counter()
        best, trials = tune(space, evaluate, objective, max_trials, log)
        seconds = time.perf_counter() - t0
        # Rewrite the log with final numbering and acceptance (lines were appended as measured).
        record.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trials))
        if rival:
            against = rival(evaluate, space, objective, log)
    leave_running(url, best.state)
    load.append(os.getloadavg()[0])
    log(f"[tune] {len(trials)} trials in {seconds:.0f}s; best: trial {best.number} ({best.change}): "
        f"{objective.describe(best)}")
    command = command or (f"{rival.command if rival else 'hotpath tune'} {slo.endpoint} --max-trials {max_trials} "
                          f"--concurrency {','.join(map(str, concurrencies))}")
    write_summary(reports_dir, slo.endpoint, command, objective, space, best, trials, seconds, against, load)
    return best, trials, record


def leave_running(url: str, state: State) -> None:
    """Reload the models whose served knobs differ from `state` (their other settings as served now)."""
    client = grpcclient.InferenceServerClient(url)
    for model, knobs in state.items():
        config = served_config(client, model)
        if read_knobs(config) != knobs:
            load_config(client, model, apply_knobs(config, knobs))


def write_winner(best: Trial, start: Trial, specs_dir: Path | None = None) -> list[str]:
    """Write the knobs the tuner moved into build/<model>.toml (read afresh); returns what changed."""
    return [f"build/{model}.toml: {change}" for model, knobs in best.state.items()
            for change in write_back(model, knobs, specs_dir, start=start.state.get(model, {}))]
