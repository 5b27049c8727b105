"""The soak judges memory only once the response cache is full: RSS that grows while the cache (and, on a
slow host, the backlog) fills is not a leak; RSS that keeps growing after it is."""

from hotpath.perf.studies.soak import MemorySample, SoakResult


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
