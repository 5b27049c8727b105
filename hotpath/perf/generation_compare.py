"""Text generation side by side in one run: TTFT, ITL and tokens/s at each concurrency for

  hotpath             the text_generation endpoint as built (continuous batching)
  one-at-a-time       (a) the same model and code, reloaded with max_batch = 1: requests run in turn
  fastapi-transformers (b) transformers `generate` + a per-token streamer behind FastAPI

Every system gets the same greedy prompts and max_tokens, so each generates the same tokens.

    python -m hotpath.perf.generation_compare            # own server; report -> perf/reports/text_generation.md
    python -m hotpath.perf.generation_compare --url localhost:8001   # a server with explicit model control
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.perf.streaming import (
    StreamingSlo,
    StreamingStats,
    load_streaming_slos,
    markdown_table,
    meets,
    ndjson_sender,
    run_load,
    summarize,
    triton_sender,
)

ENDPOINT = "text_generation"
SYSTEMS = ("hotpath", "one-at-a-time", "fastapi-transformers")
CONCURRENCY = (1, 4, 8, 16)


def one_at_a_time(config):
    """(a): the same endpoint with one KV slot, so the loop never batches."""
    config.parameters["max_batch"].string_value = "1"
    return config


@contextlib.contextmanager
def _system(name: str, url: str, max_tokens: int):
    """Bring one system up; yields its send function."""
    if name == "hotpath":
        yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "one-at-a-time":
        from hotpath.perf.reload import reconfigured

        with reconfigured(url, {ENDPOINT: one_at_a_time}):
            yield triton_sender(url, ENDPOINT, max_tokens)
    elif name == "fastapi-transformers":
        from hotpath.perf.alternatives.generation_fastapi import serving

        with serving() as (host, port):
            yield ndjson_sender(host, port, max_tokens)
    else:
        raise ValueError(f"unknown system {name!r} (known: {', '.join(SYSTEMS)})")


def compare_generation(url: str, concurrency: tuple[int, ...] = CONCURRENCY, rounds: int = 2, max_tokens: int = 48,
                       systems: tuple[str, ...] = SYSTEMS, log: Callable[[str], None] = print) -> list[StreamingStats]:
    """Measure every system at every concurrency (a server with explicit model control at `url`)."""
    rows = []
    for name in systems:
        with _system(name, url, max_tokens) as send:
            send("Say hello.")  # warm-up, not recorded
            for c in concurrency:
                records, wall = run_load(send, c, rounds)
                rows.append(summarize(name, c, records, wall))
                s = rows[-1]
                log(f"[generate-perf] {name:>20} c={c:<2} TTFT p95 {s.ttft_p95_ms:6.0f} ms  ITL p50 {s.itl_p50_ms:4.0f} "
                    f"p95 {s.itl_p95_ms:4.0f} ms  {s.tokens_per_s:6.1f} tok/s  errors {s.errors}")
    return rows


def report(rows: list[StreamingStats], slo: StreamingSlo | None, settings: str) -> str:
    """Markdown: the table, batching's gain at concurrency 8, and the SLO verdict."""
    by = {(s.label, s.concurrency): s for s in rows}
    lines = [f"# {ENDPOINT}: streaming latency and throughput\n", settings + "\n", markdown_table(rows)]
    for c in sorted({s.concurrency for s in rows}):
        base, ours, hf = by.get(("one-at-a-time", c)), by.get(("hotpath", c)), by.get(("fastapi-transformers", c))
        if ours and base and base.tokens_per_s:
            line = f"- concurrency {c}: hotpath {ours.tokens_per_s:.1f} tok/s = {ours.tokens_per_s / base.tokens_per_s:.2f}x one-at-a-time"
            if hf and hf.tokens_per_s:
                line += f", {ours.tokens_per_s / hf.tokens_per_s:.2f}x FastAPI + transformers"
            lines.append(line)
    if slo:
        at = by.get(("hotpath", slo.concurrency))
        verdict = "not measured" if at is None else ("MET" if meets(at, slo) else "MISSED")
        lines.append(f"\nSLO (perf/slo.toml): TTFT p95 <= {slo.ttft_p95_ms:.0f} ms and ITL p95 <= "
                     f"{slo.itl_p95_ms:.0f} ms at concurrency {slo.concurrency}: **{verdict}**")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hotpath.perf.generation_compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=None, help="server with explicit model control (default: start one)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--rounds", type=int, default=2, help="requests per worker at each concurrency")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--system", action="append", choices=SYSTEMS, help="measure only this one (repeatable)")
    parser.add_argument("--profile", default="cpu")
    parser.add_argument("--out", type=Path, default=paths.ROOT / "perf" / "reports" / f"{ENDPOINT}.md")
    args = parser.parse_args(argv)
    from hotpath.server.process import server_url as _server

    t0 = time.perf_counter()
    with _server(args.url) as url:
        rows = compare_generation(url, tuple(args.concurrency), args.rounds, args.max_tokens,
                                  tuple(args.system or SYSTEMS))
    slo = load_streaming_slos(args.profile).get(ENDPOINT)
    settings = (f"Greedy, max_tokens {args.max_tokens}, {args.rounds} requests per worker per point, prompts from "
                f"hotpath.perf.streaming.PROMPTS; one run of {time.perf_counter() - t0:.0f} s on this host.")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report(rows, slo, settings))
    print(f"[generate-perf] report: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
