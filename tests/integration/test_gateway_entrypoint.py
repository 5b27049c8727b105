"""docker/gateway/entrypoint.sh on this machine, as the gateway image runs it (its environment: HOTPATH_TENANTS_FILE,
HOTPATH_MODEL_REPOSITORY, HOTPATH_REDIS_URL), in front of the session's real tritonserver with a local
redis-server: a tenant's token is served and a call without one refused, an edited tenants file is served after
SIGHUP, SIGTERM stops everything; no tenants file, no start (exit 2). `python3` is this venv's (the image's
/usr/local/bin/python3 with docker/gateway/requirements.txt); the extra arguments after the entrypoint's own
stand where the image's CMD does (a later flag wins: --listen 127.0.0.1 instead of the container's 0.0.0.0)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from hotpath import paths, settings
from hotpath.client import EmbeddingClient, UnauthenticatedError
from hotpath.gateway.tenants import new_token
from hotpath.server.ports import free_ports
from hotpath.shared_state.server import LocalRedis

ENTRYPOINT = paths.ROOT / "docker" / "gateway" / "entrypoint.sh"
TEXTS = ["a cat sits on the mat", "Низкая задержка"]


def _write_tenants(path: Path, **tokens: str) -> None:
    """The file as a Secret's update leaves it: replaced whole (a new file renamed over the old)."""
    fresh = path.with_suffix(".new")
    fresh.write_text("".join(f'[tenants.{name}]\ntoken = "{token}"\n' for name, token in tokens.items()))
    fresh.chmod(0o600)
    fresh.replace(path)


def _environment(tenants: Path, repository: Path, ports: dict[str, int], redis_url: str = "") -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTPATH_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update({"HOTPATH_TENANTS_FILE": str(tenants), "HOTPATH_MODEL_REPOSITORY": str(repository),
                **({"HOTPATH_REDIS_URL": redis_url} if redis_url else {}),
                **{getattr(settings, f"gateway_{door}_port").name: str(port) for door, port in ports.items()}})
    return env


class Output:
    """The entrypoint's output lines, read by a thread as they come."""

    def __init__(self, process: subprocess.Popen):
        self.process, self.lines = process, []
        self.reader = threading.Thread(target=lambda: self.lines.extend(process.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, needle: str, timeout_s: float) -> str:
        """The first line from here on holding `needle`."""
        start, deadline = len(self.lines), time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = [line for line in self.lines[start:] if needle in line]
            if found:
                return found[0]
            if self.process.poll() is not None and not self.reader.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} (exit {self.process.poll()}):\n" + "".join(self.lines[-40:]))


def _http_infer(port: int, headers: dict | None = None):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{port}")
    text = httpclient.InferInput("TEXT", [1, 1], "BYTES")   # a batch of one text
    text.set_data_from_numpy(np.array([[TEXTS[0].encode()]], dtype=object))
    try:
        return client.infer("text_embedding", [text], headers=headers).as_numpy("EMBEDDING")[0]
    except InferenceServerException as exc:
        return int(exc.status())
    finally:
        client.close()


def test_the_gateway_entrypoint_serves_tenants_reloads_on_sighup_and_stops_on_sigterm(triton, tmp_path):
    acme, newco = new_token(), new_token()
    tenants = tmp_path / "secret" / "tenants.toml"
    tenants.parent.mkdir()
    _write_tenants(tenants, acme=acme)
    ports = dict(zip(("http", "grpc", "openai", "status"), free_ports(4)))
    with LocalRedis() as redis:
        env = _environment(tenants, triton.repository, ports, redis.target.url)
        process = subprocess.Popen(["bash", str(ENTRYPOINT), "--listen", "127.0.0.1", "--grpc-upstream", triton.grpc_url,
                                    "--http-upstream", triton.http_url], env=env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True, start_new_session=True)
        output = Output(process)
        try:
            started = output.wait_for("[gateway] gRPC", 120)
            assert f"gRPC 127.0.0.1:{ports['grpc']}" in started and f"shared in {redis.target.url}" in started
            assert "1 tenant(s)" in started
            gateway = psutil.Process(process.pid)   # bash exec'd the gateway: the signals below reach it
            assert gateway.cmdline()[1:5] == ["-m", "hotpath.gateway", "serve", "--listen"]

            with EmbeddingClient(triton.grpc_url) as direct:
                expected = direct.embed(TEXTS)
            with EmbeddingClient(f"127.0.0.1:{ports['grpc']}", token=acme) as client:
                np.testing.assert_allclose(client.embed(TEXTS), expected, atol=1e-5)
            np.testing.assert_allclose(_http_infer(ports["http"], {"authorization": f"Bearer {acme}"}), expected[0],
                                       atol=1e-5)
            assert redis.target.client().exists("hotpath:rate:acme")   # the quota is the fleet's, in that Redis
            for token in ("", newco):
                with EmbeddingClient(f"127.0.0.1:{ports['grpc']}", token=token or None) as client:
                    with pytest.raises(UnauthenticatedError):
                        client.embed(TEXTS)
                assert _http_infer(ports["http"], {"authorization": f"Bearer {token}"} if token else None) == 401
            with urllib.request.urlopen(f"http://127.0.0.1:{ports['status']}/health", timeout=5) as r:
                assert json.loads(r.read()) == {"status": "ok", "redis": "up"}

            # A second tenant: the file replaced (a Secret's update), then SIGHUP; the first stays served.
            _write_tenants(tenants, acme=acme, newco=newco)
            process.send_signal(signal.SIGHUP)
            output.wait_for("[gateway] reloaded: 2 tenant(s)", 60)
            for token in (newco, acme):
                with EmbeddingClient(f"127.0.0.1:{ports['grpc']}", token=token) as client:
                    np.testing.assert_allclose(client.embed(TEXTS), expected, atol=1e-5)

            nginx = [p for p in gateway.children(recursive=True) if p.name() == "nginx"]
            assert nginx
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, "".join(output.lines[-40:])
            _, alive = psutil.wait_procs(nginx, timeout=10)
            assert not alive, f"NGINX outlived the gateway: {alive}"
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def test_the_gateway_entrypoint_refuses_to_start_without_a_tenants_file(tmp_path):
    missing = tmp_path / "not-mounted" / "tenants.toml"
    env = _environment(missing, paths.model_repository(), dict(zip(("http", "grpc", "openai", "status"),
                                                                   free_ports(4))))
    run = subprocess.run(["bash", str(ENTRYPOINT)], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert run.stderr.startswith(f"error: no readable tenants file at {missing} (HOTPATH_TENANTS_FILE)")
    assert "Traceback" not in run.stderr
