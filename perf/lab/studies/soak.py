"""Soak: the endpoints together at a steady open-loop load with unique inputs, for minutes.

What it proves: nothing is lost (every request answered, no errors), p95 holds over time (per window,
against each endpoint's target), and memory is flat once the response cache is full (RSS of
tritonserver and of every model's stubs, sampled through the run). Unique inputs so that the
response cache keeps filling and every request is computed. `python -m perf study soak`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.client import text_input
from hotpath.server.stubs import rss_mb
from hotpath.sweeps.measure.open_loop import OpenLoopResult, run_open_loop
from hotpath.sweeps.registry import get_endpoint
from perf.lab.studies import runner

logger = logging.getLogger(__name__)

# Offered load per endpoint on the 2-core CPU profile: the endpoints together at about half of what
# the host sustains (each one's capacity_per_s in perf/slo.toml is measured alone).
DEFAULT_RATES = {"text_embedding": 150.0, "text_embedding_exact": 30.0, "image_classification": 40.0}


def unique_jpeg(base: bytes, i: int) -> bytes:
    """`base` with a JPEG comment segment carrying `i`: unique bytes (no cache hit), same decode work."""
    comment = f"hotpath soak {i}".encode()
    return base[:2] + b"\xff\xfe" + (len(comment) + 2).to_bytes(2, "big") + comment + base[2:]


def request_maker(endpoint: str, input_name: str):
    """i -> the inputs of the endpoint's i-th request, unique per i, from the perf registry's samples
    (texts get a suffix, images a JPEG comment)."""
    samples = get_endpoint(endpoint).samples()
    if isinstance(samples[0], bytes):
        return lambda i: [text_input(input_name, [unique_jpeg(samples[i % len(samples)], i)])]
    return lambda i: [text_input(input_name, [f"{samples[i % len(samples)]} (soak request {i})"])]


@dataclass
class MemorySample:
    t_s: float
    rss_mb: dict[str, float]
    cache_util: float | None = None  # nv_cache_util, 0..1


@dataclass
class SoakResult:
    duration_s: float
    rates: dict[str, float]
    runs: dict[str, OpenLoopResult] = field(default_factory=dict)
    memory: list[MemorySample] = field(default_factory=list)

    def window_p95_ms(self, endpoint: str, window_s: float) -> list[tuple[float, int, float]]:
        """(window start s, answered, p95 ms of OK) per window of sending time."""
        outcomes = self.runs[endpoint].outcomes
        out = []
        for start in np.arange(0.0, self.duration_s, window_s):
            lat = [o.latency_s for o in outcomes if start <= o.sent_s < start + window_s and o.status == "OK"]
            out.append((float(start), len(lat), float(np.percentile(lat, 95) * 1e3) if lat else float("nan")))
        return out

    def errors(self) -> dict[str, dict[str, int]]:
        """Non-OK outcomes per endpoint and status."""
        out: dict[str, dict[str, int]] = {}
        for endpoint, run in self.runs.items():
            for o in run.outcomes:
                if o.status != "OK":
                    out.setdefault(endpoint, {}).setdefault(o.status, 0)
                    out[endpoint][o.status] += 1
        return out

    def lost(self) -> dict[str, int]:
        """Requests sent but never answered within the drain time after the last send, per endpoint."""
        return {e: int(r.rate * r.duration_s) - len(r.outcomes) for e, r in self.runs.items()}

    def cache_full_at(self, share: float = 0.99) -> float | None:
        """Seconds into the run of the first sample with the response cache at `share` of its final fill."""
        utils = [s for s in self.memory if s.cache_util is not None]
        if not utils:
            return None
        final = max(s.cache_util for s in utils)
        return next(s.t_s for s in utils if s.cache_util >= share * final)

    def in_flight_at(self, t_s: float) -> int:
        """Requests sent but not yet answered `t_s` into the run, over every endpoint."""
        return sum(o.sent_s <= t_s < o.sent_s + o.latency_s for run in self.runs.values() for o in run.outcomes)

    def fell_behind(self) -> bool:
        """More than a second of the offered load still unanswered when sending stopped: a backlog grew."""
        return self.in_flight_at(self.duration_s) > sum(self.rates.values())

    def settled(self, settled_from: float = 0.5) -> list[MemorySample]:
        """The samples memory is judged on: from `settled_from` of the run with the response cache full, or,
        when the host fell behind, from the end of sending (the drain: no new request, the backlog answered).

        RSS that grows while the cache or a backlog fills is not a leak (a slow host fills the cache late and
        queues requests in the server until the load stops); what grows while they are answered is."""
        start = max(settled_from * self.duration_s, self.cache_full_at() or 0.0)
        if self.fell_behind():
            start = max(start, self.duration_s)
        return [s for s in self.memory if s.t_s >= start]

    def growth_mb(self, process: str, settled_from: float = 0.5) -> float:
        """RSS growth of one process over the settled samples: what "flat once the cache is full" is judged on."""
        settled = [s for s in self.settled(settled_from) if process in s.rss_mb]
        if len(settled) < 2:
            return float("nan")
        return settled[-1].rss_mb[process] - min(s.rss_mb[process] for s in settled)


def _target(targets_ms: dict[str, float], endpoint: str) -> str:
    return f"{targets_ms[endpoint]:.0f}" if endpoint in targets_ms else "-"


def _cache_util(metrics_url: str | None) -> float | None:
    if not metrics_url:
        return None
    import urllib.request

    try:
        with urllib.request.urlopen(metrics_url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("nv_cache_util"):
                    return float(line.rsplit(" ", 1)[1])
    except OSError:
        return None
    return None


def run_soak(url: str, server_pid: int, duration_s: float, rates: dict[str, float] | None = None,
             sample_s: float = 5.0, metrics_url: str | None = None, tail_s: float = 0.0,
             log=logger.info) -> SoakResult:
    """Offer `rates` (requests/s per endpoint) together for `duration_s`, sampling RSS every `sample_s`, and
    `tail_s` longer once every request is answered (so a drain has samples to be judged on)."""
    rates = rates or DEFAULT_RATES
    result = SoakResult(duration_s, dict(rates))
    makers = {}
    with grpcclient.InferenceServerClient(url) as client:  # one warm request each: first-shape costs
        for endpoint in rates:
            makers[endpoint] = request_maker(endpoint, client.get_model_metadata(endpoint).inputs[0].name)
            client.infer(endpoint, makers[endpoint](-1))
    stop = threading.Event()
    started = time.monotonic()

    def sample():
        while True:
            result.memory.append(MemorySample(time.monotonic() - started, rss_mb(server_pid),
                                              _cache_util(metrics_url)))
            if stop.wait(sample_s):
                return

    def drive(endpoint: str):
        result.runs[endpoint] = run_open_loop(url, endpoint, makers[endpoint], rates[endpoint],
                                              duration_s, prebuild=False, raise_unanswered=False)

    sampler = threading.Thread(target=sample, daemon=True)
    drivers = [threading.Thread(target=drive, args=(e,)) for e in rates]
    sampler.start()
    for t in drivers:
        t.start()
    for t in drivers:
        t.join()
    time.sleep(tail_s)
    stop.set()
    sampler.join()
    missing = [e for e in rates if e not in result.runs]
    if missing:
        raise RuntimeError(f"soak: the load for {', '.join(missing)} did not finish (see the error above)")
    log(f"[soak] {duration_s:.0f} s done: " + "; ".join(f"{e}: {r.summary()}" for e, r in result.runs.items()))
    return result


def write_report(result: SoakResult, targets_ms: dict[str, float], path: Path, window_s: float,
                 command: str, host: str) -> Path:
    """Markdown report (+ PNG of p95 and RSS over time) next to it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for endpoint in result.runs:
        windows = result.window_p95_ms(endpoint, window_s)
        ax1.plot([w[0] + window_s / 2 for w in windows], [w[2] for w in windows], marker="o", label=endpoint)
        if endpoint in targets_ms:
            ax1.axhline(targets_ms[endpoint], linestyle="--", linewidth=0.8)
    ax1.set_ylabel(f"p95 per {window_s:.0f} s window (ms)")
    ax1.legend()
    processes = sorted({p for s in result.memory for p in s.rss_mb})
    for process in processes:
        ax2.plot([s.t_s for s in result.memory], [s.rss_mb.get(process, np.nan) for s in result.memory],
                 label=process)
    ax2.set_ylabel("RSS (MB)")
    ax2.set_xlabel("seconds")
    ax2.legend(fontsize=7)
    png = path.with_suffix(".png")
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)

    lines = [f"# Soak: {result.duration_s:.0f} s, endpoints together, unique inputs", "",
             f"Command: `{command}`. Host: {host}.", "",
             "| endpoint | offered /s | requests | OK | errors | lost | p95 ms (whole run) | target ms |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    errors, lost = result.errors(), result.lost()
    for endpoint, run in result.runs.items():
        lines.append(f"| {endpoint} | {run.rate:.0f} | {len(run.outcomes)} | {len(run.of('OK'))} | "
                     f"{sum(errors.get(endpoint, {}).values())} {errors.get(endpoint, '')} | {lost[endpoint]} | "
                     f"{run.latency_ms('OK', 95):.1f} | {_target(targets_ms, endpoint)} |")
    lines += ["", "The targets hold for each endpoint alone at its declared concurrency (perf/slo.toml); here the "
              "endpoints share the host, so a window above its target says what mixed traffic costs, not a miss "
              "of the gate (`make perf-check`).",
              "", f"p95 per {window_s:.0f} s window (ms, by sending time):", "",
              "| window | " + " | ".join(result.runs) + " |", "|---|" + "---:|" * len(result.runs)]
    per = {e: result.window_p95_ms(e, window_s) for e in result.runs}
    for i, (start, _, _) in enumerate(next(iter(per.values()))):
        lines.append(f"| {start:.0f}-{start + window_s:.0f} s | "
                     + " | ".join(f"{per[e][i][2]:.1f}" for e in result.runs) + " |")
    lines += ["", "RSS (MB) over time (tritonserver and each model's stubs; cache = nv_cache_util):", "",
              "| t s | cache | " + " | ".join(processes) + " |", "|---|---:|" + "---:|" * len(processes)]
    step = max(1, len(result.memory) // 12)
    for s in result.memory[::step] + ([result.memory[-1]] if (len(result.memory) - 1) % step else []):
        cache = "" if s.cache_util is None else f"{s.cache_util:.2f}"
        lines.append(f"| {s.t_s:.0f} | {cache} | " + " | ".join(f"{s.rss_mb.get(p, float('nan')):.0f}"
                                                            for p in processes) + " |")
    since = f"{result.settled()[0].t_s:.0f} s" if result.settled() else "the second half"
    lines += ["", f"RSS growth from {since} (second half, response cache full) to the end (MB):",
              "", "| process | growth MB |", "|---|---:|"]
    lines += [f"| {p} | {result.growth_mb(p):+.1f} |" for p in processes]
    lines += ["", f"![p95 and RSS over time]({png.name})", ""]
    path.write_text("\n".join(lines))
    return path


def main(argv: list[str] | None = None) -> int:
    import os

    from hotpath.server.local_triton import LocalTriton
    from hotpath.server.ports import ServerPorts, free_ports
    from hotpath.sweeps.measure.host_load import measure_others, require_quiet
    from hotpath.tuning.slo import load_slos

    parser = runner.parser("soak", __doc__)
    parser.add_argument("--duration", type=float, default=300.0, help="seconds of load (default 300)")
    parser.add_argument("--window", type=float, default=30.0, help="p95 window in seconds (default 30)")
    parser.add_argument("--cache-mb", type=int, default=16,
                        help="response cache size for the soak's server: small so it fills early (default 16)")
    parser.add_argument("--report", type=Path, default=paths.ROOT / "perf" / "reports" / "soak.md")
    args = parser.parse_args(argv)
    quiet = require_quiet(args.allow_busy)
    http, grpc, metrics = free_ports(3)
    server = LocalTriton(ports=ServerPorts(http=http, grpc=grpc, metrics=metrics), cache_bytes=args.cache_mb * 2**20)
    during = []   # CPU of every process outside this one's tree while the load runs: was the host ours?
    watcher = threading.Thread(target=lambda: during.append(measure_others(window_s=args.duration)), daemon=True)
    with server:
        watcher.start()
        result = run_soak(server.grpc_url, server.process.pid, args.duration, metrics_url=server.metrics_url)
        watcher.join(timeout=30)
    targets = {e: s.p95_ms for e, s in load_slos("cpu").items()}
    command = "python -m perf study soak " + " ".join(argv or [])
    host = f"{os.cpu_count()} cores, before the run: {quiet.summary()}"
    if during:
        host += f"; during the run: {during[0].summary()}"
    report = write_report(result, targets, args.report, args.window, command.strip(), host)
    print(f"[soak] report: {report}")
    errors, lost = result.errors(), result.lost()
    return 0 if not errors and not any(lost.values()) else 1
