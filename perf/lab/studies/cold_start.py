"""Cold start: process start to READY, per-model load and warmup, first request with and without warmup.

Three measurements, each on a fresh tritonserver:
- startup: process start -> /v2/health/ready, with each model's load span from Triton's log
  (models load in parallel, so the spans overlap);
- reload: each step model unloaded and loaded again through explicit model control, as configured
  and with its `model_warmup` removed: the difference is what warmup costs at load time;
- first request: the first request of every endpoint right after READY, against the median of the
  next ones, with the repository as configured and with every `model_warmup` removed.
"""

from __future__ import annotations

import platform
import re
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.client import text_input
from hotpath.monitoring.endpoints import Endpoint, load_endpoints
from hotpath.server.admin import admin_headers
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.specs.config_pbtxt import to_pbtxt
from hotpath.specs.repository import read_config
from hotpath.sweeps.measure.host_load import require_quiet
from hotpath.sweeps.measure.reconfigure import load_config, served_config
from hotpath.sweeps.measure.server_stats import breakdown, snapshot, step_cost
from hotpath.sweeps.registry import get_endpoint
from perf.lab.studies import runner

_STAMP = re.compile(r'^[IWE](\d{4}) (\d\d:\d\d:\d\d\.\d+) .*"(loading: |successfully loaded \')([^:\']+)')


def load_spans(log_text: str, year: int | None = None) -> dict[str, tuple[float, float]]:
    """Per model: (start, end) of its load in epoch seconds, from Triton's 'loading'/'successfully loaded' lines."""
    year = year or datetime.now().year
    spans: dict[str, list[float]] = {}
    for line in log_text.splitlines():
        m = _STAMP.match(line)
        if not m:
            continue
        t = datetime.strptime(f"{year}{m.group(1)} {m.group(2)}", "%Y%m%d %H:%M:%S.%f").timestamp()
        model, done = m.group(4), m.group(3).startswith("successfully")
        spans.setdefault(model, [t, t])[1 if done else 0] = t
    return {m: (s, e) for m, (s, e) in spans.items()}


def without_warmup(repository: Path, models: tuple[str, ...], target: Path) -> Path:
    """A copy of `models` from `repository` whose configs have no model_warmup (version dirs linked)."""
    for name in models:
        src, dest = repository / name, target / name
        dest.mkdir(parents=True)
        config = read_config(src)
        config.ClearField("model_warmup")
        (dest / "config.pbtxt").write_text(to_pbtxt(config))
        for version in (v for v in src.iterdir() if v.is_dir()):
            (dest / version.name).symlink_to(version.resolve(), target_is_directory=True)
    return target


def send_sample(client: grpcclient.InferenceServerClient, endpoint: str, unique: bool = True) -> float:
    """One request with a real input; ms. Texts get a unique suffix so the response cache misses."""
    sample = get_endpoint(endpoint).samples()[0]
    if unique and isinstance(sample, str):
        sample = f"{sample} {uuid.uuid4()}"
    name = client.get_model_metadata(endpoint, as_json=True)["inputs"][0]["name"]
    t0 = time.perf_counter()
    client.infer(endpoint, [text_input(name, [sample])])
    return (time.perf_counter() - t0) * 1e3


@dataclass
class Startup:
    ready_s: float
    loads: dict[str, tuple[float, float]]   # model -> (start, end) seconds after process start
    first_ms: dict[str, float]
    warm_ms: dict[str, float]
    first_steps_ms: dict[str, dict[str, float]]   # endpoint -> step -> server time of the first request


def measure_startup(repository: Path, endpoints: list[Endpoint], warm_requests: int = 20) -> Startup:
    """Start a server on `repository`, time READY, then the first and following requests per endpoint."""
    http, grpc, metrics = free_ports(3)
    server = LocalTriton(repository, ServerPorts(http, grpc, metrics), log=lambda m: None)
    t0 = time.time()
    server.start()
    ready = time.time() - t0
    try:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        first, first_steps = {}, {}
        for e in endpoints:
            # Per-step server time of the first request: the statistics API's breakdown (hotpath.sweeps.measure.server_stats).
            before = snapshot(server.grpc_url)
            first[e.name] = send_sample(client, e.name)
            steps = breakdown(before, snapshot(server.grpc_url), list(e.steps))
            first_steps[e.name] = {m: step_cost(v) / 1e3 for m, v in steps.items()}
        warm = {e.name: statistics.median(send_sample(client, e.name) for _ in range(warm_requests))
                for e in endpoints}
        client.close()
    finally:
        server.stop()
    loads = {m: (s - t0, e - t0) for m, (s, e) in load_spans(server.log_path.read_text()).items()}
    return Startup(ready, loads, first, warm, first_steps)


def measure_reloads(repository: Path, models: list[str]) -> dict[str, tuple[float, float]]:
    """Per model: seconds to load it through the API (as configured, without model_warmup)."""
    http, grpc, metrics = free_ports(3)
    out = {}
    with LocalTriton(repository, ServerPorts(http, grpc, metrics), model_control="explicit", log=lambda m: None) as s:
        client = grpcclient.InferenceServerClient(s.grpc_url)
        for model in models:
            config = served_config(client, model)
            bare = type(config)()
            bare.CopyFrom(config)
            bare.ClearField("model_warmup")
            times = []
            for variant in (config, bare):
                client.unload_model(model, headers=admin_headers())
                t0 = time.perf_counter()
                load_config(client, model, variant)
                times.append(time.perf_counter() - t0)
            load_config(client, model, config)
            out[model] = (times[0], times[1])
        client.close()
    return out


REPORT = paths.ROOT / "perf" / "reports" / "cold_start.md"


def med(values) -> str:
    values = list(values)
    m = statistics.median(values)
    return f"{m:.2f}" if len(values) == 1 else f"{m:.2f} ({min(values):.2f}-{max(values):.2f})"


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("cold_start", __doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args(argv)
    quiet = require_quiet(args.allow_busy)
    endpoints = load_endpoints(args.profile)
    models = tuple(dict.fromkeys(m for e in endpoints for m in e.models))
    steps = list(dict.fromkeys(s for e in endpoints for s in e.steps))   # models that execute (not ensembles)
    repo = paths.model_repository()
    variants = {"warmup as configured": linked(models),
                "no model_warmup": without_warmup(repo, models, Path(tempfile.mkdtemp(prefix="cold-bare-")))}
    runs = {v: [] for v in variants}
    for i in range(args.runs):
        for variant in (list(variants) if i % 2 == 0 else list(variants)[::-1]):   # alternate the order
            result = measure_startup(variants[variant], endpoints)
            runs[variant].append(result)
            print(f"[cold-start] run {i + 1} {variant}: ready {result.ready_s:.2f} s, first "
                  + ", ".join(f"{k} {v:.1f} ms" for k, v in result.first_ms.items()), flush=True)
    reloads = [measure_reloads(variants["warmup as configured"], steps) for _ in range(args.runs)]
    print("[cold-start] reloads: " + str(reloads), flush=True)

    lines = [
        "# Cold start",
        "",
        f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()} {platform.processor() or ''}, "
        f"local tritonserver 2.51 (nvidia-pytriton wheel), profile `{args.profile}`; {args.runs} runs per "
        f"variant, median (min-max). Machine: {quiet.summary()}.",
        "",
        "Command: `.venv/bin/python -m perf study cold_start`. Repository files were in the OS page cache "
        "(a node's very first start also reads the model files from disk).",
        "",
        "## Process start to READY",
        "",
        "| variant | start -> READY (s) | " + " | ".join(f"{m} load (s)" for m in models) + " |",
        "|---|---|" + "---|" * len(models),
    ]
    for variant, results in runs.items():
        loads = [med(r.loads[m][1] - r.loads[m][0] for r in results) for m in models]
        lines.append(f"| {variant} | {med(r.ready_s for r in results)} | " + " | ".join(loads) + " |")
    lines += [
        "",
        "Load spans come from Triton's log ('loading:' to 'successfully loaded'); step models load in "
        "parallel, ensembles after their steps, so READY is about the slowest step plus a little.",
        "",
        "## Loading one model through the API (explicit model control)",
        "",
        "| model | load with warmup (s) | load without warmup (s) | warmup costs (s) |",
        "|---|---|---|---|",
    ]
    for m in steps:
        with_w = [r[m][0] for r in reloads]
        bare = [r[m][1] for r in reloads]
        lines.append(f"| {m} | {med(with_w)} | {med(bare)} | {statistics.median(with_w) - statistics.median(bare):+.2f} |")
    lines += [
        "",
        "## First request after READY",
        "",
        "| endpoint | variant | first request (ms) | next 20, median (ms) | first / warm | "
        "first request per step, server queue + compute (ms) |",
        "|---|---|---|---|---|---|",
    ]
    for e in endpoints:
        for variant, results in runs.items():
            first = [r.first_ms[e.name] for r in results]
            warm = [r.warm_ms[e.name] for r in results]
            steps = ", ".join(f"{m} {med(r.first_steps_ms[e.name].get(m, 0.0) for r in results)}" for m in e.steps)
            lines.append(f"| {e.name} | {variant} | {med(first)} | {med(warm)} | "
                         f"{statistics.median(first) / statistics.median(warm):.1f}x | {steps} |")
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"[cold-start] wrote {REPORT.relative_to(paths.ROOT)}")
    return 0
