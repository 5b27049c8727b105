"""Text generation side by side in one run: TTFT, ITL and tokens/s at each concurrency for

  hotpath             the text_generation endpoint as built (vLLM, continuous batching), through Triton
                      (hotpath.client.GenerationClient, gRPC streaming)
  one-at-a-time       the same model and code, reloaded with max_num_seqs = 1: requests run in turn
  fastapi-transformers transformers `generate` + a per-token streamer behind FastAPI
  llama.cpp           node-llama-cpp (prebuilt CPU llama.cpp) on the same GGUF file, one context
                      with a sequence per stream (installed into .hotpath/llama-cpp/ on first use)

Every system gets the same greedy prompts (llama.cpp: the same prompt token ids, from the served model's
tokenizer and chat template) and max_tokens. The served dtype (build/text_generation.toml [parameters] dtype)
is named in the report; `--tag` suffixes the labels of this run's rows and `--merge` keeps the rows of earlier
runs (kept as JSON in .hotpath/perf/<report name>.json), so one report can hold e.g. float32 and bfloat16 runs.

    python -m perf study generation_compare            # own server; report -> perf/reports/text_generation.md
    python -m perf study generation_compare --url localhost:8001   # a server with explicit model control
    python -m perf study generation_compare --system hotpath --tag bf16 --merge
    python -m perf study generation_compare --follow-up   # follow-up chat turns' TTFT, prefix cache on vs off
    python -m perf study generation_compare --aiperf   # the LLM benchmark on AIPerf, c=1 and c=8: hotpath's
                                                   # KServe and OpenAI doors, vLLM's own server, llama.cpp, each alone
    python -m perf study generation_compare --genai-perf  # the same on genai-perf (being phased out by NVIDIA):
                                                   # Triton's gRPC stream vs llama.cpp
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.sweeps.measure.streaming import (
    StreamingStats,
    markdown_table,
    meets,
    ndjson_sender,
    run_load,
    summarize,
    triton_sender,
)
from hotpath.tuning.slo import StreamingSlo, load_streaming_slos
from perf.lab.compare.served_model import chat_ids, served_dtype, served_tokenizer, tokenizer_dir
from perf.lab.studies import runner

logger = logging.getLogger(__name__)

ENDPOINT = "text_generation"
SYSTEMS = ("hotpath", "one-at-a-time", "fastapi-transformers", "llama.cpp")
DEFAULT_SYSTEMS = SYSTEMS
TRITON_SYSTEMS = ("hotpath", "one-at-a-time")
CONCURRENCY = (1, 4, 8, 16)


def one_at_a_time(config):
    """one-at-a-time: the same endpoint decoding one sequence at a time, so vLLM never batches."""
    config.parameters["max_num_seqs"].string_value = "1"
    return config


def no_prefix_cache(config):
    """The same endpoint with vLLM's prefix cache off (every turn prefills its whole chat)."""
    config.parameters["enable_prefix_caching"].string_value = "false"
    return config


FOLLOW_UPS = ("Tell me more about that.", "Now sum it all up in one sentence.")


def follow_up_turns(url: str, max_tokens: int, prompts: list[str]) -> list[list[tuple[float, int, str]]]:
    """Three-turn chats, one at a time: per conversation, (TTFT ms, prompt tokens, reply text) of each turn."""
    from hotpath.client import GenerationClient

    out = []
    with GenerationClient(url, timeout_s=300) as client:
        for prompt in prompts:
            history, turns = [], []
            for text in (prompt, *FOLLOW_UPS):
                r = client.generate(text, max_tokens=max_tokens, history=history)
                turns.append((r.ttft_s * 1000.0, r.prompt_tokens, r.text))
                history += [text, r.text]
            out.append(turns)
    return out


def compare_follow_ups(url: str, max_tokens: int, prompts: list[str], log: Callable[[str], None] = logger.info) -> str:
    """Follow-up-turn TTFT with the prefix cache on (as built) and off, alternating per round; markdown."""
    import statistics

    from hotpath.sweeps.measure.reconfigure import reconfigured

    runs = {"on": [], "off": []}
    follow_up_turns(url, max_tokens, prompts[:1])   # warm-up
    for variant in ("on", "off", "on", "off"):
        wait_quiet(log)
        if variant == "on":
            runs[variant] += follow_up_turns(url, max_tokens, prompts)
        else:
            with reconfigured(url, {ENDPOINT: no_prefix_cache}):
                runs[variant] += follow_up_turns(url, max_tokens, prompts)
    same = all(a[t][2] == b[t][2] for a, b in zip(runs["on"], runs["off"]) for t in range(len(a)))
    lines = ["| turn | prompt tokens p50 | TTFT p50 / p95 ms, prefix cache on | off | off / on (p50) |",
             "|---|---|---|---|---|"]
    for t in range(1 + len(FOLLOW_UPS)):
        on, off = ([c[t][0] for c in runs[v]] for v in ("on", "off"))
        q = {v: (statistics.median(x), sorted(x)[max(0, round(0.95 * len(x)) - 1)]) for v, x in (("on", on), ("off", off))}
        tokens = statistics.median(c[t][1] for c in runs["on"])
        lines.append(f"| {t + 1} | {tokens:.0f} | {q['on'][0]:.0f} / {q['on'][1]:.0f} | {q['off'][0]:.0f} / "
                     f"{q['off'][1]:.0f} | {q['off'][0] / q['on'][0]:.2f} |")
    lines.append(f"\nGreedy replies of every turn identical with and without the cache: {'yes' if same else 'NO'} "
                 f"({len(runs['on'])} conversations x {1 + len(FOLLOW_UPS)} turns each way).")
    return "\n".join(lines)


def lookup_draft(context: list[int], k: int, longest: int = 3) -> list[int]:
    """Prompt-lookup draft: the up to `k` tokens that followed the latest earlier occurrence of the
    context's last n tokens (n = longest..1)."""
    for n in range(min(longest, len(context) - 1), 0, -1):
        tail = context[-n:]
        for start in range(len(context) - n - 1, -1, -1):
            if context[start:start + n] == tail:
                return context[start + n:start + n + k]
    return []


def draft_steps(prompt: list[int], reply: list[int], k: int) -> int:
    """Forward passes greedy speculative decoding with lookup drafts would need for `reply` (each pass
    verifies a draft and yields its longest matching prefix plus one token of its own)."""
    steps, i = 0, 0
    while i < len(reply):
        draft = lookup_draft(prompt + reply[:i], k)
        accepted = next((j for j, t in enumerate(draft) if i + j >= len(reply) or reply[i + j] != t), len(draft))
        i += accepted + 1
        steps += 1
    return steps


def draft_estimate(url: str, max_tokens: int, prompts: list[str], k: int = 4) -> str:
    """Tokens per forward pass that exact prompt-lookup speculation would give on these replies
    (first turns and follow-ups), from the served greedy replies (re-tokenized: the client gets text, not
    token ids): an upper bound on its ITL gain."""
    from hotpath.client import chat_messages

    tokenizer = served_tokenizer()
    chats = follow_up_turns(url, max_tokens, prompts)
    tokens = steps = 0
    for prompt, turns in zip(prompts, chats):
        history = []
        for text, (_, _, reply_text) in zip((prompt, *FOLLOW_UPS), turns):
            ids = chat_ids(tokenizer, chat_messages(text, history))
            reply = tokenizer.encode(reply_text, add_special_tokens=False)
            tokens, steps = tokens + len(reply), steps + draft_steps(ids, reply, k)
            history += [text, reply_text]
    return (f"prompt-lookup drafts (k={k}, n<=3) on {len(chats)} chats x {1 + len(FOLLOW_UPS)} turns: "
            f"{tokens} tokens in {steps} verify passes = {tokens / steps:.2f} tokens per pass")


@contextlib.contextmanager
def _system(name: str, url: str | None, max_tokens: int, sequences: int = 8):
    """Bring one system up; yields its send function."""
    if name == "hotpath":
        yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "one-at-a-time":
        from hotpath.sweeps.measure.reconfigure import reconfigured

        with reconfigured(url, {ENDPOINT: one_at_a_time}):
            yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "fastapi-transformers":
        from perf.lab.compare.alternatives.generation_fastapi import serving

        with serving() as (host, port):
            yield ndjson_sender(host, port, max_tokens)
    elif name == "llama.cpp":
        from perf.lab.compare.alternatives import llama_cpp

        with llama_cpp.serving(sequences=sequences) as (host, port):
            yield ndjson_sender(host, port, max_tokens, payload=llama_cpp.token_payload(max_tokens))
    else:
        raise ValueError(f"unknown system {name!r} (known: {', '.join(SYSTEMS)})")


def compare_generation(url: str | None, concurrency: tuple[int, ...] = CONCURRENCY, rounds: int = 2,
                       max_tokens: int = 48, systems: tuple[str, ...] = DEFAULT_SYSTEMS, tag: str = "",
                       log: Callable[[str], None] = logger.info, notes: list[str] | None = None) -> list[StreamingStats]:
    """Measure every system at every concurrency (Triton systems: a server with explicit model control at `url`)."""
    rows = []
    for name in systems:
        label = f"{name} {tag}".strip() if tag else name
        with _system(name, url, max_tokens, sequences=max(concurrency)) as send:
            send("Say hello.")  # warm-up, not recorded
            for c in concurrency:
                others = wait_quiet(log)
                records, wall = run_load(send, c, rounds)
                rows.append(summarize(label, c, records, wall))
                s = rows[-1]
                log(f"[generate-perf] {label:>20} c={c:<2} TTFT p95 {s.ttft_p95_ms:6.0f} ms  ITL p50 {s.itl_p50_ms:4.0f} "
                    f"p95 {s.itl_p95_ms:4.0f} ms  {s.tokens_per_s:6.1f} tok/s  errors {s.errors}")
                if notes is not None and others is not None:
                    notes.append(f"{label} c={c}: other processes {others:.2f} cores before the point")
    return rows


def wait_quiet(log: Callable[[str], None] = logger.info, max_wait_s: float = 90.0) -> float | None:
    """Wait (up to max_wait_s) until other processes use at most hotpath.sweeps.measure.host_load's limit of CPU;
    returns what they used in the last window (None when the machine cannot be read). Measuring
    goes ahead after the wait either way: the figure lands in the report's run notes."""
    from hotpath.sweeps.measure.host_load import measure_others

    deadline = time.monotonic() + max_wait_s
    while True:
        report = measure_others(1.0)
        if not report.source:
            return None
        if report.quiet or time.monotonic() > deadline:
            if not report.quiet:
                log(f"[generate-perf] busy machine, measuring anyway: {report.summary()}")
            return report.other_cores


def _ratio_line(c: int, ours: StreamingStats, base, hf, cpp) -> str:
    line = f"- concurrency {c}: hotpath {ours.tokens_per_s:.1f} tok/s"
    if base and base.tokens_per_s:
        line += f" = {ours.tokens_per_s / base.tokens_per_s:.2f}x one-at-a-time"
    if hf and hf.tokens_per_s:
        line += f", {ours.tokens_per_s / hf.tokens_per_s:.2f}x FastAPI + transformers"
    if cpp and cpp.tokens_per_s:
        line += f", {ours.tokens_per_s / cpp.tokens_per_s:.2f}x llama.cpp"
    return line


def report(rows: list[StreamingStats], slo: StreamingSlo | None, settings: str) -> str:
    """Markdown: the table, batching's gain per concurrency and the SLO verdict."""
    by = {(s.label, s.concurrency): s for s in rows}
    lines = [f"# {ENDPOINT}: streaming latency and throughput\n", settings + "\n", markdown_table(rows)]
    for c in sorted({s.concurrency for s in rows}):
        base, ours = by.get(("one-at-a-time", c)), by.get(("hotpath", c))
        hf, cpp = by.get(("fastapi-transformers", c)), by.get(("llama.cpp", c))
        if ours and ((base and base.tokens_per_s) or (cpp and cpp.tokens_per_s)):
            lines.append(_ratio_line(c, ours, base, hf, cpp))
    if slo:
        at = by.get(("hotpath", slo.concurrency))
        verdict = "not measured" if at is None else ("MET" if meets(at, slo) else "MISSED")
        lines.append(f"\nSLO (perf/slo.toml): TTFT p95 <= {slo.ttft_p95_ms:.0f} ms and ITL p95 <= "
                     f"{slo.itl_p95_ms:.0f} ms at concurrency {slo.concurrency}: **{verdict}**")
    return "\n".join(lines) + "\n"


def _merge(previous: Path, rows: list[StreamingStats], runs: list[str]) -> tuple[list[StreamingStats], list[str]]:
    """Earlier rows (sidecar JSON) not re-measured now, then this run's; earlier run notes first."""
    try:
        data = json.loads(previous.read_text())
    except (OSError, ValueError):
        return rows, runs
    fresh = {(s.label, s.concurrency) for s in rows}
    kept = [StreamingStats(**r) for r in data.get("rows", []) if (r["label"], r["concurrency"]) not in fresh]
    return kept + rows, [*data.get("runs", []), *runs]


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("generation_compare", __doc__, allow_busy=False)
    parser.add_argument("--url", default=None, help="server with explicit model control (default: start one)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--rounds", type=int, default=2, help="requests per worker at each concurrency")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--system", action="append", choices=sorted(set(SYSTEMS) | set(AIPERF_SYSTEMS)),
                        help=f"measure only this one (repeatable; default: {', '.join(DEFAULT_SYSTEMS)})")
    parser.add_argument("--tag", default="", help="suffix for this run's labels (e.g. the served dtype: fp32, bf16)")
    parser.add_argument("--merge", action="store_true",
                        help="keep earlier runs' rows (.hotpath/perf/<report>.json) that this run does not re-measure")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--follow-up", action="store_true",
                        help="instead: TTFT of follow-up chat turns, prefix cache on vs off (served; prints markdown)")
    parser.add_argument("--draft-estimate", action="store_true",
                        help="instead: tokens per pass exact prompt-lookup speculation would give (served greedy tokens)")
    parser.add_argument("--aiperf", action="store_true",
                        help="instead: the LLM benchmark on AIPerf (c=1, 8): hotpath's KServe and OpenAI doors, vLLM's "
                             "own server, llama.cpp; writes the report's benchmark section only")
    parser.add_argument("--genai-perf", action="store_true",
                        help="instead: the LLM benchmark with genai-perf's stock flags (c=1, 8; hotpath vs llama.cpp); "
                             "writes the report's benchmark section only")
    parser.add_argument("--requests", type=int, default=0, help="--genai-perf: requests per point (default 16 at c=1, "
                                                                "8 per stream above)")
    parser.add_argument("--input-tokens", type=int, default=128, help="--genai-perf: synthetic prompt length")
    parser.add_argument("--old-itl-p50", type=float, default=0.0, help="--genai-perf: the old engine's c=1 ITL p50 ms")
    parser.add_argument("--old-itl-mean", type=float, default=0.0, help="--genai-perf: the old engine's c=1 ITL mean ms")
    parser.add_argument("--out", type=Path, default=paths.ROOT / "perf" / "reports" / f"{ENDPOINT}.md")
    parser.add_argument("--steps", action="store_true",
                        help="instead: where vLLM's decode step goes in process (1 and 8 sequences, fp32); writes the "
                             "report's step section")
    args = parser.parse_args(argv)
    if args.aiperf:
        return aiperf_main(args, argv)
    if args.genai_perf:
        return genai_main(args, argv)
    if args.steps:
        t0 = time.perf_counter()
        results = {b: vllm_steps(b, args.max_tokens) for b in (1, 8)}
        cmd = "python -m perf study generation_compare " + " ".join(argv if argv is not None else sys.argv[1:])
        run = (f"`{cmd.strip()}`: vLLM float32, eager, greedy, {args.max_tokens} tokens (min_tokens = max_tokens), "
               f"medians over decode steps; EngineCore's scheduler.schedule, executor.execute_model (forward), "
               f"executor.sample_tokens, scheduler.update_from_output timed in process; {time.perf_counter() - t0:.0f} s, "
               f"{_uptime()}.")
        write_section(args.out, steps_section(results, run), STEPS_BEGIN, STEPS_END)
        print(f"[generate-perf] step section: {args.out}")
        return 0
    from hotpath.server.local_triton import server_url

    if args.follow_up or args.draft_estimate:
        from hotpath.sweeps.measure.streaming import PROMPTS

        with server_url(args.url) as url:
            print(compare_follow_ups(url, args.max_tokens, PROMPTS) if args.follow_up else
                  draft_estimate(url, args.max_tokens, PROMPTS))
        return 0
    systems = tuple(args.system or DEFAULT_SYSTEMS)
    t0 = time.perf_counter()
    notes: list[str] = []
    # Systems without Triton first, before our own server (whose CPU the quiet check cannot see) starts.
    local = tuple(x for x in systems if x not in TRITON_SYSTEMS)
    served = tuple(x for x in systems if x in TRITON_SYSTEMS)
    rows = compare_generation(None, tuple(args.concurrency), args.rounds, args.max_tokens, local, args.tag,
                              notes=notes) if local else []
    if served:
        with server_url(args.url) as url:
            rows += compare_generation(url, tuple(args.concurrency), args.rounds, args.max_tokens, served, args.tag,
                                       notes=notes)
    rows.sort(key=lambda r: (systems.index(r.label.split(" ")[0]) if r.label.split(" ")[0] in systems else 99,
                             r.concurrency))
    slo = load_streaming_slos(args.profile).get(ENDPOINT)
    cmd = "python -m perf study generation_compare " + " ".join(argv if argv is not None else sys.argv[1:])
    runs = [f"`{cmd.strip()}`: {', '.join(systems)}; served dtype {served_dtype()}; greedy, max_tokens "
            f"{args.max_tokens}, {args.rounds} requests per worker per point, prompts from "
            f"hotpath.sweeps.measure.streaming.PROMPTS; {time.perf_counter() - t0:.0f} s on this host ({_uptime()})."
            + "".join(f"\n  - {n}" for n in notes)]
    sidecar = paths.work_dir() / "perf" / f"{args.out.stem}.json"
    sidecar.parent.mkdir(parents=True, exist_ok=True)
    if args.merge:
        rows, runs = _merge(sidecar, rows, runs)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    sidecar.write_text(json.dumps({"rows": [asdict(s) for s in rows], "runs": runs}, indent=1) + "\n")
    text = report(rows, slo, "Runs:\n\n" + "\n".join(f"- {r}" for r in runs))
    args.out.write_text(text + _kept_notes(args.out))
    print(f"[generate-perf] report: {args.out}")
    return 0


# --- the LLM benchmark: genai-perf's stock flags ----------------------------------------------------

GENAI_SYSTEMS = ("hotpath", "llama.cpp")
GENAI_CONCURRENCY = (1, 8)
GENAI_BEGIN = "<!-- genai-perf benchmark: written by `python -m perf study generation_compare --genai-perf` -->"
GENAI_END = "<!-- genai-perf benchmark: end -->"


def tree_rss_mb(pid: int) -> float:
    """Resident memory of `pid` and every process below it (Triton: server, stub, the vLLM engine's processes)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return float("nan")
    total = 0
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            total += proc.memory_info().rss
    return total / 2**20


def listener_pid(port: int) -> int:
    """The process listening on loopback `port`."""
    import psutil

    return next(c.pid for c in psutil.net_connections("tcp") if c.laddr and c.laddr.port == port
                and c.status == psutil.CONN_LISTEN and c.pid)


@contextlib.contextmanager
def genai_system(name: str, log: Callable[[str], None] = logger.info):
    """One system alone, up for genai-perf; yields (target, pid of its process tree, seconds from start to ready)."""
    import tempfile

    from hotpath.sweeps.measure.genai_perf import Target

    t0 = time.monotonic()
    if name == "hotpath":
        from hotpath.server.admin import admin_key
        from hotpath.server.local_triton import LocalTriton, ServerPorts
        from hotpath.server.ports import free_ports

        # A repository holding text_generation only: the server loads nothing else beside it.
        with tempfile.TemporaryDirectory(prefix="hotpath-genai-") as repo:
            (Path(repo) / ENDPOINT).symlink_to(paths.model_repository() / ENDPOINT)
            with LocalTriton(repository=Path(repo), ports=ServerPorts(*free_ports(3)), log=log) as server:
                yield (Target.triton(ENDPOINT, server.grpc_url, admin_key()), server.process.pid,
                       time.monotonic() - t0)
    elif name == "llama.cpp":
        from perf.lab.compare.alternatives import llama_cpp

        with llama_cpp.serving(sequences=max(GENAI_CONCURRENCY), log=log) as (host, port):
            yield Target.openai(ENDPOINT, f"http://{host}:{port}"), listener_pid(port), time.monotonic() - t0
    else:
        raise ValueError(f"unknown system {name!r} (genai-perf: {', '.join(GENAI_SYSTEMS)})")


def genai_benchmark(systems: tuple[str, ...], concurrency: tuple[int, ...], requests: dict[int, int],
                    input_tokens: int, output_tokens: int, log: Callable[[str], None] = logger.info):
    """genai-perf at every concurrency against each system, one system up at a time.
    Returns (rows, {label: (load-to-ready s, peak RSS MiB)}, run notes)."""
    from hotpath.sweeps.measure import genai_perf

    rows, costs, notes = [], {}, []
    tokenizer = tokenizer_dir()
    for name in systems:
        others = wait_quiet(log)
        with genai_system(name, log) as (target, pid, load_s):
            log(f"[genai-perf] {name}: ready in {load_s:.1f} s")
            rss = tree_rss_mb(pid)
            for c in concurrency:
                others = wait_quiet(log)
                rows.append(genai_perf.profile(target, name, tokenizer, c, requests.get(c, 8 * c),
                                               input_tokens, output_tokens, log=log))
                rss = max(rss, tree_rss_mb(pid))
                r = rows[-1]
                log(f"[genai-perf] {name:>10} c={c}: {r.output_tokens_per_s:6.1f} tok/s  TTFT p95 {r.ttft_p95_ms:6.0f} ms"
                    f"  ITL p50 {r.itl_p50_ms:5.1f} mean {r.itl_mean_ms:5.1f} ms")
                if others is not None:
                    notes.append(f"{name} c={c}: other processes {others:.2f} cores before the point")
            costs[name] = (load_s, rss)
    return rows, costs, notes


def genai_goals(rows, costs: dict, old_itl: tuple[float, float] | None) -> list[str]:
    """The goals, each with its figures and MET / MISSED."""
    by = {(r.label, r.concurrency): r for r in rows}
    ours8, cpp8, ours1, cpp1 = (by.get(k) for k in (("hotpath", 8), ("llama.cpp", 8), ("hotpath", 1), ("llama.cpp", 1)))
    mark = (lambda ok: "MET" if ok else "MISSED")
    lines = []
    if ours8 and cpp8 and cpp8.output_tokens_per_s and cpp8.ttft_p95_ms:
        x = ours8.output_tokens_per_s / cpp8.output_tokens_per_s
        lines.append(f"- c=8 tokens/s {ours8.output_tokens_per_s:.1f} vs llama.cpp {cpp8.output_tokens_per_s:.1f} = "
                     f"{x:.2f}x (goal >= 2.5x): **{mark(x >= 2.5)}**")
        y = ours8.ttft_p95_ms / cpp8.ttft_p95_ms
        lines.append(f"- c=8 TTFT p95 {ours8.ttft_p95_ms:.0f} ms vs llama.cpp {cpp8.ttft_p95_ms:.0f} ms = {y:.2f}x "
                     f"(goal <= 0.25x): **{mark(y <= 0.25)}**")
    if ours1 and old_itl:
        ok = ours1.itl_p50_ms < old_itl[0] and ours1.itl_mean_ms < old_itl[1]
        lines.append(f"- c=1 ITL p50 / mean {ours1.itl_p50_ms:.1f} / {ours1.itl_mean_ms:.1f} ms vs the old engine's "
                     f"{old_itl[0]:.1f} / {old_itl[1]:.1f} ms (goal: both below): **{mark(ok)}**")
    if ours1 and cpp1:
        lines.append(f"- c=1 ITL p50 / mean vs llama.cpp: {ours1.itl_p50_ms:.1f} / {ours1.itl_mean_ms:.1f} ms vs "
                     f"{cpp1.itl_p50_ms:.1f} / {cpp1.itl_mean_ms:.1f} ms")
    if "hotpath" in costs:
        load_s = costs["hotpath"][0]
        lines.append(f"- load to ready {load_s:.1f} s (goal <= 45 s): **{mark(load_s <= 45)}**")
    return lines


def genai_section(rows, costs: dict, goals: list[str], run: str) -> str:
    """The report's benchmark section (between GENAI_BEGIN and GENAI_END)."""
    from hotpath.sweeps.measure.llm_benchmark import markdown_table

    return "\n".join([GENAI_BEGIN, "## LLM benchmark (genai-perf, stock flags)\n", run + "\n", markdown_table(rows), "",
                      *costs_table(costs), "", "Goals:\n", *goals, GENAI_END])


def costs_table(costs: dict) -> list[str]:
    """{system: (load-to-ready s, peak RSS MiB)} as table lines."""
    return ["| system | load to ready s | peak RSS MiB (process tree) |", "|---|---|---|",
            *(f"| {name} | {load:.1f} | {rss:.0f} |" for name, (load, rss) in costs.items())]


def write_section(path: Path, section: str, begin: str = GENAI_BEGIN, end: str = GENAI_END) -> None:
    """Replace the part of `path` from `begin` to `end` with `section` (appended when absent); the rest stays."""
    try:
        old = path.read_text()
    except OSError:
        old = f"# {ENDPOINT}\n"
    a, b = old.find(begin), old.find(end)
    text = old[:a] + section + old[b + len(end):] if 0 <= a < b else old.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text)


def genai_main(args, argv: list[str] | None) -> int:
    systems = tuple(s for s in (args.system or GENAI_SYSTEMS))
    concurrency = tuple(args.concurrency) if args.concurrency != list(CONCURRENCY) else GENAI_CONCURRENCY
    # perf_analyzer refuses fewer requests than the concurrency.
    requests = {c: max(c, args.requests) if args.requests else (8 if c == 1 else 4 * c) for c in concurrency}
    t0 = time.perf_counter()
    rows, costs, notes = genai_benchmark(systems, concurrency, requests, args.input_tokens, args.max_tokens)
    from hotpath.sweeps.measure.genai_perf import GENAI_PERF_VERSION

    cmd = "python -m perf study generation_compare " + " ".join(argv if argv is not None else sys.argv[1:])
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), "unknown CPU")
    run = (f"`{cmd.strip()}` (genai-perf {GENAI_PERF_VERSION}; synthetic prompts of {args.input_tokens} tokens, "
           f"{args.max_tokens} output tokens each (max_tokens = min_tokens), requests per point "
           f"{', '.join(f'c={c}: {n}' for c, n in requests.items())}; {cpu}, {os.cpu_count()} cores; "
           f"{time.perf_counter() - t0:.0f} s, {_uptime()}). hotpath: Triton gRPC streaming, `--endpoint-type kserve "
           f"--backend vllm`; llama.cpp: node-llama-cpp on the same GGUF (Q4_1), OpenAI `/v1/completions` "
           f"streaming, `--endpoint-type completions`, 8 sequences, 2 threads."
           + "".join(f"\n- {n}" for n in notes))
    old_itl = (args.old_itl_p50, args.old_itl_mean) if args.old_itl_p50 and args.old_itl_mean else None
    write_section(args.out, genai_section(rows, costs, genai_goals(rows, costs, old_itl), run))
    print(f"[genai-perf] report section: {args.out}")
    return 0


# --- the LLM benchmark on AIPerf: every door of hotpath beside vLLM's own server and llama.cpp --------

AIPERF_SYSTEMS = ("hotpath", "vllm", "llama.cpp")
AIPERF_BEGIN = "<!-- AIPerf benchmark: written by `python -m perf study generation_compare --aiperf` -->"
AIPERF_END = "<!-- AIPerf benchmark: end -->"


@dataclass(frozen=True)
class Door:
    """One way into a system: `kind` triton-grpc (host:port), triton-http (http://host:port, KServe
    generate_stream), openai-chat or openai-completions (http://host:port)."""

    label: str
    kind: str
    url: str


@contextlib.contextmanager
def system_up(name: str, log: Callable[[str], None] = logger.info):
    """One system alone; yields ([Door...], pid of its process tree, load-to-ready s). hotpath yields its three
    doors (Triton's gRPC stream and KServe generate_stream, and the OpenAI API), one Triton, one API."""
    import tempfile

    t0 = time.monotonic()
    if name == "hotpath":
        from hotpath.openai_api.openai_server import OpenAIServer
        from hotpath.server.local_triton import LocalTriton, ServerPorts
        from hotpath.server.ports import free_ports

        with tempfile.TemporaryDirectory(prefix="hotpath-doors-") as repo:
            (Path(repo) / ENDPOINT).symlink_to(paths.model_repository() / ENDPOINT)
            with LocalTriton(repository=Path(repo), ports=ServerPorts(*free_ports(3)), log=log) as server:
                api_port, = free_ports(1)
                with OpenAIServer(server.grpc_url, api_port, repository=Path(repo)):
                    yield ([Door("hotpath grpc", "triton-grpc", server.grpc_url),
                            Door("hotpath kserve", "triton-http", f"http://{server.http_url}"),
                            Door("hotpath openai", "openai-chat", f"http://127.0.0.1:{api_port}")],
                           server.process.pid, time.monotonic() - t0)
    elif name == "vllm":
        from perf.lab.compare.alternatives import vllm_server

        with vllm_server.serving(log=log) as (host, port, pid):
            yield [Door("vLLM server", "openai-chat", f"http://{host}:{port}")], pid, time.monotonic() - t0
    elif name == "llama.cpp":
        from perf.lab.compare.alternatives import llama_cpp

        with llama_cpp.serving(sequences=max(GENAI_CONCURRENCY), log=log) as (host, port):
            yield ([Door("llama.cpp", "openai-completions", f"http://{host}:{port}")], listener_pid(port),
                   time.monotonic() - t0)
    else:
        raise ValueError(f"unknown system {name!r} (one of {', '.join(AIPERF_SYSTEMS)})")


@contextlib.contextmanager
def aiperf_system(name: str, log: Callable[[str], None] = logger.info):
    """One system alone, up for AIPerf; yields ([(label, target)...], pid, load-to-ready s): every door AIPerf
    drives (hotpath: KServe generate_stream and the OpenAI API)."""
    from hotpath.sweeps.measure.aiperf import Target

    targets = {"triton-http": Target.triton_generate, "openai-chat": Target.openai_chat,
               "openai-completions": Target.openai_completions}
    with system_up(name, log) as (doors, pid, load_s):
        yield [(d.label, targets[d.kind](ENDPOINT, d.url)) for d in doors if d.kind in targets], pid, load_s


def aiperf_benchmark(systems: tuple[str, ...], concurrency: tuple[int, ...], requests: dict[int, int],
                     input_tokens: int, output_tokens: int, log: Callable[[str], None] = logger.info):
    """AIPerf at every concurrency against each system (and each of hotpath's doors), one system up at a time.
    Returns (rows, {system: (load-to-ready s, peak RSS MiB)}, run notes)."""
    from hotpath.sweeps.measure import aiperf

    rows, costs, notes = [], {}, []
    tokenizer = tokenizer_dir()
    for name in systems:
        wait_quiet(log)
        with aiperf_system(name, log) as (targets, pid, load_s):
            log(f"[aiperf] {name}: ready in {load_s:.1f} s")
            rss = tree_rss_mb(pid)
            for c in concurrency:
                for label, target in targets:
                    others = wait_quiet(log)
                    r = aiperf.profile(target, label, tokenizer, c, requests.get(c, 8 * c), input_tokens,
                                       output_tokens, log=log)
                    rows.append(r)
                    rss = max(rss, tree_rss_mb(pid))
                    log(f"[aiperf] {label:>15} c={c}: {r.output_tokens_per_s:6.1f} tok/s  TTFT p95 "
                        f"{r.ttft_p95_ms:6.0f} ms  ITL p50 {r.itl_p50_ms:5.1f} ms")
                    if others is not None:
                        notes.append(f"{label} c={c}: other processes {others:.2f} cores before the point")
            costs[name] = (load_s, rss)
    return rows, costs, notes


def aiperf_goals(rows) -> list[str]:
    """The OpenAI door's targets against hotpath's KServe door and vLLM's own server, MET / MISSED."""
    by = {(r.label, r.concurrency): r for r in rows}
    mark = (lambda ok: "MET" if ok else "MISSED")
    lines = []
    api8, kserve8, vllm8 = by.get(("hotpath openai", 8)), by.get(("hotpath kserve", 8)), by.get(("vLLM server", 8))
    if api8 and kserve8:
        x = api8.output_tokens_per_s / kserve8.output_tokens_per_s
        lines.append(f"- c=8 tokens/s, OpenAI door {api8.output_tokens_per_s:.1f} vs KServe door "
                     f"{kserve8.output_tokens_per_s:.1f} = {x:.2f}x (goal >= 0.95x): **{mark(x >= 0.95)}**")
    if api8 and vllm8:
        x = api8.output_tokens_per_s / vllm8.output_tokens_per_s
        lines.append(f"- c=8 tokens/s, OpenAI door vs vLLM's server {vllm8.output_tokens_per_s:.1f} = {x:.2f}x "
                     f"(goal >= 1.0x): **{mark(x >= 1.0)}**")
        lines.append(f"- c=8 TTFT p95, OpenAI door {api8.ttft_p95_ms:.0f} ms vs vLLM's server {vllm8.ttft_p95_ms:.0f} ms "
                     f"(goal <=): **{mark(api8.ttft_p95_ms <= vllm8.ttft_p95_ms)}**")
    api1, kserve1 = by.get(("hotpath openai", 1)), by.get(("hotpath kserve", 1))
    if api1 and kserve1:
        d = api1.itl_p50_ms - kserve1.itl_p50_ms
        lines.append(f"- c=1 ITL p50, OpenAI door {api1.itl_p50_ms:.1f} ms vs KServe door {kserve1.itl_p50_ms:.1f} ms "
                     f"(goal: within 1 ms): **{mark(abs(d) <= 1.0)}**")
    return lines


def aiperf_main(args, argv: list[str] | None) -> int:
    from hotpath.sweeps.measure.aiperf import AIPERF_VERSION
    from hotpath.sweeps.measure.llm_benchmark import markdown_table

    systems = tuple(s for s in (args.system or AIPERF_SYSTEMS))
    concurrency = tuple(args.concurrency) if args.concurrency != list(CONCURRENCY) else GENAI_CONCURRENCY
    requests = {c: max(c, args.requests) if args.requests else (8 if c == 1 else 4 * c) for c in concurrency}
    t0 = time.perf_counter()
    rows, costs, notes = aiperf_benchmark(systems, concurrency, requests, args.input_tokens, args.max_tokens)
    cmd = "python -m perf study generation_compare " + " ".join(argv if argv is not None else sys.argv[1:])
    from hotpath.tuning.hardware_key import HardwareKey

    run = (f"`{cmd.strip()}` (AIPerf {AIPERF_VERSION}; synthetic prompts of {args.input_tokens} tokens, "
           f"{args.max_tokens} output tokens each (max_tokens = min_tokens), requests per point "
           f"{', '.join(f'c={c}: {n}' for c, n in requests.items())}; {HardwareKey.detect().describe()}; "
           f"served dtype {served_dtype()}; {time.perf_counter() - t0:.0f} s, {_uptime()}). hotpath kserve: "
           f"Triton's `/v2/models/{ENDPOINT}/generate_stream` (AIPerf's template endpoint); hotpath openai and "
           f"vLLM's server: `/v1/chat/completions` streamed, the same model directory and engine settings; "
           f"llama.cpp: node-llama-cpp on the same GGUF (Q4_1), `/v1/completions` streamed."
           + "".join(f"\n- {n}" for n in notes))
    section = "\n".join([AIPERF_BEGIN, "## LLM benchmark (AIPerf): every door, vLLM's own server, llama.cpp\n",
                         run + "\n", markdown_table(rows), "", *costs_table(costs), "", "Goals:\n", *aiperf_goals(rows),
                         AIPERF_END])
    write_section(args.out, section, AIPERF_BEGIN, AIPERF_END)
    print(f"[aiperf] report section: {args.out}")
    return 0


STEPS_BEGIN = "<!-- vLLM decode steps: written by `python -m perf study generation_compare --steps` -->"
STEPS_END = "<!-- vLLM decode steps: end -->"
STEP_PARTS = ("scheduler", "forward", "sampling", "update")


def vllm_steps(batch: int, max_tokens: int, dtype: str = "float32") -> dict:
    """Per-step figures (ms) of vLLM decoding `batch` sequences in process (vllm_steps.py in the vLLM venv)."""
    import subprocess
    import tempfile

    from hotpath.errors import HotpathError
    from hotpath.exporters.llm_precision import vllm_python

    with tempfile.TemporaryDirectory(prefix="hotpath-steps-") as tmp:
        out = Path(tmp) / "steps.json"
        cores = f"0-{(os.cpu_count() or 1) - 1}"
        env = {**os.environ, "VLLM_CPU_OMP_THREADS_BIND": cores, "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
               "LC_ALL": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
        done = subprocess.run([str(vllm_python()), str(Path(__file__).with_name("vllm_steps.py")), str(tokenizer_dir()),
                               dtype, str(batch), str(max_tokens), str(out)], env=env, capture_output=True, text=True,
                              timeout=900)
        if done.returncode != 0 or not out.exists():
            raise HotpathError("vllm_steps.py failed:\n" + "\n".join(done.stderr.strip().splitlines()[-8:]))
        return json.loads(out.read_text())


def steps_section(results: dict[int, dict], run: str) -> str:
    lines = [STEPS_BEGIN, "## Where a vLLM decode step goes (in process, no serving)\n", run + "\n",
             "| sequences | step ms | " + " | ".join(f"{p} ms" for p in STEP_PARTS) + " | loop outside the step ms "
             "| wall per token ms |", "|---|---|" + "---|" * len(STEP_PARTS) + "---|---|"]
    for batch, r in sorted(results.items()):
        outside = r["wall_per_step"] - r["step"]
        lines.append(f"| {batch} | {r['step']:.1f} | " + " | ".join(f"{r.get(p, 0.0):.1f}" for p in STEP_PARTS)
                     + f" | {outside:.1f} | {r['wall_per_step']:.1f} |")
    return "\n".join([*lines, STEPS_END])


NOTES_MARKER = "<!-- notes: kept when the report is regenerated -->"


def _kept_notes(path: Path) -> str:
    """The hand-written part of an existing report (from NOTES_MARKER on), carried over unchanged."""
    try:
        old = path.read_text()
    except OSError:
        return ""
    at = old.find(NOTES_MARKER)
    return "" if at < 0 else "\n" + old[at:]


def _uptime() -> str:
    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
        return "load average " + ", ".join(load)
    except OSError:
        return "load average unknown"
