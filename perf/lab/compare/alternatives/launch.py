"""The alternatives an endpoint is compared with, and how each is brought up for measurement.

An `Alternative` is a context manager factory: given the running hotpath server and the endpoint,
it serves the endpoint its own way and yields a `Target` for perf_analyzer; leaving the context
stops it (or restores hotpath's configs).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Iterator

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.shutdown import stop_process

logger = logging.getLogger(__name__)


@dataclass
class Target:
    """Where perf_analyzer sends the load; `statistics`: a Triton whose per-model statistics can be read."""

    url: str
    protocol: str = "grpc"
    statistics: bool = True
    note: str = ""  # what the run found out (search time, chosen config)


@dataclass(frozen=True)
class Context:
    url: str            # the running hotpath server (gRPC)
    endpoint: str
    steps: list[str]    # the endpoint's step models
    searched_step: str  # the step a single-model tuner gets (Model Analyzer cannot search ensembles)
    p95_ms: float
    concurrency: int
    log: Callable = logger.info


@dataclass(frozen=True)
class Alternative:
    label: str    # short key in reports and raw results
    title: str    # the row's name in compare.md
    note: str     # how it is set up
    serve: Callable[[Context], ContextManager[Target]] = field(repr=False)


def default_config(config):
    """What a user gets without tuning: no dynamic batching, one instance."""
    config.ClearField("dynamic_batching")
    for group in config.instance_group:
        group.count = 1
    return config


def triton_default() -> Alternative:
    @contextlib.contextmanager
    def serve(ctx: Context) -> Iterator[Target]:
        from hotpath.sweeps.measure.reconfigure import reconfigured

        with reconfigured(ctx.url, {m: default_config for m in ctx.steps}):
            yield Target(ctx.url)
    return Alternative("default", "Triton, default config", "every step: no dynamic batching, 1 instance", serve)


@contextlib.contextmanager
def process(cmd: list[str], ready_url: str, env: dict | None = None, timeout_s: float = 90,
            log_path: Path | None = None) -> Iterator[subprocess.Popen]:
    """A server process for the duration, once `ready_url` answers 200; stopped by its pid on exit. It starts in
    the checkout's root, where the lab's modules (perf.lab.compare.alternatives) are importable. `log_path`: its
    output goes there (a chatty server would fill a pipe nobody reads and stall), else stderr is kept for errors."""
    out = open(log_path, "w") if log_path else None
    proc = subprocess.Popen(cmd, env=env, stdout=out or subprocess.DEVNULL, stderr=subprocess.STDOUT if out else
                            subprocess.PIPE, text=True, start_new_session=True, cwd=paths.ROOT)
    if out:
        out.close()
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                output = Path(log_path).read_text(errors="replace") if log_path else proc.stderr.read()
                raise HotpathError(f"{' '.join(cmd[1:4])} exited ({proc.returncode}): {output[-2000:]}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise HotpathError(f"{ready_url} not ready after {timeout_s:.0f}s")
            time.sleep(0.5)
        yield proc
    finally:
        stop_process(proc, timeout=30)   # its process group: a server's own children (vLLM's engine) go too


def fastapi(handler: str, threads: int, what: str) -> Alternative:
    """FastAPI + uvicorn (1 worker) + ORT with a `handler` ("sync" or "async") handler."""
    @contextlib.contextmanager
    def serve(ctx: Context) -> Iterator[Target]:
        import os

        from hotpath.server.ports import free_ports

        port, = free_ports(1)
        env = {**os.environ, "HOTPATH_ALT_ENDPOINT": ctx.endpoint, "HOTPATH_ALT_HANDLER": handler,
               "HOTPATH_ORT_THREADS": str(threads)}
        with process([sys.executable, "-m", "uvicorn", "--factory", "perf.lab.compare.alternatives.fastapi_app:create_app",
                      "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning", "--no-access-log",
                      "--loop", "uvloop", "--http", "httptools"],  # uvicorn[standard], as deployed
                     f"http://127.0.0.1:{port}/v2/health/ready", env=env):
            yield Target(f"127.0.0.1:{port}", "http", statistics=False)
    note = (f"{what}; `{'def' if handler == 'sync' else 'async def'}` handler"
            f"{', pipeline awaited in the threadpool' if handler == 'async' else ' (FastAPI threadpool)'}; "
            f"ORT {threads} thread{'s' if threads > 1 else ''}, spinning off; 1 uvicorn worker (uvloop, httptools); "
            "KServe v2 HTTP")
    return Alternative(f"fastapi-{handler}", f"FastAPI + uvicorn + ORT, {handler} handler", note, serve)


def pytriton(queue_delay_us: int = 1000, threads: int = 2) -> Alternative:
    @contextlib.contextmanager
    def serve(ctx: Context) -> Iterator[Target]:
        from hotpath.server.install import server_environment
        from hotpath.server.ports import free_ports

        http, grpc, metrics = free_ports(3)
        with process([sys.executable, "-m", "perf.lab.compare.alternatives.pytriton_app", "--endpoint", ctx.endpoint,
                      "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
                      "--max-queue-delay-us", str(queue_delay_us), "--ort-threads", str(threads)],
                     f"http://127.0.0.1:{http}/v2/models/{ctx.endpoint}/ready", env=server_environment(),
                     timeout_s=180):
            yield Target(f"127.0.0.1:{grpc}")
    return Alternative("pytriton", "PyTriton 0.7", f"the whole pipeline as one Python callable; dynamic batching "
                       f"{queue_delay_us} us; ORT {threads} threads", serve)


def model_analyzer() -> Alternative:
    """Triton Model Analyzer searches the endpoint's heaviest step; its best config is then served."""
    @contextlib.contextmanager
    def serve(ctx: Context) -> Iterator[Target]:
        from hotpath.sweeps.measure.reconfigure import reconfigured
        from hotpath.sweeps.tune.search_space import apply_knobs
        from perf.lab.compare.alternatives.model_analyzer import run_model_analyzer

        ma = run_model_analyzer(ctx.searched_step, ctx.p95_ms, ctx.concurrency, log=ctx.log)
        with reconfigured(ctx.url, {ctx.searched_step: lambda c: apply_knobs(c, ma.best_settings)}):
            yield Target(ctx.url, note=(f"searched {ctx.searched_step} only (no ensembles): {ma.configs_measured} "
                                        f"configs in {ma.search_seconds:.0f} s; best {ma.best_config} "
                                        f"{ma.best_settings} ({ma.best_throughput:.1f}/s on the model alone)"))
    return Alternative("model-analyzer", "Triton, Model Analyzer's best config", "Model Analyzer 1.58, own venv", serve)
