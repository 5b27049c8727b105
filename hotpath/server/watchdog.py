"""Keep a local tritonserver serving: find dead Python stubs and restart their models.

Triton 2.51 neither restarts a killed stub nor marks its model unready. The watchdog watches two
things: the stub processes under tritonserver (a census every `census_s`: a stub that disappears is
seen within that time, before any request fails on it) and the liveness probe (hotpath.health: a real
request through every endpoint every `probe_s`, which also catches a stub that hangs). A model with
a dead stub is reloaded through explicit model control with a forcing config change (Triton keeps the
existing instances when a load changes nothing); if tritonserver itself is gone, it is restarted.
"""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import tritonclient.grpc as grpcclient

from hotpath.health.probe import ProbeResult, endpoints, probe_all, read_configs
from hotpath.perf.reload import load_config, served_config
from hotpath.server.process import LocalTriton
from hotpath.server.stubs import stub_census

_UNHEALTHY_STUB = re.compile(r"Stub process '([^']+)' is not healthy")
# A forcing change: a parameter no backend reads, set to the restart time.
RESTART_PARAMETER = "hotpath.restarted_at"


def models_named_unhealthy(results: list[ProbeResult]) -> set[str]:
    """Models whose stubs the probe's errors name ('Stub process 'tokenizer_0_0' is not healthy')."""
    named = set()
    for result in results:
        for instance in _UNHEALTHY_STUB.findall(result.message):
            named.add(re.sub(r"_\d+_\d+$", "", instance))  # instance <model>_<group>_<index>
    return named


@dataclass
class Recovery:
    """One recovery: what was found, what was done, how long it took."""
    reason: str
    models: list[str]
    detected_at: float
    recovered_at: float | None = None
    error: str = ""

    @property
    def seconds(self) -> float | None:
        return None if self.recovered_at is None else self.recovered_at - self.detected_at


@dataclass
class Watchdog:
    """Background thread guarding one LocalTriton (started with model_control='explicit')."""
    server: LocalTriton
    repository: Path | None = None
    census_s: float = 0.5
    probe_s: float = 5.0
    probe_timeout_s: float = 5.0
    log: Callable[[str], None] = print
    recoveries: list[Recovery] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._endpoints = endpoints(read_configs(self.repository or self.server.repository))
        self._baseline: Counter = Counter()

    def start(self) -> "Watchdog":
        if self.server.model_control != "explicit":
            raise ValueError("the watchdog restarts models through explicit model control: "
                             "start the server with model_control='explicit'")
        self._baseline = stub_census(self.server.process.pid)
        self._thread = threading.Thread(target=self._run, name="hotpath-watchdog", daemon=True)
        self._thread.start()
        self.log(f"[watchdog] watching {sum(self._baseline.values())} stubs of {len(self._baseline)} models; "
                 f"probing {len(self._endpoints)} endpoints every {self.probe_s:g}s")
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=60)

    def probe(self) -> list[ProbeResult]:
        return probe_all(self.server.grpc_url, self._endpoints, self.probe_timeout_s)

    def _run(self) -> None:
        next_probe = time.monotonic() + self.probe_s
        while not self._stop.wait(self.census_s):
            if self.server.process.poll() is not None:
                self._restart_server()
                continue
            census = stub_census(self.server.process.pid)
            dead = sorted(m for m, n in self._baseline.items() if census[m] < n)
            if dead:
                self._reload(dead, f"stub process gone ({', '.join(dead)})")
                continue
            if time.monotonic() >= next_probe:
                next_probe = time.monotonic() + self.probe_s
                failed = [r for r in self.probe() if not r.ok]
                if failed:
                    for result in failed:
                        self.log(f"[watchdog] probe failed: {result.line()}")
                    named = sorted(models_named_unhealthy(failed))
                    if named:
                        self._reload(named, "probe: " + "; ".join(r.line() for r in failed))

    def _reload(self, models: list[str], reason: str) -> None:
        recovery = Recovery(reason, models, time.monotonic())
        self.recoveries.append(recovery)
        self.log(f"[watchdog] {reason}: restarting {', '.join(models)}")
        try:
            with grpcclient.InferenceServerClient(self.server.grpc_url) as client:
                for model in models:
                    config = served_config(client, model)
                    config.parameters[RESTART_PARAMETER].string_value = f"{time.time():.6f}"
                    load_config(client, model, config)
        except Exception as exc:  # noqa: BLE001 - a failed reload falls back to a server restart
            recovery.error = str(exc)
            self.log(f"[watchdog] reloading {', '.join(models)} failed ({exc}); restarting tritonserver")
            self._restart_server()
            return
        # The baseline stays: the reloaded configs have the same instances (a census taken now could
        # still count the old model's exiting stubs).
        recovery.recovered_at = time.monotonic()
        self.log(f"[watchdog] {', '.join(models)} restarted in {recovery.seconds:.1f}s")

    def _restart_server(self) -> None:
        recovery = Recovery("tritonserver exited", ["*"], time.monotonic())
        self.recoveries.append(recovery)
        self.log(f"[watchdog] tritonserver is gone (exit {self.server.process.poll()}); restarting it")
        try:
            self.server.stop()
            self.server.start()
        except Exception as exc:  # noqa: BLE001 - reported, retried on the next round
            recovery.error = str(exc)
            self.log(f"[watchdog] restart failed: {exc}; retrying in 10s")
            self._stop.wait(10)
            return
        self._baseline = stub_census(self.server.process.pid)
        recovery.recovered_at = time.monotonic()
        self.log(f"[watchdog] tritonserver restarted in {recovery.seconds:.1f}s")
