"""`hotpath tune --quick [ENDPOINT]`: the deploy-time tune, minutes for every public endpoint, kept per host.

The same search as `hotpath tune` (hotpath.sweeps.tune.hill_climb) on a shorter budget: a few trials, short
windows, concurrency 1 and the SLO's declared load only. The winner is not written into the committed
specs: the knob values that differ from them go into this host's tuned-values file with its hardware
key (hotpath.tuning.tuned_values), which every server staged on this host then applies.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from hotpath import paths
from hotpath.specs.repository import read_config
from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.tune.hill_climb import Objective
from hotpath.sweeps.tune.run import run_tune
from hotpath.tuning.hardware_key import HardwareKey
from hotpath.tuning.knobs import read_knobs
from hotpath.tuning.slo import Slo
from hotpath.tuning.tuned_values import TunedValues, load, stamp

logger = logging.getLogger(__name__)

QUICK_MEASUREMENT = Measurement(1500, 50, 3)
QUICK_TRIALS = 5       # start twice, then the best-ranked moves (a win measured twice)


def committed_knobs(model: str, repository: Path | None = None) -> dict:
    """The knob values of `model` as the committed spec built it (the repository's config.pbtxt)."""
    return read_knobs(read_config(Path(repository or paths.model_repository()) / model))


def overrides(state: dict[str, dict], repository: Path | None = None) -> dict[str, dict]:
    """Per model, the knobs of `state` whose values differ from the committed defaults."""
    out = {}
    for model, knobs in state.items():
        default = committed_knobs(model, repository)
        moved = {k: v for k, v in knobs.items() if default.get(k) != v}
        if moved:
            out[model] = moved
    return out


def run_quick(url: str, slos: list[Slo], max_trials: int = QUICK_TRIALS, path: Path | None = None,
              log=logger.info) -> tuple[TunedValues, Path]:
    """Tune each endpoint of `slos` in turn on the server at `url`; store the result for this host."""
    here = HardwareKey.detect()
    previous = load(path)
    # Values for endpoints not tuned now are kept when they were measured here too.
    kept = dict(previous.models) if previous and previous.hardware == here else {}
    endpoints: dict[str, str] = {}
    t0 = time.perf_counter()
    for slo in slos:
        log(f"[tune --quick] {slo.endpoint} on {here.describe()} (key {here.digest})")
        best, trials, _ = run_tune(url, slo, max_trials, (slo.concurrency,), measurement=QUICK_MEASUREMENT,
                                   reports_dir=paths.work_dir() / "tune", log=log,
                                   command=f"hotpath tune --quick {slo.endpoint}")
        objective = Objective(slo.p95_ms, (slo.concurrency,), slo.concurrency)
        start = next(t for t in trials if t.accepted)
        for model in best.state:
            kept.pop(model, None)
        kept.update(overrides(best.state))
        endpoints[slo.endpoint] = f"start {objective.describe(start)}; kept {objective.describe(best)}"
    seconds = time.perf_counter() - t0
    names = " ".join(s.endpoint for s in slos)
    tuned = TunedValues(here, kept, stamp(), f"hotpath tune --quick {names}", seconds, endpoints)
    written = tuned.save(path)
    log(f"[tune --quick] {len(slos)} endpoint(s) in {seconds:.0f} s; tuned values for this host in {written}: "
        + ("; ".join(f"{m}: {kn}" for m, kn in kept.items()) or "the committed defaults won"))
    return tuned, written
