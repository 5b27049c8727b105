"""Keep a local tritonserver serving: find dead or hung Python stubs and restart their models.

Triton 2.51 neither restarts a killed stub nor marks its model unready. Two threads watch:
- the census (every `census_s`): the stub processes under tritonserver against the instances each
  READY model's served config asks for; a deficit seen on two rounds in a row (a model being loaded
  by an operator briefly has fewer) is a dead stub, restarted before any request fails on it;
- the liveness probe (hotpath.health, every `probe_s`): a real request through every endpoint. An
  error naming an unhealthy stub restarts that model; an endpoint that times out on two probes in a
  row has its models restarted only if none of them made progress meanwhile (a hung stub): a probe
  that waits behind real work is slow, not a failure, and restarting a busy model would turn
  slowness into failed requests.
Progress of a model between two snapshots (`Progress`, `stalled`): requests it completed (Triton's
statistics API: success + fail + execution counts) or CPU time its stubs used (at least `BUSY_CPU`
of a core). A decoupled model's counts grow when execute() hands a request to its own loop, before
any response, so only its stubs' CPU counts for it. An execute() that never returns does neither.
A restart reloads the model through explicit model control with a forcing config change (Triton keeps
the existing instances when a load changes nothing). The replaced stubs get `old_stub_grace_s` to
finish their requests and exit as Triton unloads the old version; any still alive then are killed
(SIGKILL: a stub ignores SIGTERM): a hung execute() never returns, so Triton would never finish that
unload and its stub, with its model's memory, would stay for the server's lifetime. If tritonserver itself exits, it is restarted
(`hotpath serve`), or, with `restart_server=False`, left to whoever supervises it (the container's
hotpath.server.supervise exits with it, and the orchestrator restarts the container).
"""

from __future__ import annotations

import logging
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import psutil
import tritonclient.grpc as grpcclient

from hotpath.health.probe import ProbeResult, endpoint_configs, probe
from hotpath.server.admin import admin_headers
from hotpath.server.model_control import load_config, served_config
from hotpath.server.stubs import stub_census, stub_processes
from hotpath.specs.repository import Repository, instance_count

if TYPE_CHECKING:   # the container runs the watchdog without the local-server modules
    from hotpath.server.local_triton import LocalTriton

_UNHEALTHY_STUB = re.compile(r"Stub process '([^']+)' is not healthy")
# A forcing change: a parameter no backend reads, set to the restart time.
RESTART_PARAMETER = "hotpath.restarted_at"
TIMEOUT = "DEADLINE_EXCEEDED"
# A model whose stubs used at least this share of a core over a window is working (measured on 2 cores:
# idle stubs 0.001-0.002, sentence_embedder under load 1.3, an execute() asleep ~0.001).
BUSY_CPU = 0.05


def models_named_unhealthy(results: list[ProbeResult]) -> set[str]:
    """Models whose stubs the probe's errors name ('Stub process 'tokenizer_0_0' is not healthy')."""
    named = set()
    for result in results:
        for instance in _UNHEALTHY_STUB.findall(result.message):
            named.add(re.sub(r"_\d+_\d+$", "", instance))  # instance <model>_<group>_<index>
    return named


@dataclass(frozen=True)
class Progress:
    """What one model had done by `at` (monotonic s): requests completed per Triton's statistics (None
    when unknown: statistics unavailable, or a decoupled model, whose counts say nothing of responses),
    and the CPU seconds its live stubs had used."""
    at: float
    completed: int | None
    cpu_s: float


def stalled(before: Progress, after: Progress, busy_cpu: float = BUSY_CPU) -> bool:
    """No progress between two snapshots: no request completed (a count that moved either way, as after a
    reload, is progress) and the stubs used less than `busy_cpu` of a core."""
    if before.completed is not None and after.completed is not None and after.completed != before.completed:
        return False
    seconds = max(after.at - before.at, 1e-3)
    return (after.cpu_s - before.cpu_s) / seconds < busy_cpu


def hung_models(steps: tuple[str, ...], before: dict[str, Progress], after: dict[str, Progress]) -> list[str]:
    """An endpoint's models to restart after its probes timed out: all of them when none progressed over
    the window (a hung step starves the others), none when any did (the probe waited behind real work;
    which step held it cannot be told, and a busy one must not be restarted)."""
    idle = Progress(0.0, None, 0.0)
    if all(stalled(before.get(m, idle), after.get(m, idle)) for m in steps):
        return list(steps)
    return []


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
    """Background threads guarding one server started with model_control='explicit': a LocalTriton, or
    anything with its `process`, `grpc_url`, `model_control`, `repository`, `log_tail()` (and `stop()` /
    `start()` when `restart_server`)."""
    server: "LocalTriton"
    repository: Path | None = None
    census_s: float = 0.5
    probe_s: float = 5.0
    probe_timeout_s: float = 5.0
    log: Callable[[str], None] = logging.getLogger(__name__).info
    restart_server: bool = True
    old_stub_grace_s: float = 5.0
    recoveries: list[Recovery] = field(default_factory=list)

    def __post_init__(self):
        self._stop = threading.Event()
        self._lock = threading.Lock()   # one recovery at a time, and never during stop()
        self._threads: list[threading.Thread] = []
        repository = Repository(self.repository or self.server.repository)
        configs = repository.configs()
        self._endpoints = endpoint_configs(repository)
        # What serves each endpoint (its steps, or itself): restarted when the endpoint hangs.
        self._steps = {e.name: e.steps for e in repository.endpoints()}
        # Python models have stubs; a stub that is not up yet when watching starts must count too.
        self._python_models = {name for name, c in configs.items() if c.backend == "python"}
        self._decoupled = {name for name, c in configs.items() if c.model_transaction_policy.decoupled}
        # Per endpoint timing out: the models' progress when its first timed-out probe round started.
        self._window: dict[str, dict[str, Progress]] = {}
        self._expected: dict[str, int] = {}
        self._deficits: Counter = Counter()
        self._timeouts: Counter = Counter()

    def start(self) -> "Watchdog":
        if self.server.model_control != "explicit":
            raise ValueError("the watchdog restarts models through explicit model control: "
                             "start the server with model_control='explicit'")
        self._refresh_expected(set(stub_census(self.server.process.pid)) | self._python_models)
        self._threads = [threading.Thread(target=self._loop, args=(self._census_round, self.census_s),
                                          name="hotpath-watchdog-census", daemon=True),
                         threading.Thread(target=self._loop, args=(self._probe_round, self.probe_s),
                                          name="hotpath-watchdog-probe", daemon=True)]
        for thread in self._threads:
            thread.start()
        self.log(f"[watchdog] watching {sum(self._expected.values())} stubs of {len(self._expected)} models; "
                 f"probing {len(self._endpoints)} endpoints every {self.probe_s:g}s")
        return self

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        """Stop watching; waits for a recovery in progress (a restart must not outlive the caller)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _loop(self, round_: Callable[[], None], every_s: float) -> None:
        while not self._stop.wait(every_s):
            try:
                round_()
            except Exception as exc:  # noqa: BLE001 - a watchdog that dies silently guards nothing
                self.log(f"[watchdog] {round_.__name__.strip('_')} failed: {exc!r}; continuing")

    def _census_round(self) -> None:
        if self._lock.locked():
            return   # a recovery is in progress: its stubs are coming and going
        seen_at = time.monotonic()
        if self.server.process.poll() is not None:
            if self.restart_server:
                self._restart_server()
            return
        census = stub_census(self.server.process.pid)
        # Expected counts come from the served configs, re-read only when they disagree with the census
        # (a config reloaded with fewer instances, a model unloaded on purpose: not dead stubs).
        new = {m for m in census if m not in self._expected}
        short = {m for m, n in self._expected.items() if census[m] < n}
        if new or short:
            self._refresh_expected(new | short)
            short = {m for m, n in self._expected.items() if census[m] < n}
        self._deficits = Counter({m: self._deficits[m] + 1 for m in short})
        dead = sorted(m for m, rounds in self._deficits.items() if rounds >= 2)
        if dead:
            self._reload(dead, "stub process gone (" + ", ".join(
                f"{m}: {census[m]} of {self._expected[m]}" for m in dead) + ")", seen_at)

    def _refresh_expected(self, models: set[str]) -> None:
        """Stubs each READY model should have, from the config it serves now; unready models drop out."""
        with grpcclient.InferenceServerClient(self.server.grpc_url) as client:
            for model in models:
                if client.is_model_ready(model):
                    self._expected[model] = instance_count(served_config(client, model))
                else:
                    self._expected.pop(model, None)

    def progress(self) -> dict[str, Progress]:
        """Every model's progress so far (statistics API with the admin key, stub CPU from /proc)."""
        completed: Counter = Counter()
        try:
            with grpcclient.InferenceServerClient(self.server.grpc_url) as client:
                stats = client.get_inference_statistics("", headers=admin_headers(), client_timeout=5)
            for model in stats.model_stats:
                s = model.inference_stats
                completed[model.name] += s.success.count + s.fail.count + model.execution_count
            known = True
        except Exception as exc:  # noqa: BLE001 - judged on CPU alone then
            self.log(f"[watchdog] statistics unavailable ({exc}); judging progress by stub CPU alone")
            known = False
        cpu: Counter = Counter()
        for model, procs in stub_processes(self.server.process.pid).items():
            for proc in procs:
                try:
                    cpu[model] += sum(proc.cpu_times()[:2])
                except Exception:  # noqa: BLE001 - a stub that just exited
                    continue
        now = time.monotonic()
        return {m: Progress(now, completed[m] if known and m not in self._decoupled else None, cpu[m])
                for m in set(completed) | set(cpu) | set(self._python_models)}

    def _probe_round(self) -> None:
        if self._lock.locked() or self.server.process.poll() is not None:
            return   # a recovery is in progress; the census thread restarts a dead server
        seen_at = time.monotonic()
        started = self.progress()
        results = []
        for config in self._endpoints:
            if self._stop.is_set():
                return
            results.append(probe(self.server.grpc_url, config, self.probe_timeout_s))
        failed = [r for r in results if not r.ok]
        for result in failed:
            self.log(f"[watchdog] probe failed: {result.line()}")
        self._timeouts = Counter({r.endpoint: self._timeouts[r.endpoint] + 1
                                  for r in failed if r.status.endswith(TIMEOUT)})
        self._window = {e: self._window.get(e, started) for e in self._timeouts}
        hung: set[str] = set()
        if any(n >= 2 for n in self._timeouts.values()):
            now = self.progress()
            for endpoint in [e for e, n in self._timeouts.items() if n >= 2]:
                steps = self._steps[endpoint]
                if stuck := hung_models(steps, self._window[endpoint], now):
                    hung.update(stuck)
                    continue
                # Slow, not hung: judged again on the next window, from now.
                self.log(f"[watchdog] {endpoint}: probes timed out while {', '.join(steps)} made progress "
                         f"(busy, not hung): no restart")
                self._timeouts[endpoint], self._window[endpoint] = 1, now
        models = sorted(models_named_unhealthy(failed) | hung)
        if models:
            self._reload(models, "probe: " + "; ".join(r.line() for r in failed), seen_at)
            self._timeouts.clear()
            self._window.clear()

    def _reload(self, models: list[str], reason: str, seen_at: float) -> None:
        with self._lock:
            # The other thread may have restarted these models since this one saw the failure.
            done = {m for r in self.recoveries if r.recovered_at and r.recovered_at > seen_at for m in r.models}
            models = [m for m in models if m not in done and "*" not in done]
            if self._stop.is_set() or not models:
                return
            recovery = Recovery(reason, models, time.monotonic())
            self.recoveries.append(recovery)
            self.log(f"[watchdog] {reason}: restarting {', '.join(models)}")
            replaced = [p for m in models for p in stub_processes(self.server.process.pid).get(m, [])]
            try:
                with grpcclient.InferenceServerClient(self.server.grpc_url) as client:
                    for model in models:
                        config = served_config(client, model)
                        config.parameters[RESTART_PARAMETER].string_value = f"{time.time():.6f}"
                        load_config(client, model, config)
            except Exception as exc:  # noqa: BLE001 - a failed reload falls back to a server restart
                recovery.error = str(exc)
                if not self.restart_server:
                    self.log(f"[watchdog] reloading {', '.join(models)} failed ({exc}); stopping tritonserver "
                             f"so that its supervisor restarts it")
                    self.server.process.terminate()
                    return
                self.log(f"[watchdog] reloading {', '.join(models)} failed ({exc}); restarting tritonserver")
                self._restart_server(locked=True)
                return
            self._deficits.clear()
            recovery.recovered_at = time.monotonic()
            self.log(f"[watchdog] {', '.join(models)} restarted in {recovery.seconds:.1f}s")
            if replaced:
                threading.Thread(target=self._end_replaced, args=(replaced,), name="hotpath-watchdog-replaced",
                                 daemon=True).start()

    def _end_replaced(self, stubs: list) -> None:
        """Kill the replaced stubs (psutil.Process: a reused PID is never hit) still alive after the grace."""
        _, alive = psutil.wait_procs(stubs, timeout=self.old_stub_grace_s)
        for proc in alive:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    proc.send_signal(signal.SIGKILL)
                    self.log(f"[watchdog] replaced stub {proc.pid} still alive {self.old_stub_grace_s:g}s after "
                             f"the restart (a request that never ends keeps the old version loaded): killed")
            except psutil.NoSuchProcess:
                continue

    def _restart_server(self, locked: bool = False) -> None:
        if not locked:
            with self._lock:
                return self._restart_server(locked=True)
        if self._stop.is_set():
            return
        recovery = Recovery("tritonserver exited", ["*"], time.monotonic())
        self.recoveries.append(recovery)
        self.log(f"[watchdog] tritonserver is gone (exit {self.server.process.poll()}); its log ended:\n"
                 f"{self.server.log_tail(20)}\n[watchdog] restarting tritonserver")
        try:
            self.server.stop()
            self.server.start()
        except Exception as exc:  # noqa: BLE001 - reported, retried on a later round
            recovery.error = str(exc)
            self.log(f"[watchdog] restart failed: {exc}; retrying in 10s")
            self._stop.wait(10)
            return
        self._deficits.clear()
        self._expected.clear()   # refilled from the new server's configs on the next census
        recovery.recovered_at = time.monotonic()
        self.log(f"[watchdog] tritonserver restarted in {recovery.seconds:.1f}s")
