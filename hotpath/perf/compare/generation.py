"""Text generation side by side in one run: TTFT, ITL and tokens/s at each concurrency for

  hotpath             the text_generation endpoint as built (continuous batching), through Triton
  in-process          the same export and engine settings driven in this process (no Triton, no gRPC,
                      no stub I/O): the difference to `hotpath` is what serving costs
  one-at-a-time       the same model and code, reloaded with max_batch = 1: requests run in turn
  fastapi-transformers transformers `generate` + a per-token streamer behind FastAPI
  llama.cpp           node-llama-cpp (prebuilt CPU llama.cpp) on the same GGUF file, one context
                      with a sequence per stream (installed into .hotpath/llama-cpp/ on first use)

Every system gets the same greedy prompts (llama.cpp: the same prompt token ids) and max_tokens.
The export's weights (fp32 / q4, build/text_generation.toml [hotpath] weights) are named in the
report; `--tag` suffixes the labels of this run's rows and `--merge` keeps the rows of earlier runs
(kept as JSON in .hotpath/perf/<report name>.json), so one report can hold fp32 and q4 builds side by side.

    hotpath study generation_compare            # own server; report -> perf/reports/text_generation.md
    hotpath study generation_compare --url localhost:8001   # a server with explicit model control
    hotpath study generation_compare --system in-process --system hotpath --tag q4 --merge
    hotpath study generation_compare --follow-up   # follow-up chat turns' TTFT, prefix cache on vs off
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.perf.measure.streaming import (
    StreamingStats,
    engine_sender,
    markdown_table,
    meets,
    ndjson_sender,
    run_load,
    summarize,
    triton_sender,
)
from hotpath.perf.studies import runner
from hotpath.slo import StreamingSlo, load_streaming_slos

logger = logging.getLogger(__name__)

ENDPOINT = "text_generation"
SYSTEMS = ("hotpath", "in-process", "one-at-a-time", "fastapi-transformers", "llama.cpp")
DEFAULT_SYSTEMS = ("hotpath", "one-at-a-time", "fastapi-transformers", "llama.cpp")
TRITON_SYSTEMS = ("hotpath", "one-at-a-time")
CONCURRENCY = (1, 4, 8, 16)


def one_at_a_time(config):
    """one-at-a-time: the same endpoint with one KV slot, so the loop never batches."""
    config.parameters["max_batch"].string_value = "1"
    return config


def no_prefix_cache(config):
    """The same endpoint with the block prefix cache off (the system turn is still shared)."""
    config.parameters["prefix_cache_tokens"].string_value = "0"
    return config


FOLLOW_UPS = ("Tell me more about that.", "Now sum it all up in one sentence.")


def follow_up_turns(url: str, max_tokens: int, prompts: list[str]) -> list[list[tuple[float, int, list[int]]]]:
    """Three-turn chats, one at a time: per conversation, (TTFT ms, prompt tokens, token ids) of each turn."""
    from hotpath.client import GenerationClient

    out = []
    with GenerationClient(url, timeout_s=300) as client:
        for prompt in prompts:
            history, turns = [], []
            for text in (prompt, *FOLLOW_UPS):
                r = client.generate(text, max_tokens=max_tokens, history=history)
                turns.append((r.ttft_s * 1000.0, r.prompt_tokens, r.token_ids))
                history += [text, r.text]
            out.append(turns)
    return out


def compare_follow_ups(url: str, max_tokens: int, prompts: list[str], log: Callable[[str], None] = logger.info) -> str:
    """Follow-up-turn TTFT with the prefix cache on (as built) and off, alternating per round; markdown."""
    import statistics

    from hotpath.perf.measure.reconfigure import reconfigured

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
    lines.append(f"\nGreedy tokens of every turn identical with and without the cache: {'yes' if same else 'NO'} "
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
    (first turns and follow-ups), from the served greedy tokens: an upper bound on its ITL gain."""
    from tokenizers import Tokenizer

    from hotpath.runtime.generation.chat import encode_prompt
    from hotpath.runtime.generation.decoder import ModelInfo

    info = ModelInfo.load(export_dir() / "generation.json")
    tokenizer = Tokenizer.from_file(str(export_dir() / "tokenizer.json"))
    chats = follow_up_turns(url, max_tokens, prompts)
    tokens = steps = 0
    for prompt, turns in zip(prompts, chats):
        history = []
        for text, (_, _, reply) in zip((prompt, *FOLLOW_UPS), turns):
            ids = encode_prompt(tokenizer, info.chat_template, text, info.bos_token, info.eos_token, history)
            tokens, steps = tokens + len(reply), steps + draft_steps(ids, reply, k)
            history += [text, tokenizer.decode(reply, skip_special_tokens=True)]
    return (f"prompt-lookup drafts (k={k}, n<=3) on {len(chats)} chats x {1 + len(FOLLOW_UPS)} turns: "
            f"{tokens} tokens in {steps} verify passes = {tokens / steps:.2f} tokens per pass")


def export_dir() -> Path:
    return paths.model_repository() / ENDPOINT / "1" / "export"


def export_weights(folder: Path | None = None) -> str:
    """fp32 or q4: what the built export holds (generation.json, written by the exporter)."""
    try:
        return json.loads(((folder or export_dir()) / "generation.json").read_text()).get("weights", "fp32")
    except (OSError, ValueError):
        return "unknown"


@contextlib.contextmanager
def in_process_engine(folder: Path | None = None):
    """The served model's engine (export, [parameters] of build/text_generation.toml) in this process,
    its loop thread running; yields (engine, tokenizer, info)."""
    from tokenizers import Tokenizer

    from hotpath.runtime.generation.chat import shared_prefix
    from hotpath.runtime.generation.decoder import Decoder, ModelInfo
    from hotpath.runtime.generation.engine import Engine, EngineSettings
    from hotpath.spec import load_spec

    folder = folder or export_dir()
    p = {k: v.string_value for k, v in load_spec(paths.model_specs_dir() / f"{ENDPOINT}.toml").config.parameters.items()}
    info = ModelInfo.load(folder / "generation.json")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    decoder = Decoder(folder / "model.onnx", info, intra_op_threads=int(p.get("intra_op_thread_count", 0)),
                      allow_spinning=p.get("allow_spinning", "false").lower() in ("1", "true"))
    engine = Engine(decoder, tokenizer, EngineSettings.from_parameters(p))
    engine.warmup()
    if p.get("reuse_prefix", "true").lower() in ("1", "true"):
        engine.set_prefix(shared_prefix(tokenizer, info.chat_template, info.bos_token, info.eos_token))
    engine.start()
    try:
        yield engine, tokenizer, info
    finally:
        engine.stop()


@contextlib.contextmanager
def _system(name: str, url: str | None, max_tokens: int, sequences: int = 8):
    """Bring one system up; yields its send function."""
    if name == "hotpath":
        yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "in-process":
        with in_process_engine() as (engine, tokenizer, info):
            send = engine_sender(engine, tokenizer, info, max_tokens)
            send.engine = engine  # compare_generation reads its step breakdown
            yield send
    elif name == "one-at-a-time":
        from hotpath.perf.measure.reconfigure import reconfigured

        with reconfigured(url, {ENDPOINT: one_at_a_time}):
            yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "fastapi-transformers":
        from hotpath.perf.compare.alternatives.generation_fastapi import serving

        with serving() as (host, port):
            yield ndjson_sender(host, port, max_tokens)
    elif name == "llama.cpp":
        from hotpath.perf.compare.alternatives import llama_cpp

        with llama_cpp.serving(sequences=sequences) as (host, port):
            yield ndjson_sender(host, port, max_tokens, payload=llama_cpp.token_payload(max_tokens))
    else:
        raise ValueError(f"unknown system {name!r} (known: {', '.join(SYSTEMS)})")


def compare_generation(url: str | None, concurrency: tuple[int, ...] = CONCURRENCY, rounds: int = 2,
                       max_tokens: int = 48, systems: tuple[str, ...] = DEFAULT_SYSTEMS, tag: str = "",
                       log: Callable[[str], None] = logger.info, notes: list[str] | None = None) -> list[StreamingStats]:
    """Measure every system at every concurrency (Triton systems: a server with explicit model control at `url`).
    In-process runs also append the loop's step breakdown (ORT / loop / sinks) per point to `notes`."""
    from hotpath.runtime.generation.engine import EngineStats

    rows = []
    for name in systems:
        label = f"{name} {tag}".strip() if tag else name
        with _system(name, url, max_tokens, sequences=max(concurrency)) as send:
            send("Say hello.")  # warm-up, not recorded
            engine = getattr(send, "engine", None)
            for c in concurrency:
                others = wait_quiet(log)
                if engine is not None:
                    engine.stats = EngineStats()
                records, wall = run_load(send, c, rounds)
                rows.append(summarize(label, c, records, wall))
                s = rows[-1]
                log(f"[generate-perf] {label:>20} c={c:<2} TTFT p95 {s.ttft_p95_ms:6.0f} ms  ITL p50 {s.itl_p50_ms:4.0f} "
                    f"p95 {s.itl_p95_ms:4.0f} ms  {s.tokens_per_s:6.1f} tok/s  errors {s.errors}")
                if notes is not None and others is not None:
                    notes.append(f"{label} c={c}: other processes {others:.2f} cores before the point")
                if engine is not None:
                    line = f"{label} c={c}: {engine.stats.breakdown()}"
                    log(f"[generate-perf]   {line}")
                    if notes is not None:
                        notes.append(line)
    return rows


def wait_quiet(log: Callable[[str], None] = logger.info, max_wait_s: float = 90.0) -> float | None:
    """Wait (up to max_wait_s) until other processes use at most hotpath.perf.measure.host_load's limit of CPU;
    returns what they used in the last window (None when the machine cannot be read). Measuring
    goes ahead after the wait either way: the figure lands in the report's run notes."""
    from hotpath.perf.measure.host_load import measure_others

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


def _tagged_table(rows: list[StreamingStats]) -> list[str]:
    """Per tag (e.g. fp32 / q4): served vs in-process ITL p50 and tokens/s per concurrency."""
    tagged = [s for s in rows if " " in s.label and s.label.split(" ", 1)[0] in ("hotpath", "in-process")]
    if not tagged:
        return []
    tags = sorted({s.label.split(" ", 1)[1] for s in tagged})
    by = {(s.label, s.concurrency): s for s in tagged}
    lines = ["\n## Weights: served vs in-process\n",
             "| weights | concurrency | in-process ITL p50 ms | in-process tok/s | served ITL p50 ms | served tok/s "
             "| served / in-process tok/s |", "|---|---|---|---|---|---|---|"]
    for tag in tags:
        for c in sorted({s.concurrency for s in tagged if s.label.endswith(" " + tag)}):
            local, served = by.get((f"in-process {tag}", c)), by.get((f"hotpath {tag}", c))
            cell = (lambda s, f: f(s) if s else "-")
            ratio = f"{served.tokens_per_s / local.tokens_per_s:.2f}" if local and served and local.tokens_per_s else "-"
            lines.append(f"| {tag} | {c} | {cell(local, lambda s: f'{s.itl_p50_ms:.1f}')} "
                         f"| {cell(local, lambda s: f'{s.tokens_per_s:.1f}')} | {cell(served, lambda s: f'{s.itl_p50_ms:.1f}')} "
                         f"| {cell(served, lambda s: f'{s.tokens_per_s:.1f}')} | {ratio} |")
    return lines


def report(rows: list[StreamingStats], slo: StreamingSlo | None, settings: str) -> str:
    """Markdown: the table, batching's gain per concurrency, the weights table, and the SLO verdict."""
    by = {(s.label, s.concurrency): s for s in rows}
    lines = [f"# {ENDPOINT}: streaming latency and throughput\n", settings + "\n", markdown_table(rows)]
    for c in sorted({s.concurrency for s in rows}):
        base, ours = by.get(("one-at-a-time", c)), by.get(("hotpath", c))
        hf, cpp = by.get(("fastapi-transformers", c)), by.get(("llama.cpp", c))
        if ours and ((base and base.tokens_per_s) or (cpp and cpp.tokens_per_s)):
            lines.append(_ratio_line(c, ours, base, hf, cpp))
    lines += _tagged_table(rows)
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
    parser.add_argument("--system", action="append", choices=SYSTEMS,
                        help=f"measure only this one (repeatable; default: {', '.join(DEFAULT_SYSTEMS)})")
    parser.add_argument("--tag", default="", help="suffix for this run's labels (e.g. the weights: fp32, q4)")
    parser.add_argument("--merge", action="store_true",
                        help="keep earlier runs' rows (.hotpath/perf/<report>.json) that this run does not re-measure")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--follow-up", action="store_true",
                        help="instead: TTFT of follow-up chat turns, prefix cache on vs off (served; prints markdown)")
    parser.add_argument("--draft-estimate", action="store_true",
                        help="instead: tokens per pass exact prompt-lookup speculation would give (served greedy tokens)")
    parser.add_argument("--out", type=Path, default=paths.ROOT / "perf" / "reports" / f"{ENDPOINT}.md")
    args = parser.parse_args(argv)
    from hotpath.server.process import server_url

    if args.follow_up or args.draft_estimate:
        from hotpath.perf.measure.streaming import PROMPTS

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
    cmd = "hotpath study generation_compare " + " ".join(argv if argv is not None else sys.argv[1:])
    runs = [f"`{cmd.strip()}`: {', '.join(systems)}; export weights {export_weights()}; greedy, max_tokens "
            f"{args.max_tokens}, {args.rounds} requests per worker per point, prompts from "
            f"hotpath.perf.measure.streaming.PROMPTS; {time.perf_counter() - t0:.0f} s on this host ({_uptime()})."
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
