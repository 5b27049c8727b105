"""`hotpath perf --compare`: the alternatives side by side, same machine, same load, one run.

(a) Triton with a default config (no dynamic batching, 1 instance), (b) the tuned config,
(c) FastAPI + uvicorn + ONNX Runtime, (d) PyTriton, (e) Model Analyzer's best config for the
encoder (with its search time), (f) the in-process floor. Each is reported as throughput at the
endpoint's p95 target, and as a ratio to (b).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import urllib.request

from hotpath.errors import HotpathError
from hotpath.perf import analyzer
from hotpath.perf.analyzer import PerfPoint
from hotpath.perf.measure import endpoint_steps
from hotpath.perf.slo import Slo
from hotpath.perf.sweep import SweepPlan, sweep_endpoint, throughput_at_target
from hotpath.perf.reload import reconfigured
from hotpath.server.install import server_environment
from hotpath.server.ports import free_ports

COMPARE_CONCURRENCIES = (1, 2, 4, 8)


def default_config(config):
    """What a user gets without tuning: no dynamic batching, one instance."""
    config.ClearField("dynamic_batching")
    for group in config.instance_group:
        group.count = 1
    return config


@contextlib.contextmanager
def process(cmd: list[str], ready_url: str, env: dict | None = None, timeout_s: float = 90):
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        t0 = time.monotonic()
        while True:
            if proc.poll() is not None:
                raise HotpathError(f"{cmd[2] if len(cmd) > 2 else cmd[0]} exited: {proc.stderr.read()[-2000:]}")
            try:
                with urllib.request.urlopen(ready_url, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() - t0 > timeout_s:
                raise HotpathError(f"{ready_url} not ready after {timeout_s:.0f}s")
            time.sleep(0.5)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _external_sweep(model: str, url: str, protocol: str, slo: Slo, plan: SweepPlan, label: str, log) -> list[PerfPoint]:
    points = []
    for c in COMPARE_CONCURRENCIES:
        p = analyzer.run(model, url, "concurrency", c, slo.input_data, protocol=protocol, measurement=plan.measurement)
        p.label = label
        points.append(p)
        log(f"[perf] {label:>10} {model:<22} concurrency {c}: p50 {p.p50_ms:6.1f} ms  p95 {p.p95_ms:6.1f} ms"
            f"  {p.throughput:6.1f}/s")
    return points


def compare_endpoint(url: str, slo: Slo, plan: SweepPlan, tuned: list[PerfPoint],
                     log=print) -> tuple[list[PerfPoint], list[str]]:
    """Measure the alternatives for one endpoint; returns their points and a report section.

    `tuned` holds the points already measured for (b), the configuration in the specs."""
    alt_plan = SweepPlan(COMPARE_CONCURRENCIES, (), (), plan.measurement)
    steps = [m for m in endpoint_steps(slo.endpoint) if m != slo.endpoint]
    points: list[PerfPoint] = []
    notes: dict[str, str] = {}

    log(f"[perf] {slo.endpoint}: (a) default config")
    with reconfigured(url, {m: default_config for m in steps}):
        points += sweep_endpoint(url, slo, alt_plan, "default", steps=False, log=log)

    if slo.endpoint == "text_embedding":
        port, = free_ports(1)
        log(f"[perf] {slo.endpoint}: (c) FastAPI + uvicorn + ONNX Runtime")
        try:
            with process([sys.executable, "-m", "uvicorn", "hotpath.perf.alternatives.fastapi_app:app", "--port",
                          str(port), "--host", "127.0.0.1", "--log-level", "warning"],
                         f"http://127.0.0.1:{port}/v2/health/ready"):
                points += _external_sweep(slo.endpoint, f"127.0.0.1:{port}", "http", slo, alt_plan, "fastapi", log)
            notes["fastapi"] = "1 uvicorn worker; KServe v2 HTTP subset; perf_analyzer over HTTP"
        except HotpathError as exc:
            notes["fastapi"] = f"failed: {str(exc).splitlines()[0]}"
            log(f"[perf] FastAPI alternative failed: {exc}")

        http, grpc, metrics = free_ports(3)
        log(f"[perf] {slo.endpoint}: (d) PyTriton")
        try:
            with process([sys.executable, "-m", "hotpath.perf.alternatives.pytriton_app", "--http-port", str(http),
                          "--grpc-port", str(grpc), "--metrics-port", str(metrics)],
                         f"http://127.0.0.1:{http}/v2/models/text_embedding/ready", env=server_environment(),
                         timeout_s=180):
                points += _external_sweep(slo.endpoint, f"127.0.0.1:{grpc}", "grpc", slo, alt_plan, "pytriton", log)
            notes["pytriton"] = "one Python callable (tokenizer + ORT), dynamic batching 1 ms"
        except HotpathError as exc:
            notes["pytriton"] = f"failed: {str(exc).splitlines()[0]}"
            log(f"[perf] PyTriton alternative failed: {exc}")

        from hotpath.perf.alternatives.model_analyzer import run_model_analyzer
        from hotpath.perf.search_space import apply_knobs

        log(f"[perf] {slo.endpoint}: (e) Triton Model Analyzer")
        try:
            ma = run_model_analyzer("text_encoder", slo.p95_ms, slo.concurrency, log=log)
        except HotpathError as exc:
            log(f"[perf] model analyzer failed: {exc}")
            notes["model-analyzer"] = f"failed: {str(exc).splitlines()[0]}"
        else:
            with reconfigured(url, {"text_encoder": lambda c: apply_knobs(c, ma.best_settings)}):
                points += sweep_endpoint(url, slo, alt_plan, "model-analyzer", steps=False, log=log)
            notes["model-analyzer"] = (f"searched text_encoder only (no ensembles): {ma.configs_measured} configs in "
                                       f"{ma.search_seconds:.0f} s; best {ma.best_config} {ma.best_settings} "
                                       f"({ma.best_throughput:.1f}/s on the model alone)")
    floor_rows = _floor(slo, log)
    return points, _section(slo, tuned + points, floor_rows, notes)


def _floor(slo: Slo, log) -> list[dict]:
    log(f"[perf] {slo.endpoint}: (f) in-process floor")
    if slo.endpoint == "text_embedding":
        from hotpath.perf.alternatives.floor import measure_floor
        from hotpath.perf.payloads import short_texts

        return measure_floor(short_texts(), log=log)
    if slo.endpoint == "image_classification":
        from hotpath.perf.alternatives.image_floor import measure_image_floor

        return measure_image_floor(log=log)
    return []


def _section(slo: Slo, points: list[PerfPoint], floor_rows: list[dict], notes: dict[str, str]) -> list[str]:
    def at_target(label: str) -> float:
        return throughput_at_target([p for p in points if p.label == label and p.model == slo.endpoint], slo.p95_ms)

    def at_load(label: str) -> str:
        hit = [p for p in points if p.label == label and p.model == slo.endpoint and p.load == slo.concurrency
               and p.load_kind == "concurrency"]
        return f"{hit[0].p95_ms:.1f} ms" if hit else "-"

    tuned = at_target("tuned")
    names = {"default": "(a) Triton, default config", "tuned": "(b) Triton, tuned (hotpath)",
             "fastapi": "(c) FastAPI + uvicorn + ORT", "pytriton": "(d) PyTriton",
             "model-analyzer": "(e) Model Analyzer's best encoder config"}
    lines = ["", f"### {slo.endpoint}: side by side (same run, same load)", "",
             f"Throughput at the p95 target ({slo.p95_ms:g} ms), best over concurrency {list(COMPARE_CONCURRENCIES)}.", "",
             "| option | throughput at p95 target (infer/s) | ratio to (b) | p95 at concurrency "
             f"{slo.concurrency} | notes |", "|---|---|---|---|---|"]
    for label, title in names.items():
        if not any(p.label == label for p in points) and label not in notes:
            continue
        t = at_target(label)
        ratio = f"{t / tuned:.2f}" if tuned else "-"
        lines.append(f"| {title} | {t:.1f} | {ratio} | {at_load(label)} | {notes.get(label, '')} |")
    if floor_rows:
        ok = [r for r in floor_rows if r["p95_ms"] <= slo.p95_ms]
        best = max(ok or floor_rows, key=lambda r: r["throughput"])
        peak = max(floor_rows, key=lambda r: r["throughput"])
        t = best["throughput"] if ok else 0.0
        lines.append(f"| (f) in-process floor (no server) | {t:.1f} | {t / tuned:.2f} | - | best within target: batch "
                     f"{best['batch']}, spinning {'on' if best['spinning'] else 'off'}; peak {peak['throughput']:.1f}/s "
                     f"at batch {peak['batch']} |" if tuned else f"| (f) in-process floor | {t:.1f} | - | - | |")
        if tuned and t:
            lines += ["", f"(b) / (f) = {tuned / t:.2f} (goal {slo.floor_ratio_goal or 0.8:g})."]
    return lines
