"""The generation engine's state as Triton custom metrics (python_backend's `pb_utils.MetricFamily`).

Published on Triton's metrics port beside its own `nv_*` metrics, with labels model, version and
load (the caller's; one value per model load, so a reload never shares a series with the old load):

  hotpath_generation_kv_used_tokens / _kv_capacity_tokens   gauges: KV positions in use / the pool's budget
  hotpath_generation_running / _waiting                      gauges: sequences generating / waiting for admission
  hotpath_generation_preemptions_total                       counter: sequences preempted to free KV memory
  hotpath_generation_prefix_cache_lookups_total{result}      counter: admissions that reused cached KV (hit) or not
  hotpath_generation_prefix_cache_tokens_total               counter: prompt positions copied instead of prefilled
  hotpath_generation_ttft_seconds / _itl_seconds             histograms: time to first token, inter-token latency

A thread copies the engine's counters every `interval_s` and drains its latency samples: each
custom-metric call is a message to the Triton process, so none is made from the decode loop.
"""

from __future__ import annotations

import threading

TTFT_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
ITL_BUCKETS = [0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]
PREFIX = "hotpath_generation_"


class EngineMetrics:
    """Publishes an Engine's state through `pb` (the triton_python_backend_utils module)."""

    def __init__(self, pb, engine, labels: dict[str, str], interval_s: float = 1.0):
        self.engine, self.interval_s = engine, interval_s
        family = pb.MetricFamily

        def make(name, kind, description, extra=None, **kwargs):
            fam = family(name=PREFIX + name, description=description, kind=kind)
            self._families.append(fam)
            return fam.Metric(labels={**labels, **(extra or {})}, **kwargs)

        self._families = []   # kept alive, and deleted after their metrics (python_backend's rule)
        self.kv_used = make("kv_used_tokens", family.GAUGE, "KV cache positions holding sequences in flight")
        self.kv_capacity = make("kv_capacity_tokens", family.GAUGE, "KV cache positions of the pool's budget")
        self.running = make("running", family.GAUGE, "Sequences generating (admitted to the KV pool)")
        self.waiting = make("waiting", family.GAUGE, "Requests waiting for admission (queued or preempted)")
        self.preemptions = make("preemptions_total", family.COUNTER, "Sequences preempted to free KV memory")
        lookups = family(name=PREFIX + "prefix_cache_lookups_total", kind=family.COUNTER,
                         description="Admissions that reused cached KV entries (hit) or none (miss)")
        self._families.append(lookups)
        self.hits = lookups.Metric(labels={**labels, "result": "hit"})
        self.misses = lookups.Metric(labels={**labels, "result": "miss"})
        self.prefix_tokens = make("prefix_cache_tokens_total", family.COUNTER,
                                  "Prompt positions copied from the prefix cache instead of prefilled")
        self.ttft = make("ttft_seconds", family.HISTOGRAM, "Time from request to first token",
                         buckets=TTFT_BUCKETS)
        self.itl = make("itl_seconds", family.HISTOGRAM, "Time between consecutive tokens of a stream",
                        buckets=ITL_BUCKETS)
        self.kv_capacity.set(float(engine.pool.budget))
        self._sent = {"preemptions": 0, "prefix_hits": 0, "prefix_misses": 0, "prefix_tokens": 0}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self) -> None:
        """One update: gauges set, counters advanced by what happened since the last, samples observed."""
        engine, stats = self.engine, self.engine.stats
        running, waiting = engine.load
        self.kv_used.set(float(engine.kv_used))
        self.running.set(float(running))
        self.waiting.set(float(waiting))
        for name, metric in (("preemptions", self.preemptions), ("prefix_hits", self.hits),
                             ("prefix_misses", self.misses), ("prefix_tokens", self.prefix_tokens)):
            now = getattr(stats, name)
            if now > self._sent[name]:
                metric.increment(float(now - self._sent[name]))
                self._sent[name] = now
        samples = engine.latencies
        while samples:
            kind, seconds = samples.popleft()
            (self.ttft if kind == "ttft" else self.itl).observe(seconds)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="generation-metrics", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.publish()

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(5.0)
        self._thread = None
        # Metrics first, then their families (python_backend refuses the other order).
        for name in ("kv_used", "kv_capacity", "running", "waiting", "preemptions", "hits", "misses",
                     "prefix_tokens", "ttft", "itl"):
            setattr(self, name, None)
        self._families.clear()
