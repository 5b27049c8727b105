"""text_generation through every door, side by side in one run, with one light client for all.

  hotpath grpc     Triton's gRPC stream (hotpath.client.GenerationClient: tritonclient, one stream per request)
  hotpath openai   hotpath's OpenAI API, `/v1/chat/completions` streamed (SSE), in front of the same Triton
  vLLM server      vLLM's own OpenAI server (`.venv-vllm`), the same model directory and engine settings
  llama.cpp        node-llama-cpp on the same GGUF (Q4_1), the chat's prompt token ids (its /generate)

Every door gets the same chat prompts (hotpath.sweeps.measure.streaming.PROMPTS), greedy, `--max-tokens`,
from Python threads (hotpath.sweeps.measure.streaming.run_load): a client that costs little beside the
servers on a 2-core host, where AIPerf's own processes took a share of the cores (see the AIPerf section).
One system is up at a time (hotpath's two doors share its server); at each concurrency the doors of a
system alternate `--repeats` times, so drift hits both alike. The OpenAI door's own cost per request is
the difference to the gRPC door: TTFT (receive, parse, the gRPC stream's set-up, the first relay) and ITL
(the relay of each token: a gRPC response parsed, a chunk built and written as SSE). The API's own phase
histogram (hotpath.openai_api.stream_phases), read before and after each of its points, breaks a request
down from inside the API.

    python -m perf study generation_doors                      # c=1 and 8; section of perf/reports/text_generation.md
    python -m perf study generation_doors --system hotpath --concurrency 8 --repeats 3
"""

from __future__ import annotations

import os
import sys
import time
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from hotpath import paths
from hotpath.sweeps.measure.host_load import Sample, busiest, command_line, read_proc
from hotpath.sweeps.measure.streaming import (
    StreamingStats,
    StreamRecord,
    markdown_table,
    ndjson_sender,
    run_load,
    sse_sender,
    summarize,
    triton_sender,
)
from perf.lab.compare.generation import (
    AIPERF_SYSTEMS,
    ENDPOINT,
    _uptime,
    costs_table,
    system_up,
    tree_rss_mb,
    wait_quiet,
    write_section,
)
from perf.lab.compare.served_model import served_dtype
from perf.lab.studies import runner

DOORS_BEGIN = "<!-- every door: written by `python -m perf study generation_doors` -->"
DOORS_END = "<!-- every door: end -->"
CONCURRENCY = (1, 8)
PHASE_METRIC = "hotpath_openai_generation_phase_seconds"


def phase_totals(door) -> dict[str, tuple[float, float]]:
    """{phase: (seconds, count)} so far from an OpenAI door's /metrics ({}: a door without the histogram)."""
    from prometheus_client.parser import text_string_to_metric_families

    if door.kind != "openai-chat":
        return {}
    try:
        with urllib.request.urlopen(door.url + "/metrics", timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    totals: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != PHASE_METRIC:
            continue
        for sample in family.samples:
            slot = {PHASE_METRIC + "_sum": 0, PHASE_METRIC + "_count": 1}.get(sample.name)
            if slot is not None:
                totals.setdefault(sample.labels["phase"], [0.0, 0.0])[slot] = sample.value
    return {phase: (t[0], t[1]) for phase, t in totals.items()}


def add_phases(point: dict, before: dict, after: dict) -> None:
    """Adds to `point` what each phase gained from `before` to `after` (phase_totals' snapshots)."""
    for phase, (seconds, count) in after.items():
        was, have = before.get(phase, (0.0, 0.0)), point.get(phase, (0.0, 0.0))
        point[phase] = (have[0] + seconds - was[0], have[1] + count - was[1])


def phases_table(phases: dict[tuple[str, int], dict[str, tuple[float, float]]]) -> list[str]:
    """Per request: each phase's milliseconds (its sum over the point / the requests); per chunk: relay and
    write in microseconds."""
    from hotpath.openai_api.stream_phases import PHASES

    phases = {key: totals for key, totals in phases.items() if totals}
    if not phases:
        return []
    lines = ["Inside the OpenAI door, per request (ms; relay and write also per chunk, in us), from its "
             f"`{PHASE_METRIC}` histogram:\n",
             "| door | c | " + " | ".join(PHASES) + " | relay / chunk | write / chunk |",
             "|---|---:|" + "---:|" * (len(PHASES) + 2)]
    for (label, c), totals in sorted(phases.items()):
        requests = totals.get("receive", (0.0, 0.0))[1] or 1.0
        per_request = [f"{totals.get(p, (0.0, 0.0))[0] * 1e3 / requests:.2f}" for p in PHASES]
        per_chunk = [f"{t[0] * 1e6 / t[1]:.0f}" if (t := totals.get(p)) and t[1] else "-" for p in ("relay", "write")]
        lines.append(f"| {label} | {c} | " + " | ".join(per_request + per_chunk) + " |")
    return lines


# Whose CPU a token costs: each process on the host, named for its part in a stack (the first match wins).
ROLES = (("tritonserver", "tritonserver"), ("triton_python_backend_stub", "Triton stub"),
         ("VLLM::Worker", "vLLM worker (forward)"), ("EngineCore", "vLLM EngineCore"),
         ("engine_process.py", "engine process (AsyncLLM)"),
         ("hotpath.openai_api", "hotpath OpenAI API"), ("vllm.entrypoints", "vLLM API server (AsyncLLM)"),
         ("node", "llama.cpp (node)"))


def role(name: str, command: str, pid: int) -> str:
    """The part a process plays: the client (this process: the load's threads), a ROLES entry, or other."""
    if pid == os.getpid():
        return "client"
    return next((label for key, label in ROLES if key in f"{name} {command}"), "other")


def add_cpu(point: dict, before: Sample, after: Sample) -> None:
    """Adds to `point` the CPU seconds each role spent between two host_load samples of every process (one
    that began in between counts from zero; one that ended is lost, as the point's own processes never end)."""
    elapsed = after.taken_at - before.taken_at
    for p in busiest(before, after, exclude=set()):
        key = role(p.name, command_line(p.pid, width=200), p.pid)
        point[key] = point.get(key, 0.0) + p.cores * elapsed


def cpu_table(cpu: dict[tuple[str, int], dict[str, float]], tokens: dict[tuple[str, int], int]) -> list[str]:
    """CPU milliseconds per streamed token by role, per door and concurrency: where each stack spends it."""
    keys = [k for k in sorted(cpu) if tokens.get(k)]
    if not keys:
        return []
    used = [r for r in ("client", *dict(ROLES).values(), "other") if any(cpu[k].get(r, 0.0) >= 1e-3 for k in keys)]
    lines = ["CPU per streamed token, by process (ms of CPU, user + system, summed over the host's processes "
             "by their part; the client is this study's own threads):\n",
             "| door | c | " + " | ".join(used) + " | total | server side (no client) |",
             "|---|---:|" + "---:|" * (len(used) + 2)]
    for key in keys:
        per = {r: cpu[key].get(r, 0.0) * 1e3 / tokens[key] for r in used}
        total = sum(per.values())
        lines.append(f"| {key[0]} | {key[1]} | " + " | ".join(f"{per[r]:.2f}" for r in used)
                     + f" | {total:.2f} | {total - per.get('client', 0.0) - per.get('other', 0.0):.2f} |")
    return lines


def sender(door, max_tokens: int) -> Callable[[str], StreamRecord] | None:
    """The light client for a door (None: a door only AIPerf drives, Triton's KServe generate_stream)."""
    if door.kind == "triton-grpc":
        return triton_sender(door.url, ENDPOINT, max_tokens)
    if door.kind == "openai-chat":
        return sse_sender(door.url, ENDPOINT, max_tokens)
    if door.kind == "openai-completions":   # llama.cpp: the chat's token ids, as every other door's template makes
        from perf.lab.compare.alternatives import llama_cpp

        url = urlsplit(door.url)
        return ndjson_sender(url.hostname, url.port, max_tokens, payload=llama_cpp.token_payload(max_tokens))
    return None


def measure(systems: tuple[str, ...], concurrency: tuple[int, ...], rounds: int, repeats: int, max_tokens: int,
            log: Callable[[str], None] = print):
    """Rows (one per door and concurrency), {system: (load-to-ready s, peak RSS MiB)}, run notes, and
    {(door, c): {phase: (seconds, count)}} of the doors with a phase histogram, and {(door, c): {role: CPU
    seconds}} with {(door, c): tokens streamed}."""
    rows, costs, notes, phases, cpu, tokens = [], {}, [], {}, {}, {}
    for name in systems:
        wait_quiet(log)
        with system_up(name, log) as (doors, pid, load_s):
            log(f"[doors] {name}: ready in {load_s:.1f} s")
            senders = [(d, s) for d in doors if (s := sender(d, max_tokens)) is not None]
            for _, send in senders:   # warm-up: the first requests of each door (graphs, connections)
                run_load(send, 2, rounds=1)
            rss = tree_rss_mb(pid)
            for c in concurrency:
                records = {door.label: ([], 0.0) for door, _ in senders}
                others = wait_quiet(log)
                for _ in range(repeats):
                    for door, send in senders:
                        before, cpu_before = phase_totals(door), read_proc()
                        got, wall = run_load(send, c, rounds)
                        add_cpu(cpu.setdefault((door.label, c), {}), cpu_before, read_proc())
                        add_phases(phases.setdefault((door.label, c), {}), before, phase_totals(door))
                        kept, total = records[door.label]
                        records[door.label] = (kept + got, total + wall)
                rss = max(rss, tree_rss_mb(pid))
                for label, (got, wall) in records.items():
                    s = summarize(label, c, got, wall)
                    rows.append(s)
                    tokens[(label, c)] = s.tokens
                    log(f"[doors] {label:>15} c={c}: {s.tokens_per_s:6.1f} tok/s  TTFT p50 {s.ttft_p50_ms:5.0f} "
                        f"p95 {s.ttft_p95_ms:6.0f} ms  ITL p50 {s.itl_p50_ms:5.1f} ms  errors {s.errors}")
                if others is not None:
                    notes.append(f"{name} c={c}: other processes {others:.2f} cores before the point")
            costs[name] = (load_s, rss)
    return rows, costs, notes, phases, cpu, tokens


def goals(rows: list[StreamingStats]) -> list[str]:
    """The OpenAI door's targets against hotpath's gRPC door and vLLM's own server, each MET / MISSED."""
    by = {(r.label, r.concurrency): r for r in rows}
    mark = (lambda ok: "MET" if ok else "MISSED")
    lines = []
    api8, grpc8, vllm8 = by.get(("hotpath openai", 8)), by.get(("hotpath grpc", 8)), by.get(("vLLM server", 8))
    if api8 and grpc8 and grpc8.tokens_per_s:
        x = api8.tokens_per_s / grpc8.tokens_per_s
        lines.append(f"- c=8 tokens/s, OpenAI door {api8.tokens_per_s:.1f} vs gRPC door {grpc8.tokens_per_s:.1f} = "
                     f"{x:.2f}x (goal >= 0.95x): **{mark(x >= 0.95)}**")
    if api8 and vllm8 and vllm8.tokens_per_s:
        x = api8.tokens_per_s / vllm8.tokens_per_s
        lines.append(f"- c=8 tokens/s, OpenAI door vs vLLM's server {vllm8.tokens_per_s:.1f} = {x:.2f}x "
                     f"(goal >= 1.0x): **{mark(x >= 1.0)}**")
        lines.append(f"- c=8 TTFT p95, OpenAI door {api8.ttft_p95_ms:.0f} ms vs vLLM's server "
                     f"{vllm8.ttft_p95_ms:.0f} ms (goal <=): **{mark(api8.ttft_p95_ms <= vllm8.ttft_p95_ms)}**")
    api1, grpc1 = by.get(("hotpath openai", 1)), by.get(("hotpath grpc", 1))
    if api1 and grpc1:
        d = api1.itl_p50_ms - grpc1.itl_p50_ms
        lines.append(f"- c=1 ITL p50, OpenAI door {api1.itl_p50_ms:.1f} ms vs gRPC door {grpc1.itl_p50_ms:.1f} ms "
                     f"({d:+.1f} ms; goal: within 1 ms): **{mark(abs(d) <= 1.0)}**")
    for c in sorted({r.concurrency for r in rows}):
        api, grpc = by.get(("hotpath openai", c)), by.get(("hotpath grpc", c))
        if api and grpc:
            lines.append(f"- the OpenAI door's own cost at c={c} (minus the gRPC door): TTFT p50 "
                         f"{api.ttft_p50_ms - grpc.ttft_p50_ms:+.1f} ms, ITL p50 {api.itl_p50_ms - grpc.itl_p50_ms:+.1f} ms")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("generation_doors", __doc__, allow_busy=False)
    parser.add_argument("--system", action="append", choices=AIPERF_SYSTEMS, help="default: every one")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--rounds", type=int, default=4, help="requests per worker per repeat")
    parser.add_argument("--repeats", type=int, default=2, help="alternations of a system's doors per concurrency")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=paths.ROOT / "perf" / "reports" / f"{ENDPOINT}.md")
    args = parser.parse_args(argv)
    from hotpath.tuning.hardware_key import HardwareKey

    t0 = time.perf_counter()
    rows, costs, notes, phases, cpu, tokens = measure(tuple(args.system or AIPERF_SYSTEMS), tuple(args.concurrency),
                                                      args.rounds, args.repeats, args.max_tokens)
    cmd = "python -m perf study generation_doors " + " ".join(argv if argv is not None else sys.argv[1:])
    run = (f"`{cmd.strip()}` ({HardwareKey.detect().describe()}; served dtype {served_dtype()}; greedy chat prompts, "
           f"max_tokens {args.max_tokens}; {args.rounds} requests per worker x {args.repeats} repeats per point; "
           f"{time.perf_counter() - t0:.0f} s, {_uptime()}). Tokens/s counts streamed deltas (a token each, "
           f"mostly) over the point's wall time." + "".join(f"\n- {n}" for n in notes))
    section = "\n".join([DOORS_BEGIN, "## Every door side by side (one light client)\n", run + "\n",
                         markdown_table(rows), "", *costs_table(costs), "", *phases_table(phases), "",
                         *cpu_table(cpu, tokens), "", "Goals:\n", *goals(rows), DOORS_END])
    write_section(args.out, section, DOORS_BEGIN, DOORS_END)
    print(f"[doors] report section: {args.out}")
    return 0
