"""No stub outlives its job, and the watchdog tells dead from busy, against real tritonservers.

- A SIGKILLed tritonserver leaves no Python stub behind (hotpath.runtime.lifetime): each exits by
  itself, also while the dead server is an unreaped zombie (Triton's own check takes it for alive).
- A hung stub (execute() asleep, alive and "healthy" to Triton) is restarted by the watchdog, and the
  replaced stub is gone within 10 s (Triton alone would wait for its execute() forever).
- Under load that makes every probe time out, the models make progress, so nothing is restarted.
"""

import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from hotpath.health.probe import endpoint_configs, probe
from hotpath.paths import model_repository
from hotpath.repository import Repository
from hotpath.repository_build import build_repository
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.process import LocalTriton
from hotpath.server.stubs import STUB_BINARY, stub_pids
from hotpath.server.subset import linked
from hotpath.server.watchdog import Watchdog

HANG_ECHO = Path(__file__).parent / "models" / "hang_echo"
# Every model with a Python stub on this server (the ONNX ones run in the Python ORT runner).
STUB_MODELS = ["tokenizer", "text_encoder", "sentence_embedder", "image_preprocess", "image_classifier",
               "text_generation"]
BOUND_S = 10.0


def _server(repository: Path, **kwargs) -> LocalTriton:
    return LocalTriton(repository, ServerPorts(*free_ports(3)), log=lambda m: None, **kwargs)


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait_gone(procs: list[psutil.Process], bound_s: float) -> tuple[float, list[int]]:
    """Seconds until every process is gone (or the bound), and the PIDs still alive then."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s and any(_alive(p) for p in procs):
        time.sleep(0.05)
    return time.monotonic() - t0, [p.pid for p in procs if _alive(p)]


@pytest.fixture(scope="module")
def built() -> Path:
    build_repository()  # incremental: does nothing when `make engines` already ran
    return model_repository()


def test_stubs_exit_when_tritonserver_is_killed(built):
    server = _server(linked(STUB_MODELS, repository=built)).start()
    try:
        stubs = [p for p in psutil.Process(server.process.pid).children()
                 if p.cmdline() and p.cmdline()[0].endswith(STUB_BINARY)]
        assert len(stubs) >= len(STUB_MODELS), [p.cmdline()[-2:] for p in stubs]
        regions = [Path("/dev/shm") / p.cmdline()[2].lstrip("/") for p in stubs]
        rss_mb = sum(p.memory_info().rss for p in stubs) / 2**20
        server.process.kill()
        # Not reaped on purpose: a crashed server's parent may not wait() for it (a zombie until then).
        took, alive = _wait_gone(stubs, BOUND_S)
        left = [r.name for r in regions if r.exists()]
    finally:
        server.stop()
        for proc in stubs:   # what the assertion below reports must not stay behind either
            if _alive(proc):
                proc.kill()
    assert not alive, f"stubs {alive} still alive {BOUND_S:g}s after tritonserver was killed"
    assert not left, f"shared-memory regions left in /dev/shm: {left}"
    print(f"\n{len(stubs)} stubs ({rss_mb:.0f} MB RSS) gone {took:.2f}s after SIGKILL of tritonserver")


@pytest.fixture
def hang_repository(tmp_path):
    shutil.copytree(HANG_ECHO, tmp_path / "hang_echo")
    return tmp_path


def test_a_hung_stub_is_restarted_and_its_old_stub_is_gone(hang_repository):
    with _server(hang_repository, model_control="explicit") as server:
        guard = Watchdog(server, census_s=0.5, probe_s=0.5, probe_timeout_s=1.0,
                         log=lambda m: print(m, flush=True))
        (hung,) = stub_pids(server.process.pid, "hang_echo")
        old = psutil.Process(hung)
        (hang_repository / "hang_echo" / "hang").write_text(str(hung))
        guard.start()
        try:
            deadline = time.monotonic() + 60
            while not any(r.recovered_at for r in guard.recoveries) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert [r.models for r in guard.recoveries] == [["hang_echo"]], guard.recoveries
            recovery = guard.recoveries[0]
            took, alive = _wait_gone([old], BOUND_S)
            config = {c.name: c for c in endpoint_configs(Repository(hang_repository))}["hang_echo"]
            answered = probe(server.grpc_url, config, timeout_s=5)
        finally:
            guard.stop()
    assert recovery.reason.startswith("probe:") and "DEADLINE_EXCEEDED" in recovery.reason, recovery.reason
    assert not alive, f"the replaced hung stub {hung} is alive {BOUND_S:g}s after the restart"
    assert answered.ok, answered.line()
    print(f"\nhung stub restarted in {recovery.seconds:.1f}s; old stub gone {took:.1f}s after the restart")


def test_probe_timeouts_under_load_restart_nothing(built):
    """Closed-loop load on text_embedding makes every probe wait past its (shrunk) timeout; the model
    serves all along, so the watchdog must not restart it (before: restarted after two timeouts)."""
    repository = linked(["sentence_embedder", "text_embedding"], repository=built)
    with _server(repository, model_control="explicit") as server:
        configs = {c.name: c for c in endpoint_configs(Repository(repository))}
        lines: list[str] = []
        guard = Watchdog(server, census_s=0.5, probe_s=0.5, probe_timeout_s=0.01, log=lines.append)
        stop, outcomes = threading.Event(), Counter()

        def load():
            while not stop.is_set():
                outcomes[probe(server.grpc_url, configs["text_embedding"], timeout_s=30).status] += 1

        workers = [threading.Thread(target=load) for _ in range(4)]
        for worker in workers:
            worker.start()
        try:
            time.sleep(1.0)
            guard.start()
            deadline = time.monotonic() + 60
            while (sum("made progress (busy, not hung)" in line for line in lines) < 3
                   and not guard.recoveries and time.monotonic() < deadline):
                time.sleep(0.2)
        finally:
            guard.stop()
            stop.set()
            for worker in workers:
                worker.join()
    timeouts = [line for line in lines if line.startswith("[watchdog] probe failed: text_embedding:")
                and "DEADLINE_EXCEEDED" in line]
    assert guard.recoveries == [], "\n".join(lines)
    assert len(timeouts) >= 4, "the load never made the probe time out: nothing was tested\n" + "\n".join(lines)
    assert set(outcomes) == {"OK"}, outcomes
    print(f"\n{len(timeouts)} probe timeouts under load, {sum(outcomes.values())} requests served, no restart")
