"""One tritonserver process on loopback: stage the repository, start, wait until ready, stop."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import ServerError
from hotpath.runtime.timing import ENV as STUB_TIMING_ENV
from hotpath.server.admin import admin_key
from hotpath.server.command import TritonCommand, cache_bytes_from_env, exit_timeout_from_env
from hotpath.server.install import TritonInstall, prepare_backend_dir, server_environment
from hotpath.server.ports import ServerPorts, port_is_free
from hotpath.server.staging import stage_repository
from hotpath.shutdown import stop_process

Log = Callable[[str], None]
logger = logging.getLogger(__name__)


class LocalTriton:
    """Start, wait for and stop one tritonserver process on loopback."""

    def __init__(self, repository: Path | None = None, ports: ServerPorts | None = None,
                 ort_threads: int | None = None, model_control: str = "none",
                 extra_args: list[str] | None = None, cache_bytes: int | None = None, log: Log | None = None,
                 stub_timing: bool = False, exit_timeout_s: int | None = None):
        self.repository = Path(repository or paths.model_repository())
        self.ports = ports or ServerPorts()
        self.ort_threads = ort_threads
        self.model_control = model_control
        self.extra_args = extra_args or []
        # Response cache for models whose config enables it (local cache implementation).
        self.cache_bytes = cache_bytes if cache_bytes is not None else cache_bytes_from_env()
        self.log = log or logger.info   # a callable of its own: some callers silence or redirect it
        # After SIGTERM tritonserver waits this long for in-flight requests and model unloads, then exits.
        self.exit_timeout_s = exit_timeout_s if exit_timeout_s is not None else exit_timeout_from_env()
        # Per-execute() timestamps from the Python stubs (hotpath.runtime.timing), for perf --explain.
        self.stub_timing_dir: Path | None = None
        if stub_timing:
            self.stub_timing_dir = paths.work_dir() / "stub-timing" / str(self.ports.grpc)
        self.trace_file: Path | None = None
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.staged: Path | None = None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.ports.grpc}"

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.ports.http}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.metrics}/metrics"

    def start(self, timeout: float = 180.0) -> "LocalTriton":
        from hotpath.specs.preflight import check_repository

        problems = check_repository(self.repository)
        if problems:
            raise ServerError(f"model repository {self.repository} is not ready:\n  " + "\n  ".join(problems))
        for name, port in vars(self.ports).items():
            if not port_is_free(port):
                raise ServerError(f"{name} port {port} is in use; pass --{name}-port or set "
                                  f"HOTPATH_{name.upper()}_PORT")
        install = TritonInstall.find()
        work = paths.work_dir()
        backends = prepare_backend_dir(install, work / "backends")
        (work / "staged").mkdir(parents=True, exist_ok=True)
        (work / "logs").mkdir(parents=True, exist_ok=True)
        self.staged = Path(tempfile.mkdtemp(prefix=f"repo-{self.ports.grpc}-", dir=work / "staged"))
        models = stage_repository(self.repository, self.staged, self.ort_threads, self.log)
        self.log_path = work / "logs" / f"tritonserver-{self.ports.grpc}.log"
        self.trace_file = work / "traces" / f"trace-{self.ports.grpc}.json"
        self.trace_file.parent.mkdir(parents=True, exist_ok=True)
        cmd = TritonCommand(
            binary=str(install.binary), repository=str(self.staged), backend_dir=str(backends),
            cache_dir=str(install.root / "caches"), http_port=self.ports.http, grpc_port=self.ports.grpc,
            metrics_port=self.ports.metrics, address="127.0.0.1", admin_key=admin_key(),
            model_control=self.model_control, exit_timeout_s=self.exit_timeout_s, cache_bytes=self.cache_bytes,
            trace_file=str(self.trace_file), extra=self.extra_args).args()
        env = server_environment(install)
        if self.stub_timing_dir:
            shutil.rmtree(self.stub_timing_dir, ignore_errors=True)
            env[STUB_TIMING_ENV] = str(self.stub_timing_dir)
        self.log(f"[serve] starting tritonserver with {len(models)} model(s); log: {self.log_path}")
        with open(self.log_path, "wb") as logfile:
            self.process = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)
        self.wait_ready(timeout)
        return self

    def is_ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.http_url}/v2/health/ready", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, ConnectionError, OSError):
            return False

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def wait_ready(self, timeout: float) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.process and self.process.poll() is not None:
                raise ServerError(f"tritonserver exited with code {self.process.returncode}:\n{self.log_tail()}")
            if self.is_ready():
                self.log(f"[serve] ready in {time.monotonic() - t0:.1f}s")
                return
            time.sleep(0.25)
        self.stop()
        raise ServerError(f"tritonserver not ready after {timeout:.0f}s:\n{self.log_tail()}")

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM (tritonserver drains and unloads within its exit timeout), SIGKILL if it overstays."""
        stop_process(self.process, signal.SIGTERM, timeout if timeout is not None else self.exit_timeout_s + 10)
        if self.staged and self.staged.exists():
            shutil.rmtree(self.staged, ignore_errors=True)

    def __enter__(self) -> "LocalTriton":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def local_server(url: str | None, model_control: str = "explicit", stub_timing: bool = False):
    """An existing server at `url` (yields None), or a LocalTriton on free ports for the duration."""
    if url:
        yield None
        return
    from hotpath.server.ports import free_ports

    http, grpc, metrics = free_ports(3)
    with LocalTriton(ports=ServerPorts(http, grpc, metrics), model_control=model_control,
                     stub_timing=stub_timing) as server:
        yield server


@contextlib.contextmanager
def server_url(url: str | None, model_control: str = "explicit"):
    """`url` as it is, or the gRPC address of a local server started for the duration."""
    with local_server(url, model_control) as server:
        yield url or server.grpc_url
