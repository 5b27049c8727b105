"""Triton Model Analyzer 1.58 searching the text encoder's config space, on CPU.

It cannot search ensembles, so it gets the step hotpath's tuner finds to be the bottleneck
(text_encoder), in the same staged form the local server runs. It lives in its own venv
(`.hotpath/ma-venv`): it pins protobuf/numpy/tritonclient versions that conflict with ours.
"""

from __future__ import annotations

import contextlib
import csv
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.exporters.samples import payload_for
from hotpath.server.install import TritonInstall, prepare_backend_dir, server_environment
from hotpath.server.staging import stage_repository
from hotpath.sweeps.measure.perf_analyzer import perf_analyzer_binary, perf_analyzer_env

logger = logging.getLogger(__name__)

MA_VERSION = "1.58.0"


@dataclass
class ModelAnalyzerResult:
    search_seconds: float
    configs_measured: int
    best_config: str
    best_throughput: float
    best_p95_ms: float
    best_settings: dict
    rows: list[dict]


def ma_venv(log=logger.info) -> Path:
    """The Model Analyzer venv, created on first use."""
    from hotpath.sweeps.measure.llm_benchmark import tool_venv

    return tool_venv("ma-venv", "model-analyzer", f"triton-model-analyzer=={MA_VERSION}", log)


def run_model_analyzer(model: str, target_p95_ms: float, concurrency: int | list[int], log=logger.info,
                       timeout_s: float | None = None) -> ModelAnalyzerResult:
    """Search 6 configs of `model` alone (instances x queue delay) at `concurrency` (one load or a sweep).

    `timeout_s` defaults to 10 minutes per load."""
    loads = [concurrency] if isinstance(concurrency, int) else list(concurrency)
    exe = ma_venv(log)
    work = paths.work_dir() / "model-analyzer"
    shutil.rmtree(work, ignore_errors=True)
    repo = work / "repo"
    stage_repository(paths.model_repository(), work / "staged", log=lambda m: None)
    repo.mkdir(parents=True)
    shutil.copytree(work / "staged" / model, repo / model, symlinks=False)
    install = TritonInstall.find()
    backends = prepare_backend_dir(install, paths.work_dir() / "backends")
    config = {
        "model_repository": str(repo),
        "output_model_repository_path": str(work / "output"),
        "override_output_model_repository": True,
        "export_path": str(work / "export"),
        "checkpoint_directory": str(work / "checkpoints"),
        "triton_launch_mode": "local",
        "triton_server_path": str(install.binary),
        # Its own tritonserver, which it drives through the repository API: no admin key (it cannot send
        # one), so it listens on loopback only.
        "triton_server_flags": {"backend_directory": str(backends),
                                "cache_directory": str(install.root / "caches"),
                                **{f"{api}_address": "127.0.0.1" for api in ("http", "grpc", "metrics")}},
        "perf_analyzer_path": str(perf_analyzer_binary()),
        "perf_analyzer_flags": {"input-data": str(payload_for(model)), "percentile": 95},
        "run_config_search_disable": True,
        "collect_cpu_metrics": False,
        "profile_models": {model: {
            "cpu_only": True,
            "model_config_parameters": {
                "dynamic_batching": {"max_queue_delay_microseconds": [0, 1000, 4000]},
                "instance_group": [{"kind": "KIND_CPU", "count": [1, 2]}],
            },
            "parameters": {"concurrency": loads},
            "constraints": {"perf_latency_p95": {"max": target_p95_ms}},
        }},
        "objectives": {"perf_throughput": 10},
        "inference_output_fields": ["model_name", "batch_size", "concurrency", "model_config_path", "instance_group",
                                    "max_batch_size", "satisfies_constraints", "perf_throughput", "perf_latency_p95",
                                    "perf_latency_p99"],
    }
    cfg_path = work / "config.yaml"
    cfg_path.write_text(json.dumps(config, indent=1))  # JSON is YAML
    env = server_environment(install)
    # MA starts both tritonserver and perf_analyzer from this environment: both library paths.
    env["LD_LIBRARY_PATH"] = ":".join([env["LD_LIBRARY_PATH"], perf_analyzer_env()["LD_LIBRARY_PATH"]])
    log(f"[perf]      model analyzer {MA_VERSION}: manual search of {model} (6 configs at concurrency "
        f"{', '.join(map(str, loads))})")
    t0 = time.perf_counter()
    proc = subprocess.Popen([str(exe), "profile", "-f", str(cfg_path)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=work, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout_s or 600 * len(loads))
    except subprocess.TimeoutExpired:
        output = _stop(proc)
        (work / "model-analyzer.log").write_text(output)
        written = len(list((work / "output").glob(f"{model}_config_*")))
        raise HotpathError(f"model analyzer did not finish in {time.perf_counter() - t0:.0f} s ({written} configs "
                           f"of {model} started; log {work / 'model-analyzer.log'})") from None
    seconds = time.perf_counter() - t0
    (work / "model-analyzer.log").write_text(output)
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-10:])
        raise HotpathError(f"model analyzer failed (log {work / 'model-analyzer.log'}):\n{tail}")
    return _parse_results(work, seconds)


def _descendants(pid: int) -> list[int]:
    """Process ids below `pid` (Linux /proc); Model Analyzer starts tritonserver in a session of its own."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _stop(proc: subprocess.Popen) -> str:
    """Interrupt Model Analyzer (it checkpoints and stops its server on SIGINT); then end what is left."""
    below = set(_descendants(proc.pid))
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)   # not communicate(): its servers hold the output pipe open
    except subprocess.TimeoutExpired:
        below |= set(_descendants(proc.pid))   # it may have started another server meanwhile
        proc.kill()
        proc.wait()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [pid for pid in below if Path(f"/proc/{pid}").exists()]
        for pid in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 30
        while alive and time.monotonic() < deadline:   # tritonserver drains for a few seconds
            time.sleep(0.5)
            alive = [pid for pid in alive if _running(pid)]
    return proc.communicate()[0]


def _running(pid: int) -> bool:
    """`pid` exists and is no zombie; a process reaped between two reads of /proc is not running."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _parse_results(work: Path, seconds: float) -> ModelAnalyzerResult:
    found = list((work / "export").rglob("metrics-model-inference.csv"))
    if not found:
        raise HotpathError(f"model analyzer wrote no metrics-model-inference.csv under {work / 'export'}")
    rows = list(csv.DictReader(found[0].read_text().splitlines()))
    if not rows:
        raise HotpathError("model analyzer measured no configs")

    def col(row: dict, *names: str) -> str:
        for n in names:
            for k, v in row.items():
                if k.strip().lower().startswith(n.lower()):
                    return v
        return ""

    def tput(r: dict) -> float:
        return float(col(r, "Throughput") or 0)

    meets = [r for r in rows if col(r, "Satisfies Constraints").strip().lower() in ("yes", "true")]
    best = max(meets or rows, key=tput)
    name = col(best, "Model Config Path")
    settings = {"instance_count": int(col(best, "Instance Group").split(":")[0] or 1)}
    config_file = work / "output" / name / "config.pbtxt"
    if config_file.exists():
        from hotpath.specs.repository import parse_pbtxt

        cfg = parse_pbtxt(config_file.read_text())
        settings["max_queue_delay_microseconds"] = int(cfg.dynamic_batching.max_queue_delay_microseconds)
    return ModelAnalyzerResult(seconds, len(rows), name, tput(best), float(col(best, "p95 Latency") or 0),
                               settings, rows)
