"""perf/reports/<name>.md with matplotlib plots: latency-throughput, p95 vs load, per-step breakdown."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hotpath.sweeps.measure.floor import Floor  # noqa: E402
from hotpath.sweeps.measure.perf_analyzer import PerfPoint  # noqa: E402
from hotpath.sweeps.measure.server_stats import PHASES  # noqa: E402
from hotpath.sweeps.measure.sweep import throughput_at_target  # noqa: E402
from hotpath.tuning.slo import Slo  # noqa: E402


def _closed_loop(points: list[PerfPoint], model: str, label: str) -> list[PerfPoint]:
    return sorted((p for p in points if p.model == model and p.label == label and p.load_kind == "concurrency"),
                  key=lambda p: p.load)


def _finish(fig, ax, path: Path) -> None:
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_latency_throughput(points: list[PerfPoint], slo: Slo, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(p.label for p in points if p.model == slo.endpoint):
        curve = _closed_loop(points, slo.endpoint, label)
        if curve:
            line, = ax.plot([p.throughput for p in curve], [p.p95_ms for p in curve], "o-", label=f"{label} p95")
            ax.plot([p.throughput for p in curve], [p.p50_ms for p in curve], "--", color=line.get_color(), alpha=0.6)
    ax.axhline(slo.p95_ms, color="red", linestyle=":", label=f"target p95 {slo.p95_ms:g} ms")
    ax.set(xlabel="throughput (infer/s)", ylabel="latency (ms); dashed = p50", title=f"{slo.endpoint}: latency vs throughput")
    _finish(fig, ax, path)


def plot_p95_vs_load(points: list[PerfPoint], slo: Slo, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label in dict.fromkeys(p.label for p in points if p.model == slo.endpoint):
        curve = _closed_loop(points, slo.endpoint, label)
        if curve:
            ax.plot([p.load for p in curve], [p.p95_ms for p in curve], "o-", label=label)
    ax.axhline(slo.p95_ms, color="red", linestyle=":", label=f"target {slo.p95_ms:g} ms")
    ax.axvline(slo.concurrency, color="grey", linestyle=":", label=f"declared load (concurrency {slo.concurrency})")
    ax.set(xlabel="concurrency", ylabel="p95 latency (ms)", title=f"{slo.endpoint}: p95 vs load")
    _finish(fig, ax, path)


def plot_breakdown(points: list[PerfPoint], slo: Slo, label: str, path: Path) -> None:
    curve = _closed_loop(points, slo.endpoint, label)
    steps = [m for m in (curve[0].steps if curve else {}) if m != slo.endpoint]
    fig, axes = plt.subplots(1, max(len(steps), 1), figsize=(4 * max(len(steps), 1), 4), squeeze=False)
    for ax, step in zip(axes[0], steps):
        bottom = [0.0] * len(curve)
        for phase in PHASES:
            values = [p.steps.get(step, {}).get(f"{phase}_us", 0.0) / 1e3 for p in curve]
            ax.bar([str(int(p.load)) for p in curve], values, bottom=bottom, label=phase)
            bottom = [b + v for b, v in zip(bottom, values)]
        ax.set(title=step, xlabel="concurrency", ylabel="ms per request")
        ax.legend(fontsize=7)
    fig.suptitle(f"{slo.endpoint} ({label}): server time per step")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _table(points: list[PerfPoint]) -> list[str]:
    rows = ["| config | model | load | infer/s | p50 ms | p90 ms | p95 ms | p99 ms | server per step (queue + infer, ms; avg batch) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        steps = "; ".join(f"{m}: {s['queue_us'] / 1e3:.1f} + {s['compute_infer_us'] / 1e3:.1f} (b {s['avg_batch']:.1f})"
                          for m, s in p.steps.items() if m != p.model or len(p.steps) == 1)
        kind = "c" if p.load_kind == "concurrency" else "rate"
        rows.append(f"| {p.label} | {p.model} | {kind} {p.load:g} | {p.throughput:.1f} | {p.p50_ms:.1f} | {p.p90_ms:.1f} "
                    f"| {p.p95_ms:.1f} | {p.p99_ms:.1f} | {steps} |")
    return rows


def floor_section(slo: Slo, floor: Floor, points: list[PerfPoint], label: str = "tuned") -> list[str]:
    """The floor measured in this run, and hotpath's ratios to it."""
    own = [p for p in points if p.model == slo.endpoint and p.label == label and p.load_kind == "concurrency"]
    ours = throughput_at_target(own, slo.p95_ms)
    best = floor.throughput(slo.p95_ms)
    one = [p for p in own if p.load == 1]
    ratios = [f"throughput at the p95 target {ours:.1f}/s = {ours / best:.2f}x the floor's {best:.1f}/s"
              if best else "the floor meets no batch within the p95 target"]
    if slo.floor_ratio_goal and best:
        ratios[0] += f" (goal {slo.floor_ratio_goal:g}x)"
    if one and floor.single_p50_ms():
        ratios.append(f"p50 at concurrency 1 {one[0].p50_ms:.2f} ms = {one[0].p50_ms / floor.single_p50_ms():.2f}x "
                      f"the floor's batch-1 p50 {floor.single_p50_ms():.2f} ms")
    lines = ["", f"### {slo.endpoint}: in-process floor (same run, no server)", "",
             f"The endpoint's whole pipeline in one process (same ONNX files and pre-processing), {floor.unit} per "
             f"second by batch size: {floor.describe(slo.p95_ms)}.", "",
             f"hotpath ({label}): {'; '.join(ratios)}.", "",
             f"| batch | ORT spinning | {floor.unit}/s | batch p50 ms | batch p95 ms |", "|---|---|---|---|---|"]
    lines += [f"| {r['batch']} | {'on' if r['spinning'] else 'off'} | {r['throughput']:.1f} | {r['p50_ms']:.2f} | "
              f"{r['p95_ms']:.2f} |" for r in floor.rows]
    return lines


def write_report(name: str, results: dict[str, list[PerfPoint]], slos: dict[str, Slo], out_dir: Path,
                 preamble: list[str] | None = None, extra_sections: list[str] | None = None) -> Path:
    """Write `<out_dir>/<name>.md` and its PNGs (in `<out_dir>/<name>/`); returns the markdown path."""
    img_dir = out_dir / name
    img_dir.mkdir(parents=True, exist_ok=True)
    lines = [f"# perf report: {name}", "", *(preamble or [])]
    for endpoint, points in results.items():
        slo = slos[endpoint]
        lines += ["", f"## {endpoint}", "",
                  f"Target: p95 <= {slo.p95_ms:g} ms at concurrency {slo.concurrency}.", ""]
        labels = list(dict.fromkeys(p.label for p in points if p.model == endpoint))
        lines += ["| config | throughput at the p95 target (infer/s) | p95 at declared load |", "|---|---|---|"]
        for label in labels:
            own = [p for p in points if p.model == endpoint and p.label == label]
            at_load = [p for p in own if p.load_kind == "concurrency" and p.load == slo.concurrency]
            lines.append(f"| {label} | {throughput_at_target(own, slo.p95_ms):.1f} | "
                         f"{f'{at_load[0].p95_ms:.1f} ms' if at_load else '-'} |")
        for kind, plot in (("latency-throughput", plot_latency_throughput), ("p95-vs-load", plot_p95_vs_load)):
            png = img_dir / f"{endpoint}-{kind}.png"
            plot(points, slo, png)
            lines += ["", f"![{endpoint} {kind}]({name}/{png.name})"]
        if labels:
            png = img_dir / f"{endpoint}-breakdown.png"
            plot_breakdown(points, slo, labels[0], png)
            lines += ["", f"![{endpoint} breakdown]({name}/{png.name})"]
        lines += ["", *_table(points)]
    lines += ["", *(extra_sections or [])]
    path = out_dir / f"{name}.md"
    path.write_text("\n".join(lines) + "\n")
    return path
