"""The soak judges memory only once the response cache is full: RSS that grows while the cache (and, on a
slow host, the backlog) fills is not a leak; RSS that keeps growing after it is."""

from hotpath.sweeps.measure.open_loop import OpenLoopResult, Outcome
from perf.lab.studies.soak import MemorySample, SoakResult


def _result(rss, cache):
    return SoakResult(30.0, {}, memory=[MemorySample(2.0 * i, {"tritonserver": r}, c)
                                        for i, (r, c) in enumerate(zip(rss, cache))])


def test_growth_while_the_cache_fills_late_is_not_judged():
    # A slow host: the cache is full only at 30 s; RSS rose with it, then stayed flat.
    fill = [i / 15 for i in range(16)] + [1.0] * 5
    rss = [50 + 4 * i for i in range(16)] + [110, 110, 110.2, 110.4, 110.4]
    result = _result(rss, fill)
    assert result.cache_full_at() == 30.0
    assert [s.t_s for s in result.settled()] == [30.0, 32.0, 34.0, 36.0, 38.0, 40.0]
    assert result.growth_mb("tritonserver") < 1


def test_growth_after_the_cache_filled_is_judged():
    fill = [0.5, 1.0] + [1.0] * 18
    rss = [50 + 1.5 * i for i in range(20)]          # a leak: 1.5 MB every sample, all run long
    result = _result(rss, fill)
    assert result.cache_full_at() == 2.0
    assert result.settled()[0].t_s == 16.0          # the second half: the cache filled early
    assert result.growth_mb("tritonserver") > 8


def test_a_host_that_fell_behind_is_judged_on_the_drain():
    fill = [1.0] * 21
    rss = [50 + 2 * i for i in range(16)] + [80, 80, 80.5, 80.5, 80.5]   # backlog grows to 30 s, then flat
    result = _result(rss, fill)
    result.rates = {"text_embedding": 10.0}
    answered_late = [Outcome(sent_s=i * 0.1, latency_s=8.0, status="OK") for i in range(300)]
    result.runs = {"text_embedding": OpenLoopResult(10.0, 30.0, answered_late)}
    assert 78 <= result.in_flight_at(30.0) <= 80 and result.fell_behind()   # those sent in the last 8 s
    assert result.settled()[0].t_s == 30.0 and result.growth_mb("tritonserver") < 1
    result.runs = {"text_embedding": OpenLoopResult(10.0, 30.0, [Outcome(i * 0.1, 0.02, "OK") for i in range(300)])}
    assert not result.fell_behind() and result.growth_mb("tritonserver") > 8   # kept up: the growth counts
