"""The front door's command lines, run as users run them: `python -m hotpath.gateway serve` with every door
(gRPC, HTTP, OpenAI) in front of a real tritonserver and its OpenAI API, and `hotpath serve --tenants`, the
development server in the production shape."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import openai
import psutil
import pytest
import tritonclient.http as httpclient

from hotpath import settings
from hotpath.client import EmbeddingClient, UnauthenticatedError
from hotpath.gateway.tenants import new_token
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked

TEXTS = ["a cat sits on the mat", "Низкая задержка", "低延迟推理"]


def _tenants_file(tmp_path: Path, **tokens: str) -> Path:
    path = tmp_path / "tenants.toml"
    path.write_text("".join(f'[tenants.{name}]\ntoken = "{token}"\n' for name, token in tokens.items()))
    path.chmod(0o600)
    return path


class Output:
    """A command's output lines, read as they come by a thread of their own."""

    def __init__(self, process: subprocess.Popen):
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(process.stdout,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, needle: str, process: subprocess.Popen, timeout_s: float) -> str:
        """The output up to the first line holding `needle` (fails when the command exits or time runs out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i, line in enumerate(self.lines):
                if needle in line:
                    return "\n".join(self.lines[:i + 1])
            if process.poll() is not None and not self._thread.is_alive():
                break
            time.sleep(0.1)
        raise AssertionError(f"no {needle!r} (exit {process.poll()}):\n" + "\n".join(self.lines[-40:]))


def _stop(process: subprocess.Popen, sig: int = signal.SIGTERM) -> list[psutil.Process]:
    """Stop the command with `sig`; its descendants that outlived it (none expected)."""
    children = psutil.Process(process.pid).children(recursive=True)
    process.send_signal(sig)
    assert process.wait(timeout=60) == 0
    _, alive = psutil.wait_procs(children, timeout=10)
    for p in alive:
        p.kill()
    return alive


@pytest.fixture(scope="module")
def api(triton):
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository) as server:
        yield server


def test_gateway_command_opens_every_door(triton, api, tmp_path):
    """`python -m hotpath.gateway serve --openai-upstream ...`: the gRPC, HTTP and OpenAI doors answer a tenant
    with the server's own answer and refuse a caller without a token; SIGTERM leaves no NGINX behind."""
    token = new_token()
    grpc_port, http_port, openai_port, status_port = free_ports(4)
    command = [sys.executable, "-m", "hotpath.gateway", "serve", "--tenants", str(_tenants_file(tmp_path, acme=token)),
               "--grpc-upstream", triton.grpc_url, "--http-upstream", triton.http_url,
               "--openai-upstream", f"{api.host}:{api.port}", "--grpc-port", str(grpc_port),
               "--http-port", str(http_port), "--openai-port", str(openai_port), "--status-port", str(status_port)]
    env = {**os.environ, "HOTPATH_MODEL_REPOSITORY": str(triton.repository)}
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = Output(process).wait_for("[gateway] gRPC", process, 60)
        assert f"OpenAI http://127.0.0.1:{openai_port}/v1" in out.splitlines()[-1]
        with EmbeddingClient(triton.grpc_url) as direct:
            expected = direct.embed(TEXTS)
        with EmbeddingClient(f"127.0.0.1:{grpc_port}", token=token) as client:
            np.testing.assert_allclose(client.embed(TEXTS), expected, atol=1e-5)
        with EmbeddingClient(f"127.0.0.1:{grpc_port}", token="not-a-tenant") as client:
            with pytest.raises(UnauthenticatedError):
                client.embed(TEXTS)
        http = httpclient.InferenceServerClient(f"127.0.0.1:{http_port}")
        text = httpclient.InferInput("TEXT", [1, 1], "BYTES")
        text.set_data_from_numpy(np.array([[TEXTS[0].encode()]], dtype=object))
        answer = http.infer("text_embedding", [text], headers={"authorization": f"Bearer {token}"})
        np.testing.assert_allclose(answer.as_numpy("EMBEDDING")[0], expected[0], atol=1e-5)
        base = f"http://127.0.0.1:{openai_port}/v1"
        with openai.OpenAI(base_url=base, api_key=token, max_retries=0) as sdk:
            vectors = [d.embedding for d in sdk.embeddings.create(model="text_embedding", input=TEXTS).data]
            np.testing.assert_allclose(vectors, expected, atol=1e-4)
        with openai.OpenAI(base_url=base, api_key="not-a-tenant", max_retries=0) as sdk:
            with pytest.raises(openai.AuthenticationError):
                sdk.embeddings.create(model="text_embedding", input="x")
        with urllib.request.urlopen(f"http://127.0.0.1:{status_port}/health", timeout=5) as r:
            assert r.status == 200
    finally:
        alive = _stop(process) if process.poll() is None else []
    assert not alive, f"outlived the gateway: {alive}"


def test_gateway_command_refuses_upstreams_that_do_not_pair(tmp_path):
    run = subprocess.run([sys.executable, "-m", "hotpath.gateway", "serve", "--tenants",
                          str(_tenants_file(tmp_path, acme=new_token())), "--grpc-upstream", "127.0.0.1:1",
                          "--grpc-upstream", "127.0.0.1:2", "--http-upstream", "127.0.0.1:3"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and "one --http-upstream per --grpc-upstream" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.timeout(600)
def test_hotpath_serve_with_tenants_puts_the_gateway_in_front(built_repository, tmp_path):
    """`hotpath serve --tenants FILE --demo`: the demo's requests go through the gateway's gRPC and OpenAI doors
    with the file's first tenant; a call without a token is refused there; Ctrl-C stops every process."""
    token = new_token()
    (tmp_path / "repo").mkdir()
    repository = linked(["text_embedding", "sentence_embedder"], tmp_path / "repo",
                        built_repository)
    http, grpc, metrics, api_port, gw_http, gw_grpc, gw_openai, gw_status = free_ports(8)
    env = {**os.environ, settings.gateway_http_port.name: str(gw_http), settings.gateway_grpc_port.name: str(gw_grpc),
           settings.gateway_openai_port.name: str(gw_openai), settings.gateway_status_port.name: str(gw_status)}
    hotpath = Path(sys.executable).parent / "hotpath"
    process = subprocess.Popen([str(hotpath), "serve", "--repository", str(repository), "--http-port", str(http),
                                "--grpc-port", str(grpc), "--metrics-port", str(metrics), "--openai-port", str(api_port),
                                "--tenants", str(_tenants_file(tmp_path, first=token, second=new_token())), "--demo",
                                "--no-watchdog"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        out = Output(process).wait_for("[serve] serving", process, 480)
        assert f"[serve] gateway gRPC 127.0.0.1:{gw_grpc}" in out
        assert f"[demo] gRPC request to text_embedding at 127.0.0.1:{gw_grpc}" in out
        assert f"[demo] OpenAI-compatible API, base URL http://127.0.0.1:{gw_openai}/v1" in out
        request = urllib.request.Request(f"http://127.0.0.1:{gw_openai}/v1/embeddings",
                                         json.dumps({"model": "text_embedding", "input": "x"}).encode(),
                                         {"content-type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 401
    finally:
        alive = _stop(process, signal.SIGINT) if process.poll() is None else []
    assert not alive, f"outlived hotpath serve: {alive}"
