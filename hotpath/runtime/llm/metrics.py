"""vLLM's statistics as Triton custom metrics (python_backend's `pb_utils.MetricFamily`).

Published on Triton's metrics port beside its own `nv_*` metrics, with labels model, version and load
(one value per model load, so a reload never shares a series with the old load). The engine process
sends what vLLM's stat loggers saw about once a second (hotpath.runtime.llm.engine_process):

  hotpath_generation_kv_used_tokens / _kv_capacity_tokens   gauges: KV cache positions in use / all of them
  hotpath_generation_running / _waiting                      gauges: sequences generating / waiting in vLLM
  hotpath_generation_preemptions_total                       counter: sequences preempted for KV memory
  hotpath_generation_prefix_cache_lookups_total{result}      counter: requests that reused cached KV (hit) or not
  hotpath_generation_prefix_cache_tokens_total               counter: prompt tokens served from the prefix cache
  hotpath_generation_ttft_seconds / _itl_seconds             histograms: vLLM's time to first token, inter-token

Each custom-metric call is a message to the Triton process: they are made from the engine reader's
thread once per stats line, never per token.
"""

from __future__ import annotations

import threading

TTFT_BUCKETS = [0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
ITL_BUCKETS = [0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0]
PREFIX = "hotpath_generation_"
NAMES = ("kv_used", "kv_capacity", "running", "waiting", "preemptions", "hits", "misses", "prefix_tokens",
         "ttft", "itl")


class EngineMetrics:
    """Publishes the engine's stats lines through `pb` (the triton_python_backend_utils module)."""

    def __init__(self, pb, labels: dict[str, str], kv_capacity_tokens: int):
        family = pb.MetricFamily
        self._lock = threading.Lock()
        self._families = []   # kept alive, and deleted after their metrics (python_backend's rule)

        def make(name, kind, description, extra=None, **kwargs):
            fam = family(name=PREFIX + name, description=description, kind=kind)
            self._families.append(fam)
            return fam.Metric(labels={**labels, **(extra or {})}, **kwargs)

        self.capacity = kv_capacity_tokens
        self.kv_used = make("kv_used_tokens", family.GAUGE, "KV cache positions holding sequences in flight")
        self.kv_capacity = make("kv_capacity_tokens", family.GAUGE, "KV cache positions of the engine")
        self.running = make("running", family.GAUGE, "Sequences generating")
        self.waiting = make("waiting", family.GAUGE, "Requests waiting in the engine (queued or preempted)")
        self.preemptions = make("preemptions_total", family.COUNTER, "Sequences preempted to free KV memory")
        lookups = family(name=PREFIX + "prefix_cache_lookups_total", kind=family.COUNTER,
                         description="Requests that reused cached KV blocks (hit) or none (miss)")
        self._families.append(lookups)
        self.hits = lookups.Metric(labels={**labels, "result": "hit"})
        self.misses = lookups.Metric(labels={**labels, "result": "miss"})
        self.prefix_tokens = make("prefix_cache_tokens_total", family.COUNTER,
                                  "Prompt tokens served from the prefix cache instead of prefilled")
        self.ttft = make("ttft_seconds", family.HISTOGRAM, "Time from request to first token (vLLM)",
                         buckets=TTFT_BUCKETS)
        self.itl = make("itl_seconds", family.HISTOGRAM, "Time between consecutive tokens of a stream (vLLM)",
                        buckets=ITL_BUCKETS)
        self.kv_capacity.set(float(kv_capacity_tokens))

    def publish(self, stats: dict) -> None:
        """One stats line: gauges set, counters advanced, latency samples observed."""
        with self._lock:
            if self.kv_used is not None:
                self._publish(stats)

    def _publish(self, stats: dict) -> None:
        self.kv_used.set(float(stats.get("kv_usage", 0.0)) * self.capacity)
        self.running.set(float(stats.get("running", 0)))
        self.waiting.set(float(stats.get("waiting", 0)))
        for key, metric in (("preempted", self.preemptions), ("prefix_hits", self.hits),
                            ("prefix_misses", self.misses), ("prefix_tokens", self.prefix_tokens)):
            if stats.get(key):
                metric.increment(float(stats[key]))
        for seconds in stats.get("ttft", ()):
            self.ttft.observe(float(seconds))
        for seconds in stats.get("itl", ()):
            self.itl.observe(float(seconds))

    def stop(self) -> None:
        # Metrics first, then their families (python_backend refuses the other order).
        with self._lock:
            for name in NAMES:
                setattr(self, name, None)
            self._families.clear()
