"""`python -m perf tune ENDPOINT`: `hotpath tune`, then Triton Model Analyzer's search of the same endpoint,
its pick measured with hotpath's objective on the same server (perf/reports/tune-ENDPOINT.md holds both)."""

from __future__ import annotations

import logging

from hotpath.errors import HotpathError
from hotpath.sweeps.tune.hill_climb import Objective
from hotpath.sweeps.tune.report import Rival
from hotpath.sweeps.tune.run import LiveEvaluator
from hotpath.sweeps.tune.search_space import SearchSpace
from perf.lab.compare.rivals import rivals_for

logger = logging.getLogger(__name__)


class ModelAnalyzerRival:
    """hotpath.sweeps.tune.run.run_tune's `rival`: Model Analyzer searches the endpoint's searched step alone
    (it cannot search ensembles), then its pick is swept in the whole endpoint."""

    command = "python -m perf tune"

    def __call__(self, evaluate: LiveEvaluator, space: SearchSpace, objective: Objective, log=logger.info) -> Rival:
        from perf.lab.compare.alternatives.model_analyzer import run_model_analyzer

        step = rivals_for(evaluate.slo.endpoint).searched_step
        try:
            ma = run_model_analyzer(step, objective.target_ms, list(objective.sweep), log=log)
        except HotpathError as exc:
            log(f"[tune] model analyzer failed: {exc}")
            return Rival(step, 0.0, 0, {}, error=str(exc).splitlines()[0])
        settings = {k: v for k, v in ma.best_settings.items() if k in space.start[step]}
        state = {**space.start, step: {**space.start[step], **settings}}
        trial = evaluate.sweep(state, f"Model Analyzer's pick for {step}")
        log(f"[tune] model analyzer: {ma.configs_measured} configs of {step} in {ma.search_seconds:.0f}s; "
            f"its pick {settings}: {objective.describe(trial)}")
        return Rival(step, ma.search_seconds, ma.configs_measured, settings, trial)
