"""The watchdog tells dead from busy, without a server: which probe timeouts restart a model."""

import pytest

from hotpath.health.probe import ProbeResult
from hotpath.paths import model_repository
from hotpath.server import watchdog as wd
from hotpath.server.watchdog import BUSY_CPU, Progress, Watchdog, hung_models, stalled

STEPS = ("tokenizer", "text_encoder")


def test_a_model_that_completed_requests_or_used_cpu_is_not_stalled():
    before = Progress(0.0, 100, 5.0)
    assert not stalled(before, Progress(10.0, 140, 5.0)), "requests completed"
    assert not stalled(before, Progress(10.0, 100, 5.0 + 10 * 1.3)), "stubs busy (1.3 cores)"
    assert not stalled(before, Progress(10.0, 3, 5.0)), "counts reset by a reload: something happened"
    # An execute() asleep: nothing completes, the stubs' health threads use ~0.1% of a core.
    assert stalled(before, Progress(10.0, 100, 5.0 + 10 * 0.002))
    assert stalled(before, Progress(10.0, 100, 5.0 + 10 * BUSY_CPU * 0.9))


def test_a_decoupled_or_unknown_model_is_judged_by_its_stubs_cpu():
    # A decoupled model's counts grow when execute() hands requests to its loop: not a response.
    assert stalled(Progress(0.0, None, 1.0), Progress(10.0, None, 1.01))
    assert not stalled(Progress(0.0, None, 1.0), Progress(10.0, None, 4.0))
    assert stalled(Progress(0.0, 7, 1.0), Progress(10.0, None, 1.0)), "statistics gone: CPU alone"


def test_an_endpoint_is_hung_only_when_none_of_its_steps_progressed():
    before = {"tokenizer": Progress(0.0, 10, 1.0), "text_encoder": Progress(0.0, 10, 1.0)}
    idle = {m: Progress(12.0, 10, 1.01) for m in STEPS}
    assert hung_models(STEPS, before, idle) == list(STEPS)
    # The probe waited behind the tokenizer's queue: a busy step, no restart of either.
    busy = dict(idle, tokenizer=Progress(12.0, 500, 9.0))
    assert hung_models(STEPS, before, busy) == []
    # A model that appeared since (no snapshot before) is judged from zero.
    assert hung_models(("text_generation",), {}, {"text_generation": Progress(12.0, None, 20.0)}) == []
    assert hung_models(("text_generation",), {}, {}) == ["text_generation"]


class _Process:
    pid = 0

    @staticmethod
    def poll():
        return None


class _Server:
    process = _Process()
    grpc_url = "127.0.0.1:1"
    model_control = "explicit"
    repository = model_repository()


@pytest.fixture
def rounds(monkeypatch):
    """A watchdog whose probes time out on text_embedding_exact; `rounds(progress_per_round)` runs probe
    rounds and returns the models it restarted."""
    guard = Watchdog(_Server(), probe_timeout_s=0.1, log=lambda m: None)
    restarted: list[list[str]] = []
    monkeypatch.setattr(guard, "_reload", lambda models, reason, seen_at: restarted.append(models))
    monkeypatch.setattr(wd, "probe", lambda url, config, timeout: ProbeResult(
        config.name, config.name != "text_embedding_exact", 100, "DEADLINE_EXCEEDED", "timed out"))

    def run(snapshots: list[dict[str, Progress]]) -> list[list[str]]:
        feed = iter(snapshots)
        monkeypatch.setattr(guard, "progress", lambda: next(feed))
        while True:
            try:
                guard._probe_round()
            except StopIteration:
                return restarted
    return run


def _at(t: float, completed: int, cpu_s: float) -> dict[str, Progress]:
    return {m: Progress(t, completed, cpu_s) for m in STEPS}


def test_probe_timeouts_behind_real_work_restart_nothing(rounds):
    # Each round: a snapshot when it starts, one more when an endpoint has timed out twice.
    work = [_at(0, 0, 0), _at(5, 50, 4), _at(6, 60, 5), _at(10, 100, 8), _at(11, 110, 9), _at(15, 150, 12)]
    assert rounds(work) == []


def test_a_hung_step_is_restarted_after_two_timeouts_without_progress(rounds):
    assert rounds([_at(0, 10, 1.0), _at(5, 10, 1.0), _at(6, 10, 1.01)]) == [sorted(STEPS)]


def test_a_model_that_stops_progressing_is_restarted_on_the_next_window(rounds):
    busy_then_hung = [_at(0, 0, 0), _at(5, 50, 4), _at(6, 60, 5), _at(11, 60, 5.01), _at(12, 60, 5.01)]
    assert rounds(busy_then_hung) == [sorted(STEPS)]
