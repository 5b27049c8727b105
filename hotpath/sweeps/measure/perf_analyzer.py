"""Run perf_analyzer (the tritonclient 2.50 binary) and parse its CSV into PerfPoint records."""

from __future__ import annotations

import csv
import logging
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.server.admin import perf_analyzer_flags, redacted

logger = logging.getLogger(__name__)


@dataclass
class PerfPoint:
    """One measured load point: client latencies (ms), throughput, server breakdown (us)."""

    model: str
    load_kind: str            # "concurrency" or "request_rate"
    load: float
    throughput: float
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    server_queue_us: float = 0.0
    server_compute_input_us: float = 0.0
    server_compute_infer_us: float = 0.0
    server_compute_output_us: float = 0.0
    steps: dict[str, dict[str, float]] = field(default_factory=dict)  # per model, from server statistics
    label: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def perf_analyzer_binary() -> Path:
    path = Path(sys.prefix) / "bin" / "perf_analyzer"
    if not path.exists():
        raise HotpathError(f"{path} not found; tritonclient[all]==2.50.0 ships it (run `make setup`)")
    return path


def perf_analyzer_env() -> dict[str, str]:
    """perf_analyzer dlopens libcudart even on CPU hosts; nvidia-cuda-runtime-cu12 ships it."""
    import nvidia.cuda_runtime

    lib = Path(list(nvidia.cuda_runtime.__path__)[0]) / "lib"
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(lib), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def run_perf_analyzer(cmd: list[str], timeout_s: float | None = None,
                      check: bool = False) -> subprocess.CompletedProcess:
    """perf_analyzer `cmd` with its output captured. A timeout (or with `check`, a failure) raises
    HotpathError naming the command with the admin key hidden: subprocess's own errors print it whole."""
    try:
        return subprocess.run(cmd, env=perf_analyzer_env(), capture_output=True, text=True, timeout=timeout_s,
                              check=check)
    except subprocess.TimeoutExpired:
        raise HotpathError(f"perf_analyzer ran past {timeout_s} s: {redacted(cmd)}") from None
    except subprocess.CalledProcessError as exc:
        tail = "\n".join((exc.stdout + exc.stderr).strip().splitlines()[-8:])
        raise HotpathError(f"perf_analyzer exited with {exc.returncode}: {redacted(cmd)}\n{tail}") from None


def parse_csv(text: str, model: str, load_kind: str) -> list[PerfPoint]:
    """Rows of perf_analyzer's `-f` CSV (latencies in us) -> PerfPoints (latencies in ms)."""
    rows = list(csv.DictReader(text.splitlines()))
    if not rows:
        raise HotpathError(f"perf_analyzer wrote no measurement rows for {model}")
    key = "Concurrency" if load_kind == "concurrency" else "Request Rate"
    points = []
    for r in rows:
        points.append(PerfPoint(
            model=model, load_kind=load_kind, load=float(r[key]), throughput=float(r["Inferences/Second"]),
            p50_ms=float(r["p50 latency"]) / 1e3, p90_ms=float(r["p90 latency"]) / 1e3,
            p95_ms=float(r["p95 latency"]) / 1e3, p99_ms=float(r["p99 latency"]) / 1e3,
            # Servers without Triton's statistics (the FastAPI alternative) have no server columns.
            server_queue_us=float(r.get("Server Queue") or 0),
            server_compute_input_us=float(r.get("Server Compute Input") or 0),
            server_compute_infer_us=float(r.get("Server Compute Infer") or 0),
            server_compute_output_us=float(r.get("Server Compute Output") or 0),
        ))
    return points


@dataclass
class Measurement:
    """How long and how steadily to measure one point (2 cores rarely pass a 10% stability check)."""

    interval_ms: int = 3000
    stability_pct: int = 25
    max_trials: int = 6


def run(model: str, url: str, load_kind: str, load: float, input_data: Path | None = None,
        protocol: str = "grpc", measurement: Measurement = Measurement(), extra: list[str] | None = None,
        timeout_s: float = 300, retries: int = 2) -> PerfPoint:
    """Measure one load point of `model` with perf_analyzer; raises HotpathError with its output on failure.

    On a busy 2-core host perf_analyzer's stability check sometimes fails; then the point is
    measured again with a window twice as long and a looser stability bound.
    """
    for attempt in range(retries + 1):
        try:
            return _run_once(model, url, load_kind, load, input_data, protocol, measurement, extra, timeout_s)
        except _Unstable as exc:
            if attempt == retries:
                raise HotpathError(str(exc)) from None
            measurement = Measurement(measurement.interval_ms * 2, min(measurement.stability_pct + 25, 100),
                                      measurement.max_trials)
            logger.info(f"[perf] {model} {load_kind} {load:g}: unstable, retrying with a {measurement.interval_ms} ms "
                        "window")
    raise AssertionError("unreachable")


class _Unstable(Exception):
    pass


def _run_once(model, url, load_kind, load, input_data, protocol, measurement, extra, timeout_s) -> PerfPoint:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.csv"
        flag = "--concurrency-range" if load_kind == "concurrency" else "--request-rate-range"
        cmd = [str(perf_analyzer_binary()), "-m", model, "-u", url, "-i", protocol, flag, f"{load:g}",
               "--percentile=95", "-f", str(out), "--measurement-interval", str(measurement.interval_ms),
               "-s", str(measurement.stability_pct), "--max-trials", str(measurement.max_trials),
               # It reads the statistics API, restricted on hotpath's servers (harmless elsewhere).
               *perf_analyzer_flags(protocol),
               *(["--input-data", str(input_data)] if input_data else []), *(extra or [])]
        proc = run_perf_analyzer(cmd, timeout_s)
        if proc.returncode != 0 or not out.exists():
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
            if "stable measurement" in tail:
                raise _Unstable(f"perf_analyzer found no stable measurement of {model} at {load_kind} {load:g}")
            raise HotpathError(f"perf_analyzer failed on {model} at {load_kind} {load:g}:\n{tail}")
        return parse_csv(out.read_text(), model, load_kind)[0]
