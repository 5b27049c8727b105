"""`hotpath perf --explain ENDPOINT`: where each request's time goes, per step, at low and high load.

For each concurrency: perf_analyzer drives the endpoint (response cache off) while Triton traces
every request (trace API, level TIMESTAMPS) and the statistics API counts per-step time; the
Python stubs log their execute() spans when the server was started with stub timing. The result is
a table of consecutive segments (frontend, ensemble hand-offs, each step's queue, tensor transfer to
and from the stub, the step's own work) whose medians show what to remove, plus a timeline PNG.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.runtime.timing import read_logs
from hotpath.server.admin import admin_headers
from hotpath.sweeps.explain.trace import SegmentStats, read_trace_files, request_segments, summarize
from hotpath.sweeps.measure.perf_analyzer import Measurement, PerfPoint
from hotpath.sweeps.measure.point import measure, response_cache_off

logger = logging.getLogger(__name__)

DEFAULT_CONCURRENCIES = (1, 8)


@dataclass
class Explained:
    endpoint: str
    concurrency: int
    point: PerfPoint
    segments: list[SegmentStats]
    traced: int
    server_p50_us: float
    stub_timing: bool
    notes: list[str] = field(default_factory=list)

    @property
    def outside_server_us(self) -> float:
        """Client p50 minus the server's median span: client library, loopback, perf_analyzer."""
        return max(0.0, self.point.p50_ms * 1e3 - self.server_p50_us)


def trace_file_of(client: grpcclient.InferenceServerClient) -> Path:
    settings = client.get_trace_settings(as_json=True, headers=admin_headers()).get("settings", {})
    value = (settings.get("trace_file", {}).get("value") or [""])[0]
    if not value:
        raise HotpathError("the server has no trace file (Triton accepts it only at startup); serve with "
                           "`hotpath serve`, which starts tritonserver with one and tracing off")
    return Path(value)


def traced_run(url: str, endpoint: str, concurrency: int, input_data: Path | None, measurement: Measurement,
               stub_dir: Path | None, warmup_fraction: float = 0.05) -> Explained:
    """Measure one concurrency with every request traced; returns its segment statistics."""
    client = grpcclient.InferenceServerClient(url)
    trace_file = trace_file_of(client)
    stub_before = {m: len(r) for m, r in read_logs(stub_dir).items()} if stub_dir and stub_dir.exists() else {}
    t0 = time.monotonic_ns()
    # log_frequency 0: keep traces in memory until tracing is switched off, then write them at once.
    client.update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "trace_count": "-1",
                                           "log_frequency": "0"}, headers=admin_headers())
    try:
        point = measure(url, endpoint, "concurrency", concurrency, input_data, measurement)
    finally:
        client.update_trace_settings(settings={"trace_level": ["OFF"]}, headers=admin_headers())
    t1 = time.monotonic_ns()
    roots = _wait_for_traces(trace_file, endpoint, t0, t1)
    roots = roots[int(len(roots) * warmup_fraction):]
    stub = {}
    if stub_dir and stub_dir.exists():
        stub = {m: rows[stub_before.get(m, 0):] for m, rows in read_logs(stub_dir).items()}
    requests, skipped = [], 0
    for root in roots:
        try:
            requests.append(request_segments(root, stub))
        except (KeyError, ValueError):
            skipped += 1
    if not requests:
        raise HotpathError(f"no complete traces of {endpoint} in {trace_file}")
    spans = [(r[-1].end_ns - r[0].start_ns) / 1e3 for r in requests]
    notes = [f"{skipped} incomplete traces skipped"] if skipped else []
    return Explained(endpoint, concurrency, point, summarize(requests), len(requests), statistics.median(spans),
                     bool(stub), notes)


def _wait_for_traces(trace_file: Path, endpoint: str, t0: int, t1: int, timeout_s: float = 10.0):
    """Root traces of `endpoint` that started inside [t0, t1] (the file holds earlier runs too)."""
    deadline = time.monotonic() + timeout_s
    while True:
        files = sorted(trace_file.parent.glob(trace_file.name + "*"))
        try:
            roots = [r for r in read_trace_files(files)
                     if r.model == endpoint and t0 <= r.ts.get("REQUEST_START", 0) <= t1]
        except ValueError:   # the server is still writing the file
            roots = []
        if roots or time.monotonic() > deadline:
            return roots
        time.sleep(0.2)


def explain(url: str, endpoint: str, input_data: Path | None = None,
            concurrencies=DEFAULT_CONCURRENCIES, measurement: Measurement = Measurement(),
            stub_dir: Path | None = None, log=logger.info) -> list[Explained]:
    """Traced runs of `endpoint` at each concurrency, response cache off."""
    results = []
    with response_cache_off(url, endpoint):
        for c in concurrencies:
            log(f"[explain] {endpoint}: concurrency {c}, every request traced")
            r = traced_run(url, endpoint, c, input_data, measurement, stub_dir)
            log(f"[explain] {endpoint} c={c}: p50 {r.point.p50_ms:.2f} ms, p95 {r.point.p95_ms:.2f} ms, "
                f"{r.point.throughput:.1f}/s; {r.traced} traces")
            results.append(r)
    return results


def format_breakdown(results: list[Explained]) -> list[str]:
    """Markdown: one row per segment, median (and p95) per concurrency."""
    if not results:
        return []
    head = "| where | segment | " + " | ".join(f"c={r.concurrency} p50 us | c={r.concurrency} p95 us"
                                                for r in results) + " |"
    lines = [head, "|---|---|" + "---:|---:|" * len(results)]
    rows: dict[tuple[str, str], list[str]] = {}
    for i, r in enumerate(results):
        for s in r.segments:
            rows.setdefault((s.owner, s.name), ["-", "-"] * len(results))
            rows[(s.owner, s.name)][2 * i:2 * i + 2] = [f"{s.p50_us:,.0f}", f"{s.p95_us:,.0f}"]
    rows[("client", "outside the server")] = [v for r in results for v in (f"{r.outside_server_us:,.0f}", "")]
    for (owner, name), values in rows.items():
        lines.append(f"| {owner} | {name} | " + " | ".join(values) + " |")
    lines.append("| **total** | client p50 / p95 | " + " | ".join(
        f"**{r.point.p50_ms * 1e3:,.0f}** | **{r.point.p95_ms * 1e3:,.0f}**" for r in results) + " |")
    return lines


def format_statistics(results: list[Explained]) -> list[str]:
    """Markdown: Triton statistics API per step (averages per request), the cross-check of the trace."""
    lines = ["| concurrency | model | requests | avg batch | queue us | compute input us | compute infer us "
             "| compute output us |", "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        for model, s in r.point.steps.items():
            lines.append(f"| {r.concurrency} | {model} | {s['requests']:.0f} | {s['avg_batch']:.2f} | "
                         f"{s['queue_us']:,.0f} | {s['compute_input_us']:,.0f} | {s['compute_infer_us']:,.0f} | "
                         f"{s['compute_output_us']:,.0f} |")
    return lines


_COLORS = {"queue": "#d62728", "compute input": "#ff7f0e", "to stub": "#ff7f0e", "from stub": "#ff7f0e",
           "compute output": "#ff7f0e", "execute()": "#1f77b4", "compute infer": "#1f77b4"}


def draw_timeline(results: list[Explained], path: Path) -> Path:
    """One panel per concurrency: median start and duration of each segment, one lane per owner."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 1, figsize=(11, 2.2 + 1.1 * len(results[0].segments) / 3),
                             squeeze=False)
    for ax, r in zip(axes[:, 0], results):
        owners = list(dict.fromkeys(s.owner for s in r.segments))
        start = 0.0  # segments tile: each starts where the previous median ended
        for s in r.segments:
            y = owners.index(s.owner)
            ax.broken_barh([(start / 1e3, max(s.p50_us, 1) / 1e3)], (y - 0.35, 0.7),
                           facecolors=_COLORS.get(s.name, "#7f7f7f"), edgecolor="white")
            if s.p50_us / 1e3 > 0.04 * max(1e-3, r.server_p50_us / 1e3):
                ax.text((start + s.p50_us / 2) / 1e3, y, s.name, ha="center", va="center", fontsize=7,
                        color="white")
            start += s.p50_us
        ax.set_yticks(range(len(owners)), owners)
        ax.invert_yaxis()
        ax.set_xlabel("ms since the frontend read the request (segment medians, laid end to end)")
        ax.set_title(f"{r.endpoint}, concurrency {r.concurrency}: client p50 {r.point.p50_ms:.2f} ms, "
                     f"server p50 {r.server_p50_us / 1e3:.2f} ms, {r.point.throughput:.0f}/s", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in ("#d62728", "#ff7f0e", "#1f77b4", "#7f7f7f")]
    fig.legend(handles, ["queue", "tensor transfer", "model work", "frontend / hand-off"], loc="lower right",
               fontsize=8, ncols=4)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_report(results: list[Explained], variant_note: str = "", name: str | None = None) -> Path:
    """perf/reports/explain-<endpoint>.md with the breakdown table, statistics and the timeline."""
    endpoint = results[0].endpoint
    name = name or f"explain-{endpoint}"
    reports = paths.ROOT / "perf" / "reports"
    png = draw_timeline(results, reports / "explain" / f"{name}.png")
    lines = [f"# Where the time goes: {endpoint}", "",
             f"`hotpath perf --explain {endpoint}`: perf_analyzer 2.50 over gRPC, closed loop, response cache off, "
             "every request traced (Triton trace API, level TIMESTAMPS); medians over the traced requests. "
             "Segments are consecutive: they cover the request from the gRPC frontend reading it to the "
             "response sent; `outside the server` is the client's p50 minus the server span's median.", ""]
    if variant_note:
        lines += [variant_note, ""]
    lines += format_breakdown(results) + ["", f"![timeline](explain/{png.name})", "",
                                          "Triton statistics API over the same runs (averages per request):", ""]
    lines += format_statistics(results)
    for r in results:
        stub = "stub execute() spans logged" if r.stub_timing else "no stub timing (server started without it)"
        lines.append(f"\nc={r.concurrency}: {r.traced} traced requests; {stub}"
                     + (f"; {'; '.join(r.notes)}" if r.notes else ""))
    path = reports / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
