"""docker/entrypoint.sh on this machine: the local tritonserver binary, no GPU, production flags.

The repository holds a TensorRT model whose spec keeps a fallback (served by it here, since there
is no GPU) and, in the second test, one without (the start must fail before tritonserver runs).
"""

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.http as httpclient

from hotpath import paths
from hotpath.server.install import TritonInstall, prepare_backend_dir, server_environment
from hotpath.server.ports import free_ports
from tests import planrepo

ENTRYPOINT = paths.ROOT / "docker" / "entrypoint.sh"


def _start(repo, cache, ports, extra_env=None):
    install = TritonInstall.find()
    backends = prepare_backend_dir(install, paths.work_dir() / "backends")
    env = {**server_environment(install), "TRITONSERVER": str(install.binary), "MODEL_REPOSITORY": str(repo),
           "HOTPATH_CACHE_DIR": str(cache), "HTTP_PORT": str(ports[0]), "GRPC_PORT": str(ports[1]),
           "METRICS_PORT": str(ports[2]), "HOTPATH_CACHE_BYTES": "1048576", "HOTPATH_ADMIN_KEY": "s3cret",
           "HOTPATH_EXIT_TIMEOUT_SECS": "5", **(extra_env or {})}
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if "nvidia" not in p)  # no GPU tools
    args = [f"--backend-directory={backends}", f"--cache-directory={install.root / 'caches'}",
            "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1"]
    return subprocess.Popen(["bash", str(ENTRYPOINT), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _request(url, method="GET", headers=None):
    req = urllib.request.Request(url, method=method, headers=headers or {}, data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, ConnectionError):
        return 0


def _ready(proc, base):
    deadline = time.monotonic() + 120
    while _request(f"{base}/v2/health/ready") != 200:
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            pytest.fail(f"entrypoint did not become ready:\n{proc.stdout.read()}")
        time.sleep(0.25)


def _kill(proc):
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@pytest.fixture
def served(tmp_path):
    ports = free_ports(3)
    proc = _start(planrepo.make_repository(tmp_path), tmp_path / "cache", ports)
    base = f"http://127.0.0.1:{ports[0]}"
    _ready(proc, base)
    yield proc, ports, base
    _kill(proc)


def test_entrypoint_serves_the_fallback_without_gpu_and_restricts_admin_apis(served):
    proc, ports, base = served
    client = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    inp = httpclient.InferInput("X", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    np.testing.assert_array_equal(client.infer("scaler", [inp]).as_numpy("Y"), x * 2)
    assert client.is_model_ready("echo")
    client.close()  # an open keep-alive connection would hold the drain below until its timeout
    # The repository API (explicit model control, for the watchdog's reloads) needs the admin key.
    assert _request(f"{base}/v2/repository/index", "POST") == 403
    assert _request(f"{base}/v2/repository/index", "POST", {"admin-key": "s3cret"}) == 200
    assert _request(f"{base}/v2/repository/models/echo/unload", "POST") == 403
    assert _request(f"{base}/v2/systemsharedmemory/status") == 403
    assert _request(f"{base}/v2/models/stats") == 403   # the list of hotpath.server.admin.RESTRICTED
    assert _request(f"{base}/v2/models/stats", headers={"admin-key": "s3cret"}) == 200
    assert _request(f"{base}/v2/models/scaler/config") == 200
    # SIGTERM reaches tritonserver (the supervisor forwards it): it drains within HOTPATH_EXIT_TIMEOUT_SECS
    # and exits 0, and so does the container's main process.
    os.killpg(proc.pid, signal.SIGTERM)
    code = proc.wait(timeout=30)
    out = proc.stdout.read()
    assert code == 0, out[-3000:]
    assert "[startup] scaler: onnx fallback (no GPU)" in out


def test_entrypoint_reads_the_admin_key_from_a_file(tmp_path):
    key_file = tmp_path / "admin-key"
    key_file.write_text(" from-a-secret\r\n")   # surrounding whitespace (CRLF) is not part of the key
    ports = free_ports(3)
    proc = _start(planrepo.make_repository(tmp_path), tmp_path / "cache", ports,
                  {"HOTPATH_ADMIN_KEY": "", "HOTPATH_ADMIN_KEY_FILE": str(key_file)})
    base = f"http://127.0.0.1:{ports[0]}"
    try:
        _ready(proc, base)
        assert _request(f"{base}/v2/models/stats") == 403
        assert _request(f"{base}/v2/models/stats", headers={"admin-key": "s3cret"}) == 403
        assert _request(f"{base}/v2/models/stats", headers={"admin-key": "from-a-secret"}) == 200
    finally:
        _kill(proc)


def test_entrypoint_fails_fast_when_a_plan_only_model_meets_no_gpu(tmp_path):
    repo = planrepo.make_repository(tmp_path, onnx_fallback=False)
    t0 = time.monotonic()
    proc = _start(repo, tmp_path / "cache", free_ports(3))
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2, out
    assert "error: scaler: needs a GPU (TensorRT plans only; its spec keeps no ONNX fallback)" in out
    assert "Started GRPCInferenceService" not in out and time.monotonic() - t0 < 30
    assert not (tmp_path / "cache" / "tritonserver.args").exists()
    json.loads((repo / "scaler" / "configs" / "tensorrt.build.json").read_text())  # the recipe it judged by


def _tritonserver_pid(proc) -> int:
    import psutil

    (server,) = [c for c in psutil.Process(proc.pid).children(recursive=True) if c.name() == "tritonserver"]
    return server.pid


def _echo(client) -> bool:
    x = np.ones((1, 4), dtype=np.float32)
    inp = httpclient.InferInput("X", [1, 4], "FP32")
    inp.set_data_from_numpy(x)
    try:
        return bool((client.infer("echo", [inp]).as_numpy("Y") == 2).all())
    except Exception:  # noqa: BLE001 - a failed request is what is counted
        return False


def test_a_killed_stub_is_repaired_under_the_entrypoint(served):
    """The container runs tritonserver under hotpath's watchdog (hotpath.server.supervise): a stub killed
    with SIGKILL is found by the census and its model reloaded, with no restart of the container."""
    from hotpath.server.stubs import stub_pids

    proc, ports, base = served
    client = httpclient.InferenceServerClient(f"127.0.0.1:{ports[0]}")
    assert _echo(client)
    server_pid = _tritonserver_pid(proc)
    (stub,) = stub_pids(server_pid, "echo")
    os.kill(stub, signal.SIGKILL)
    killed_at, failed, sent, recovered_at = time.monotonic(), 0, 0, None
    while recovered_at is None and time.monotonic() - killed_at < 60:
        sent += 1
        if not _echo(client):
            failed += 1
        elif [p for p in stub_pids(server_pid, "echo") if p != stub]:
            recovered_at = time.monotonic()   # answered by the reloaded model's new stub
        time.sleep(0.05)
    client.close()
    if recovered_at is None:
        _kill(proc)
        pytest.fail(f"echo never answered from a new stub ({failed} of {sent} failed):\n{proc.stdout.read()[-4000:]}")
    assert proc.poll() is None and _tritonserver_pid(proc) == server_pid, "repaired in place, not restarted"
    print(f"stub killed: {failed} of {sent} requests failed; serving again after {recovered_at - killed_at:.1f}s")
    assert recovered_at - killed_at < 30


def test_the_container_exits_when_tritonserver_dies(served):
    """What the watchdog cannot repair ends the container (its orchestrator starts a new one)."""
    proc, _, _ = served
    os.kill(_tritonserver_pid(proc), signal.SIGKILL)
    assert proc.wait(timeout=30) == 128 + signal.SIGKILL
    assert "exiting so that the orchestrator restarts the container" in proc.stdout.read()


def test_tuned_values_from_other_hardware_are_foreign_and_this_hosts_apply(tmp_path):
    from hotpath.tuning.hardware_key import HardwareKey
    from hotpath.tuning.tuned_values import TunedValues

    repo, cache = planrepo.make_repository(tmp_path), tmp_path / "cache"
    cache.mkdir()
    other = HardwareKey("a CPU this is not", ("avx2", "avx512f"), 96, "NVIDIA H200")
    TunedValues(other, {"scaler": {"instance_count": 3}}, "then").save(cache / "tuned.json")
    ports = free_ports(3)
    proc = _start(repo, cache, ports)
    try:
        _ready(proc, f"http://127.0.0.1:{ports[0]}")
        config = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/v2/models/scaler/config").read())
        assert sum(g["count"] for g in config["instance_group"]) != 3   # the committed default is served
    finally:
        _kill(proc)
    out = proc.stdout.read()
    assert "FOREIGN" in out and "a CPU this is not" in out and "hotpath tune --quick" in out
    # Measured here (HOTPATH_TUNE_AT_START=quick keeps a file measured on this host): applied.
    TunedValues(HardwareKey.detect(), {"scaler": {"instance_count": 3}}, "now").save(cache / "tuned.json")
    ports = free_ports(3)
    proc = _start(repo, cache, ports, {"HOTPATH_TUNE_AT_START": "quick"})
    try:
        _ready(proc, f"http://127.0.0.1:{ports[0]}")
        config = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{ports[0]}/v2/models/scaler/config").read())
        assert sum(g["count"] for g in config["instance_group"]) == 3
    finally:
        _kill(proc)
    out = proc.stdout.read()
    assert "measured on this host" in out and "FOREIGN" not in out
    assert (repo / "scaler" / "config.pbtxt").read_text().count("count: 3") == 0   # the image's repository untouched
