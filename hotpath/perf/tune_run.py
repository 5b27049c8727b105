"""`hotpath tune ENDPOINT`: tune the endpoint's step models on a live server, record every trial."""

from __future__ import annotations

import json
import time
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.perf.analyzer import Measurement
from hotpath.perf.measure import endpoint_steps, measure, response_cache_off
from hotpath.perf.reload import load_config, served_config
from hotpath.perf.search_space import apply_knobs, read_knobs
from hotpath.perf.slo import Slo
from hotpath.perf.stats import bottleneck
from hotpath.perf.tuner import State, Trial, tune


def runs_dir() -> Path:
    d = paths.ROOT / "perf" / "runs"
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_tune(url: str, slo: Slo, max_trials: int = 12, measurement: Measurement = Measurement(),
             log=print) -> tuple[Trial, list[Trial], Path]:
    """Tune every step of `slo.endpoint` at its declared load; returns (best, trials, trial log path)."""
    client = grpcclient.InferenceServerClient(url)
    models = endpoint_steps(slo.endpoint)
    base = {m: served_config(client, m) for m in models}
    loaded: State = {m: read_knobs(c) for m, c in base.items()}
    record = runs_dir() / f"tune-{slo.endpoint}-{time.strftime('%Y%m%dT%H%M%S')}.jsonl"

    def evaluate(state: State, change: str) -> Trial:
        for m, knobs in state.items():
            if knobs != loaded[m]:
                load_config(client, m, apply_knobs(base[m], knobs))
                loaded[m] = dict(knobs)
        point = measure(url, slo.endpoint, "concurrency", slo.concurrency, slo.input_data, measurement)
        trial = Trial(0, {m: dict(k) for m, k in state.items()}, point.p95_ms, point.p50_ms, point.throughput,
                      point.steps, change)
        if change != "restore best":
            with open(record, "a") as f:
                f.write(json.dumps(trial.to_dict()) + "\n")
        return trial

    log(f"[tune] {slo.endpoint}: steps {', '.join(models)}; target p95 <= {slo.p95_ms:g} ms at concurrency "
        f"{slo.concurrency}; budget {max_trials} trials; log {record}")
    t0 = time.perf_counter()
    with response_cache_off(url, slo.endpoint):
        best, trials = tune(base, evaluate, slo.p95_ms, max_trials, log)
    # Rewrite the log with final numbering and acceptance (lines were appended as measured).
    record.write_text("".join(json.dumps(t.to_dict()) + "\n" for t in trials))
    evaluate(best.state, "restore best")  # leave the server running the winner
    elapsed = time.perf_counter() - t0
    log(f"[tune] {len(trials)} trials in {elapsed:.0f}s; best: trial {best.number} "
        f"p95 {best.p95_ms:.1f} ms, {best.throughput:.1f}/s")
    write_summary(slo, best, trials, elapsed)
    return best, trials, record


def write_summary(slo: Slo, best: Trial, trials: list[Trial], seconds: float) -> Path:
    """perf/reports/tune-<endpoint>.md: every trial, the winner, the search cost."""
    lines = [f"# tune: {slo.endpoint}", "",
             f"`hotpath tune {slo.endpoint}`: {len(trials)} trials in {seconds:.0f} s, target p95 <= {slo.p95_ms:g} ms "
             f"at concurrency {slo.concurrency}. Coordinate descent on the bottleneck step (hotpath/perf/tuner.py).",
             "", "| # | change | p50 ms | p95 ms | infer/s | bottleneck step | kept |", "|---|---|---|---|---|---|---|"]
    for t in trials:
        worst = bottleneck({m: s for m, s in t.steps.items() if m != slo.endpoint}) or "-"
        lines.append(f"| {t.number} | {t.change} | {t.p50_ms:.1f} | {t.p95_ms:.1f} | {t.throughput:.1f} | {worst} "
                     f"| {'yes' if t.accepted else ''} |")
    lines += ["", f"Winner: trial {best.number}: " + "; ".join(
        f"{m}: " + ", ".join(f"{k}={list(v) if isinstance(v, tuple) else v}" for k, v in kn.items())
        for m, kn in best.state.items()), ""]
    path = paths.ROOT / "perf" / "reports" / f"tune-{slo.endpoint}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))
    return path
