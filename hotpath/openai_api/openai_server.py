"""The API process beside a tritonserver: started after the server is ready, stopped before it, and never
outliving the process that started it (`--exit-with-parent`: hotpath.runtime.lifetime's watchers)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hotpath import paths
from hotpath.errors import ServerError
from hotpath.shutdown import stop_process


class OpenAIServer:
    """`python -m hotpath.openai_api` on `host:port`, calling tritonserver at `grpc_url`."""

    def __init__(self, grpc_url: str, port: int, repository: Path | None = None, host: str = "127.0.0.1",
                 aliases: list[str] | None = None, extra_args: list[str] | None = None, env: dict | None = None):
        self.grpc_url, self.port, self.host = grpc_url, port, host
        self.repository = Path(repository or paths.model_repository())
        self.aliases = aliases or []
        self.extra_args = extra_args or []
        self.env = env
        self.process: subprocess.Popen | None = None
        self.log_path = paths.work_dir() / "logs" / f"openai-api-{port}.log"

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def health(self) -> tuple[int, dict]:
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.port}/health", timeout=2) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read())
            except ValueError:
                return e.code, {}
        except (urllib.error.URLError, ConnectionError, OSError):
            return 0, {}

    def start(self, timeout_s: float = 120.0) -> "OpenAIServer":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "hotpath.openai_api", "--grpc-url", self.grpc_url, "--repository",
               str(self.repository), "--host", self.host, "--port", str(self.port), "--exit-with-parent",
               *(a for alias in self.aliases for a in ("--alias", alias)), *self.extra_args]
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            env=self.env)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"the OpenAI API exited ({self.process.returncode}):\n{self.log_tail()}")
            if self.health()[0] == 200:
                return self
            time.sleep(0.2)
        status, body = self.health()
        self.stop()
        raise ServerError(f"the OpenAI API not healthy after {timeout_s:.0f}s ({status} {body}):\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, timeout_s: float = 10.0) -> None:
        stop_process(self.process, signal.SIGTERM, timeout_s)

    def __enter__(self) -> "OpenAIServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
