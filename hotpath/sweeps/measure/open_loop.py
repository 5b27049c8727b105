"""Open-loop load: requests sent on a fixed schedule whatever the server does, outcomes per status.

A closed loop (perf_analyzer --concurrency) slows down with the server and so can never overload it;
an open loop keeps offering the same rate, which is how real traffic behaves past capacity. Used to
check load shedding: refused requests must come back fast with UNAVAILABLE while the admitted ones
keep their latency.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import tritonclient.grpc as grpcclient


@dataclass
class Outcome:
    sent_s: float        # since the start of the run
    latency_s: float
    status: str          # "OK" or the gRPC status name (UNAVAILABLE, INVALID_ARGUMENT, ...)
    message: str = ""
    lag_s: float = 0.0   # how late the client sent it vs its schedule (a client that falls behind sends bursts)


@dataclass
class OpenLoopResult:
    rate: float
    duration_s: float
    outcomes: list[Outcome] = field(default_factory=list)

    def of(self, status: str) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == status]

    def latency_ms(self, status: str, q: float) -> float:
        values = [o.latency_s for o in self.of(status)]
        return float(np.percentile(values, q) * 1e3) if values else float("nan")

    @property
    def admitted_per_s(self) -> float:
        return len(self.of("OK")) / self.duration_s

    def summary(self) -> str:
        ok, refused = self.of("OK"), self.of("UNAVAILABLE")
        others = len(self.outcomes) - len(ok) - len(refused)
        return (f"offered {self.rate:.0f}/s for {self.duration_s:.0f} s ({len(self.outcomes)} requests): "
                f"admitted {len(ok)} ({self.admitted_per_s:.0f}/s, p50 {self.latency_ms('OK', 50):.1f} ms, "
                f"p95 {self.latency_ms('OK', 95):.1f} ms), refused UNAVAILABLE {len(refused)} "
                f"(p50 {self.latency_ms('UNAVAILABLE', 50):.1f} ms, p95 {self.latency_ms('UNAVAILABLE', 95):.1f} ms), "
                f"other {others}; client send lag p95 {np.percentile([o.lag_s for o in self.outcomes], 95) * 1e3:.1f} ms")


def run_open_loop(url: str, model: str, make_inputs: Callable[[int], list[grpcclient.InferInput]],
                  rate: float, duration_s: float, drain_s: float = 30.0,
                  headers: dict[str, str] | None = None, prebuild: bool = True,
                  raise_unanswered: bool = True) -> OpenLoopResult:
    """Send `rate` requests/s for `duration_s` (request i gets make_inputs(i), every one `headers`);
    wait for every answer. `prebuild=False` builds each request when it is due (long runs: memory);
    `raise_unanswered=False` returns after `drain_s` without an answer instead of raising."""
    run = OpenLoopResult(rate, duration_s)
    lock, done = threading.Lock(), threading.Semaphore(0)
    total = int(rate * duration_s)
    # Built up front by default: the schedule must not wait for it.
    inputs = [make_inputs(i) for i in range(total)] if prebuild else None
    client = grpcclient.InferenceServerClient(url)
    start = time.perf_counter()

    def callback(sent: float, due: float):
        def _cb(result=None, error=None):  # tritonclient passes keywords
            now = time.perf_counter()
            status = "OK" if error is None else str(error.status() or "UNKNOWN").removeprefix("StatusCode.")
            with lock:
                run.outcomes.append(Outcome(sent - start, now - sent, status,
                                            "" if error is None else error.message(), sent - due))
            done.release()
        return _cb

    try:
        for i in range(total):
            due = start + i / rate
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            request = inputs[i] if inputs is not None else make_inputs(i)
            client.async_infer(model, request, callback(time.perf_counter(), due), headers=headers)
        for _ in range(total):
            if not done.acquire(timeout=drain_s):
                if not raise_unanswered:  # the caller counts them: total - len(outcomes)
                    break
                raise TimeoutError(f"{model}: {total - len(run.outcomes)} of {total} requests unanswered "
                                   f"{drain_s:.0f} s after the last send")
    finally:
        client.close()
    return run
