"""Health that tells the truth, and recovery from a dead Python stub, against a real tritonserver.

Triton 2.51 keeps answering ready (200) after a stub is killed while every request to its model fails
("Stub process 'tokenizer_0_0' is not healthy"). The liveness probe (hotpath.health) must say so, and
the watchdog (hotpath.server.watchdog) must restart the model: kill -9 each stub under load, count
the failed requests and the time until the endpoint serves again.
"""

import os
import signal
import threading
import time
import urllib.request

import psutil
import pytest

from hotpath.health.__main__ import main as health_main
from hotpath.health.probe import endpoints, probe, read_configs
from hotpath.paths import model_repository
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.process import LocalTriton
from hotpath.server.stubs import STUB_BINARY, stub_census
from hotpath.server.watchdog import Watchdog

# Which endpoint's requests go through each model with a Python stub (on this server the ONNX models
# run in the Python ORT runner, so they have stubs too).
ENDPOINT_OF = {"tokenizer": "text_embedding_exact", "text_encoder": "text_embedding_exact",
               "text_embedding": "text_embedding", "image_preprocess": "image_classification",
               "image_classifier": "image_classification", "text_generation": "text_generation"}


@pytest.fixture(scope="module")
def server():
    http, grpc, metrics = free_ports(3)
    with LocalTriton(ports=ServerPorts(http=http, grpc=grpc, metrics=metrics), model_control="explicit") as s:
        yield s


@pytest.fixture(scope="module")
def configs():
    return {c.name: c for c in endpoints(read_configs(model_repository()))}


def _stub_pid(server: LocalTriton, model: str) -> int:
    for child in psutil.Process(server.process.pid).children():
        try:
            cmdline = child.cmdline()
        except psutil.NoSuchProcess:  # killed earlier: Triton leaves its stubs as zombies
            continue
        if cmdline and cmdline[0].endswith(STUB_BINARY) and f"/{model}/" in cmdline[1]:
            return child.pid
    raise AssertionError(f"no stub process for {model}")


def _ready(server: LocalTriton, model: str = "") -> int:
    url = f"http://{server.http_url}/v2" + (f"/models/{model}/ready" if model else "/health/ready")
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status
    except Exception as exc:  # noqa: BLE001 - any failure is "not 200"
        return getattr(exc, "code", 0)


def test_probe_fails_where_readiness_lies(server):
    """Without a watchdog: the stub is gone, ready still says 200, the probe says the truth."""
    assert health_main(["--url", server.grpc_url, "--repository", str(model_repository())]) == 0
    os.kill(_stub_pid(server, "tokenizer"), signal.SIGKILL)
    time.sleep(0.5)
    assert _ready(server) == 200 and _ready(server, "tokenizer") == 200, "Triton 2.51 changed: update the docs"
    assert health_main(["--url", server.grpc_url, "--repository", str(model_repository()), "--quiet"]) == 1


def test_watchdog_recovers_a_stub_found_dead_by_the_probe(server, configs):
    """Continues the test above: the tokenizer's stub is dead before the watchdog starts, so only the
    probe can find it (its error names the stub); the watchdog restarts the model."""
    guard = Watchdog(server, census_s=0.2, probe_s=0.5).start()
    try:
        deadline = time.monotonic() + 60
        while not any(r.recovered_at for r in guard.recoveries) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        guard.stop()
    assert [r.models for r in guard.recoveries] == [["tokenizer"]], guard.recoveries
    assert probe(server.grpc_url, configs["text_embedding_exact"]).ok


@pytest.mark.parametrize("model", sorted(ENDPOINT_OF))
def test_kill_each_stub_under_load_recovers(server, configs, model):
    endpoint = configs[ENDPOINT_OF[model]]
    guard = Watchdog(server, census_s=0.2, probe_s=2.0, log=lambda m: print(m, flush=True)).start()
    outcomes: list[tuple[float, bool]] = []
    stop = threading.Event()

    def load():  # closed loop, one request at a time, each one unique (no cache answers)
        while not stop.is_set():
            result = probe(server.grpc_url, endpoint, timeout_s=10)
            outcomes.append((time.monotonic(), result.ok))

    worker = threading.Thread(target=load)
    worker.start()
    try:
        time.sleep(1.0)
        before = stub_census(server.process.pid)[model]
        killed_at = time.monotonic()
        os.kill(_stub_pid(server, model), signal.SIGKILL)
        deadline = killed_at + 90
        while not (guard.recoveries and guard.recoveries[-1].recovered_at) and time.monotonic() < deadline:
            time.sleep(0.1)
        # Serving again: the first success after the recovery, then 1 s more of load.
        while time.monotonic() < deadline and not any(ok for t, ok in outcomes if t > killed_at
                                                      and guard.recoveries and guard.recoveries[-1].recovered_at):
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        stop.set()
        worker.join()
        guard.stop()
    assert guard.recoveries, f"{model}: the watchdog never noticed the dead stub"
    recovery = guard.recoveries[-1]
    assert recovery.models == [model] and recovery.recovered_at, recovery
    after = [ok for t, ok in outcomes if t > killed_at]
    first_ok = next((t for t, ok in outcomes if t > killed_at and ok), None)
    failed = after.count(False)
    serving_after_s = (first_ok - killed_at) if first_ok else float("inf")
    print(f"{model} via {endpoint.name}: detected {recovery.detected_at - killed_at:.2f}s after kill -9, "
          f"restarted in {recovery.seconds:.2f}s, serving again after {serving_after_s:.2f}s; "
          f"{failed} of {len(after)} requests failed since the kill")
    # All instances are back. (The replaced model's surviving stubs exit once it has unloaded: seconds
    # at idle, longer under load; a census counts them too, hence >=.)
    assert stub_census(server.process.pid)[model] >= before, "the model's stubs are not all back"
    assert recovery.detected_at - killed_at < 2.0, "the census should see a dead stub within a round or two"
    # The tail of the load succeeds, and failures stay those in flight around the kill and restart.
    assert after[-3:] == [True, True, True], after
    assert failed <= 5, f"{model}: {failed} failed requests"
    assert probe(server.grpc_url, endpoint).ok
