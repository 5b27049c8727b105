"""infinity-emb, the embedding server users pick for an OpenAI-style `/embeddings`, serving the same
all-MiniLM-L6-v2 files with its ONNX Runtime (optimum) engine and mean pooling.

It lives in its own venv (`.hotpath/infinity-venv`): it pins transformers 4.x, optimum and its own
server stack, which conflict with hotpath's. Its optimum engine needs an ONNX export of the model
(`optimum-cli export onnx`), finds it only with model id `.` started from that folder, and pools the
first token unless told `--pooling-method mean` (docs/runtime_notes.md, measured 2026-12-03).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.shutdown import stop_process

logger = logging.getLogger(__name__)

PINS = ("infinity-emb[server,torch,optimum]==0.0.78", "torch==2.13.0", "optimum==2.1.0", "optimum-onnx==0.1.0",
        "transformers==4.57.6")


def infinity_venv(log=logger.info) -> Path:
    """The venv, created on first use (a stamp of the pins: a changed pin reinstalls)."""
    venv = paths.work_dir() / "infinity-venv"
    stamp = venv / ".hotpath-pins"
    if not (stamp.exists() and stamp.read_text() == "\n".join(PINS)):
        log(f"[infinity] installing {', '.join(PINS)} into {venv} (first use only, a few minutes)")
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *PINS], check=True)
        stamp.write_text("\n".join(PINS))
    return venv


def onnx_export(venv: Path, model_dir: Path, log=logger.info) -> Path:
    """all-MiniLM-L6-v2 exported for infinity's optimum engine (once)."""
    out = paths.work_dir() / "infinity-model"
    if not (out / "model.onnx").exists():
        log(f"[infinity] exporting {model_dir} to ONNX in {out}")
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([str(venv / "bin" / "optimum-cli"), "export", "onnx", "--library-name", "transformers",
                        "--task", "feature-extraction", "--model", str(model_dir), str(out)], check=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return out


@contextlib.contextmanager
def infinity_server(port: int, model_dir: Path, threads: int = 2, log=logger.info) -> Iterator[str]:
    """infinity_emb on 127.0.0.1:`port` serving the model as `text_embedding`; yields its base URL."""
    venv = infinity_venv(log)
    folder = onnx_export(venv, model_dir, log)
    log_path = paths.work_dir() / "logs" / f"infinity-{port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0",
           "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false"}
    cmd = [str(venv / "bin" / "infinity_emb"), "v2", "--model-id", ".", "--served-model-name", "text_embedding",
           "--engine", "optimum", "--device", "cpu", "--pooling-method", "mean", "--host", "127.0.0.1",
           "--port", str(port), "--url-prefix", "/v1", "--no-model-warmup"]
    with open(log_path, "wb") as out:
        process = subprocess.Popen(cmd, cwd=folder, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   start_new_session=True)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                raise HotpathError(f"infinity_emb exited ({process.returncode}); log: {log_path}")
            try:
                with urllib.request.urlopen(f"{base}/models", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                if time.monotonic() > deadline:
                    raise HotpathError(f"infinity_emb not up after 300 s; log: {log_path}") from None
                time.sleep(0.5)
        yield base
    finally:
        stop_process(process, signal.SIGTERM, 20)
