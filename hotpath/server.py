"""A local tritonserver: the real Triton 2.51 binary shipped in the nvidia-pytriton wheel.

That binary carries only the Python backend (and ensembles, which are core). `stage_repository`
therefore serves a staged copy of the repository in which models configured for the native
onnxruntime backend run through python_backends/onnxruntime_runner instead; every substitution is
logged, and the repository itself is never rewritten.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tritonclient.grpc import model_config_pb2 as mc

from hotpath import paths
from hotpath.config import read_config, to_pbtxt
from hotpath.errors import ServerError

Log = Callable[[str], None]


def _print(message: str) -> None:
    print(message, flush=True)


@dataclass
class ServerPorts:
    http: int = 8000
    grpc: int = 8001
    metrics: int = 8002


@dataclass
class TritonInstall:
    """Where the nvidia-pytriton wheel keeps the server and its Python backend."""

    root: Path

    @classmethod
    def find(cls) -> "TritonInstall":
        try:
            import pytriton
        except ImportError:
            raise ServerError("nvidia-pytriton is not installed; run `make setup`") from None
        root = Path(pytriton.__file__).parent / "tritonserver"
        if not (root / "bin" / "tritonserver").exists():
            raise ServerError(f"no tritonserver binary under {root}")
        return cls(root)

    @property
    def binary(self) -> Path:
        return self.root / "bin" / "tritonserver"

    @property
    def libs(self) -> Path:
        return self.root.parent.parent / "nvidia_pytriton.libs"

    @property
    def stub(self) -> Path:
        version = f"{sys.version_info.major}.{sys.version_info.minor}"
        return self.root / "python_backend_stubs" / version / "triton_python_backend_stub"


def server_environment(install: TritonInstall | None = None) -> dict[str, str]:
    """Environment for a tritonserver process whose Python stubs run this interpreter."""
    env = dict(os.environ)
    # The stub runs the first `python3` on PATH: make it this interpreter's environment.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    libdir = sysconfig.get_config_var("LIBDIR")
    libs = str((install or TritonInstall.find()).libs)
    # LIBDIR must come first, or the stub may load the system libpython against this stdlib.
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, libs, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def prepare_backend_dir(install: TritonInstall, target: Path) -> Path:
    """A backend directory holding the Python backend plus the stub for this interpreter."""
    python_dir = target / "python"
    stub = python_dir / "triton_python_backend_stub"
    if not install.stub.exists():
        raise ServerError(f"no Python backend stub for Python {sys.version_info.major}.{sys.version_info.minor} "
                          f"in {install.stub.parent.parent}")
    if not stub.exists() or stub.stat().st_size != install.stub.stat().st_size:
        shutil.copytree(install.root / "backends" / "python", python_dir, dirs_exist_ok=True)
        shutil.copy2(install.stub, stub)
    return target


def _substitute_onnxruntime(config: mc.ModelConfig, ort_threads: int | None) -> mc.ModelConfig:
    staged = mc.ModelConfig()
    staged.CopyFrom(config)
    staged.backend = "python"
    staged.platform = ""
    for group in staged.instance_group:
        # No GPU here: KIND_GPU would fail to load, KIND_AUTO would pick CPU anyway.
        group.kind = mc.ModelInstanceGroup.KIND_CPU
        del group.gpus[:]
    if ort_threads is not None:
        staged.parameters["intra_op_thread_count"].string_value = str(ort_threads)
    return staged


def stage_repository(repository: Path, target: Path, ort_threads: int | None = None,
                     log: Log = _print) -> list[str]:
    """Make `target` a servable copy of `repository`; returns the names of the staged models."""
    runner = paths.python_backends_dir() / "onnxruntime_runner" / "model.py"
    target.mkdir(parents=True, exist_ok=True)
    staged = []
    for model_dir in sorted(p for p in Path(repository).iterdir() if (p / "config.pbtxt").exists()):
        config = read_config(model_dir)
        dest = target / model_dir.name
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            shutil.rmtree(dest)
        if config.backend == "onnxruntime" or config.platform == "onnxruntime_onnx":
            substitute = _substitute_onnxruntime(config, ort_threads)
            dest.mkdir()
            (dest / "config.pbtxt").write_text(to_pbtxt(substitute))
            for version in (v for v in model_dir.iterdir() if v.is_dir() and v.name.isdigit()):
                (dest / version.name).mkdir()
                for f in version.iterdir():
                    (dest / version.name / f.name).symlink_to(f.resolve())
                shutil.copyfile(runner, dest / version.name / "model.py")
            threads = substitute.parameters["intra_op_thread_count"].string_value
            log(f"[serve] {model_dir.name}: backend onnxruntime -> python ORT runner in the staged copy "
                f"(this tritonserver has no onnxruntime backend; intra_op_threads={threads or 'ORT default'}, "
                f"instance kind CPU)")
        elif config.backend == "tensorrt" or config.platform == "tensorrt_plan":
            log(f"[serve] {model_dir.name}: TensorRT plan, not servable on this host; left out of the staged copy")
            continue
        else:
            dest.symlink_to(model_dir.resolve(), target_is_directory=True)
        staged.append(model_dir.name)
    return staged


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """`count` distinct ports that are free right now (the OS picks them)."""
    sockets, ports = [], []
    for _ in range(count):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        sockets.append(s)
        ports.append(s.getsockname()[1])
    for s in sockets:
        s.close()
    return ports


class LocalTriton:
    """Start, wait for and stop one tritonserver process on loopback."""

    def __init__(self, repository: Path | None = None, ports: ServerPorts | None = None,
                 ort_threads: int | None = None, model_control: str = "none",
                 extra_args: list[str] | None = None, cache_bytes: int | None = None, log: Log = _print):
        self.repository = Path(repository or paths.model_repository())
        self.ports = ports or ServerPorts()
        self.ort_threads = ort_threads
        self.model_control = model_control
        self.extra_args = extra_args or []
        # Response cache for models whose config enables it (local cache implementation).
        self.cache_bytes = cache_bytes if cache_bytes is not None else int(
            os.environ.get("HOTPATH_CACHE_BYTES", 64 * 1024 * 1024))
        self.log = log
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
        from hotpath.preflight import check_repository

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
        cmd = [str(install.binary), f"--model-repository={self.staged}", f"--backend-directory={backends}",
               f"--cache-directory={install.root / 'caches'}", f"--http-port={self.ports.http}",
               f"--grpc-port={self.ports.grpc}", f"--metrics-port={self.ports.metrics}",
               "--http-address=127.0.0.1", "--grpc-address=127.0.0.1", "--metrics-address=127.0.0.1",
               f"--model-control-mode={self.model_control}", "--log-info=true", *self.extra_args]
        if self.cache_bytes:
            cmd.append(f"--cache-config=local,size={self.cache_bytes}")
        if self.model_control == "explicit":
            cmd.append("--load-model=*")
        self.log(f"[serve] starting tritonserver with {len(models)} model(s); log: {self.log_path}")
        with open(self.log_path, "wb") as logfile:
            self.process = subprocess.Popen(cmd, stdout=logfile, stderr=subprocess.STDOUT,
                                            env=server_environment(install), start_new_session=True)
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

    def stop(self, timeout: float = 30.0) -> None:
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        if self.staged and self.staged.exists():
            shutil.rmtree(self.staged, ignore_errors=True)

    def __enter__(self) -> "LocalTriton":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve_forever(ports: ServerPorts, repository: Path | None = None, ort_threads: int | None = None,
                  demo: bool = False) -> int:
    """`hotpath serve`: start the server, print endpoints (and a demo request), wait for Ctrl-C/SIGTERM."""
    server = LocalTriton(repository, ports, ort_threads)
    stop = {"signal": None}

    def _handle(signum, _frame):
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    server.start()
    try:
        print(f"[serve] gRPC    {server.grpc_url}\n[serve] HTTP    http://{server.http_url}\n"
              f"[serve] metrics {server.metrics_url}", flush=True)
        if demo:
            from hotpath.demo import show_example

            show_example(server.grpc_url)
        print("[serve] serving; Ctrl-C to stop", flush=True)
        while stop["signal"] is None:
            if server.process.poll() is not None:
                print(f"[serve] tritonserver exited ({server.process.returncode}):\n{server.log_tail()}", flush=True)
                return 1
            time.sleep(0.5)
    finally:
        print("[serve] stopping tritonserver", flush=True)
        server.stop()
    return 0
