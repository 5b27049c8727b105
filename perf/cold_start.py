"""Cold start of the local tritonserver: READY time, model loads, warmup, first requests.

    .venv/bin/python perf/cold_start.py [--runs 3] [--allow-busy]   # writes perf/reports/cold_start.md
"""

import argparse
import platform
import signal
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from hotpath import paths
from hotpath.monitoring.endpoints import load_endpoints
from hotpath.perf.cold_start import measure_reloads, measure_startup, without_warmup
from hotpath.perf.quiet import allow_busy_default, require_quiet
from hotpath.server.subset import linked

REPORT = paths.ROOT / "perf" / "reports" / "cold_start.md"


def med(values) -> str:
    values = list(values)
    m = statistics.median(values)
    return f"{m:.2f}" if len(values) == 1 else f"{m:.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--allow-busy", action="store_true", default=allow_busy_default())
    args = parser.parse_args()
    # A timeout's SIGTERM unwinds the with-blocks, so no tritonserver or Prometheus outlives the script.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
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
        "Command: `.venv/bin/python perf/cold_start.py`. Repository files were in the OS page cache "
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


if __name__ == "__main__":
    sys.exit(main())
