"""perf/reports/retrieval.md from one run of perf.lab.compare.retrieval."""

from __future__ import annotations

import os
import time

from perf.lab.compare.retrieval_load import Point, throughput_at

ROWS = {
    "hotpath": ("hotpath `retrieval`, in-process index", 1, "one gRPC call: exact embedding + faiss HNSW in one Triton model"),
    "hotpath-pgvector": ("hotpath `retrieval`, store = pgvector", 1,
                         "one gRPC call; the model queries Postgres (one SQL round trip per batch)"),
    "two-hop": ("two hops: hotpath `text_embedding` + pgvector from the client", 2,
                "gRPC embed (its response cache off: the queries repeat), then a psycopg query from the client"),
    "fastapi": ("FastAPI + uvicorn + ORT + faiss", 1,
                "same graph, tokenizer and faiss index in one process; `def` handler, ORT 1 thread, 1 worker"),
}


def _at(points: list[Point], system: str, c: int) -> Point | None:
    hit = [p for p in points if p.system == system and p.concurrency == c]
    return hit[0] if hit else None


def _ms(p: Point | None, attr: str) -> str:
    return f"{getattr(p, attr):.2f} ms" if p else "-"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def render_report(systems, points: list[Point], recall: dict[str, float], facts: dict, concurrency,
                  duration_s: float, argv: str) -> list[str]:
    p95 = facts["p95_ms"]
    command = "flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study retrieval_compare" + (f" {argv}" if argv else "")
    lines = [
        "# Retrieval: one call vs two hops vs FastAPI; in-process index vs pgvector", "",
        f"Produced by `{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"{os.cpu_count()} cores; machine before the run: {facts['quiet']}.", "",
        f"- Corpus: {facts['documents']} Debian package descriptions, "
        + ("every package (the endpoint's own exporter with `limit = 0`, built once into the work dir: "
           "perf.lab.compare.retrieval_corpus)" if facts.get("corpus") == "full" else "the `make engines` build")
        + "; the same documents and the very vectors of its faiss index COPYed into pgvector; both stores HNSW with "
        f"M={facts['M']}, ef_construction={facts['ef_construction']}, ef_search={facts['ef_search']}, inner product.",
        f"- Queries: {facts['queries']} one-line synopses of Python's standard library modules (real search phrases "
        "that are in no document). recall@10 is against exact inner-product search over the whole corpus, with the "
        "queries embedded by the same graph.",
        f"- Load: one closed-loop Python client for every system (perf.lab.compare.retrieval_load; a thread per "
        f"concurrent request, each with its own connection), {duration_s:g} s per point, k = 10. Throughput at the "
        f"p95 target ({p95:g} ms, perf/slo.toml) is the best over concurrency {list(concurrency)} with p95 within it. "
        f"The in-process floor (RetrievalPipeline, batch 1, make engines' build) measured {facts['floor_ms']:.2f} ms "
        "p50 in this run (perf/slo.toml's floor_reference_ms for retrieval, its relative verdict's reference).",
        "- Servers: one tritonserver serving `retrieval`, `retrieval_pg` (the same model with store = \"pgvector\") "
        "and `text_embedding` (its response cache off), then the FastAPI app alone; Postgres 16 on loopback TCP "
        "(shared_buffers 512MB) on the same 2 cores, as a co-located database would be.",
        "", "## Side by side (same run, same client, same corpus)", "",
        f"| system | network hops | recall@10 | p50 at c=1 | p95 at c=1 | throughput at p95 <= {p95:g} ms | "
        f"p95 at c={max(concurrency)} | how |", "|---|---|---|---|---|---|---|---|"]
    for name in systems:
        title, hops, how = ROWS[name]
        tput, at = throughput_at(points, name, p95)
        one, top = _at(points, name, 1), _at(points, name, max(concurrency))
        r = recall.get(name)
        lines.append(f"| {title} | {hops} | {r:.4f} | {_ms(one, 'p50_ms')} | {_ms(one, 'p95_ms')} | "
                     f"{tput:.1f}/s{f' (c={at})' if at else ''} | {_ms(top, 'p95_ms')} | {how} |" if r is not None
                     else f"| {title} | {hops} | - | - | - | - | - | not measured |")
    lines += _ratios(systems, points, p95)
    lines += ["", "Every point (p50 / p95 / requests per second; errors; CPU other processes used just before it, "
              "when above the quiet limit: the host is shared, and each point waits up to 90 s for it to be quiet):", "",
              "| system | " + " | ".join(f"c={c}" for c in concurrency) + " |",
              "|---|" + "---|" * len(concurrency)]
    for name in systems:
        cells = []
        for c in concurrency:
            p = _at(points, name, c)
            others = getattr(p, "others_cores", None)
            cells.append(f"{p.p50_ms:.2f} / {p.p95_ms:.2f} ms, {p.throughput:.1f}/s"
                         + (f", {p.errors} errors" if p.errors else "")
                         + (f", others {others:.1f} cores" if others and others > 0.2 else "") if p else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += _stores(facts)
    return lines


def _ratios(systems, points: list[Point], p95: float) -> list[str]:
    one = {s: _at(points, s, 1) for s in systems}
    tput = {s: throughput_at(points, s, p95)[0] for s in systems}
    out = [""]
    if one.get("hotpath") and one.get("two-hop"):
        out.append(f"- hotpath in one call vs two hops: p50 at c=1 {one['hotpath'].p50_ms:.2f} vs "
                   f"{one['two-hop'].p50_ms:.2f} ms (two hops / one call: "
                   f"{_ratio(one['two-hop'].p50_ms, one['hotpath'].p50_ms)}); throughput at the target "
                   f"{_ratio(tput['hotpath'], tput['two-hop'])} of the two-hop pattern's.")
    if one.get("hotpath-pgvector") and one.get("two-hop"):
        out.append(f"- the same pgvector search moved into the endpoint (one hop) vs the client's two: p50 at c=1 "
                   f"{one['hotpath-pgvector'].p50_ms:.2f} vs {one['two-hop'].p50_ms:.2f} ms; throughput at the target "
                   f"{_ratio(tput['hotpath-pgvector'], tput['two-hop'])} of the two-hop pattern's.")
    if one.get("hotpath") and one.get("fastapi"):
        out.append(f"- hotpath vs FastAPI (same model, same faiss index): p50 at c=1 {one['hotpath'].p50_ms:.2f} vs "
                   f"{one['fastapi'].p50_ms:.2f} ms; throughput at the target {_ratio(tput['hotpath'], tput['fastapi'])} of "
                   "FastAPI's.")
    return out


def _stores(facts: dict) -> list[str]:
    build, sizes = facts["pg_build"], facts["pg_sizes"]
    stores = facts["stores"]
    mb = 2 ** 20
    engines = facts.get("faiss_build_s_engines")
    lines = ["", "## Index build and memory", "",
             "| store | build | on disk | memory |", "|---|---|---|---|",
             f"| in-process: faiss IndexHNSWFlat | {facts['faiss_build_s']:.1f} s in this run, 2 threads"
             f"{f' ({engines} s in make engines)' if engines else ''} | index {facts['index_file_mb']:.1f} MB "
             f"(+ corpus.jsonl) | {facts['hnsw_rss_mb']:.0f} MB resident per model instance (index + documents: RSS "
             "growth of a fresh process opening the store) |",
             *_build_row(facts.get("build") or {}),
             f"| pgvector HNSW (Postgres 16.2, pgvector 0.6.2) | COPY {build['copy_s']:.1f} s + CREATE INDEX "
             f"{build['index_s']:.1f} s (maintenance_work_mem 1GB, 1 parallel worker) | table "
             f"{sizes['table_bytes'] / mb:.0f} MB + index {sizes['index_bytes'] / mb:.0f} MB | Postgres processes "
             f"{facts['pg_rss_mb']:.0f} MB RSS after the run (shared_buffers 512MB), one server for every replica |",
             "", "## In-process index vs pgvector (the stores alone, in this process, batch 1)", "",
             "| store | recall@10 | search p50 / p95 | durable write p50 / p95 (one document) | a second replica's next "
             "search sees the write | open |", "|---|---|---|---|---|---|"]
    for label, s in stores.items():
        lines.append(f"| {label} | {s['recall']:.4f} | {s['search_ms'][0]:.2f} / {s['search_ms'][1]:.2f} ms | "
                     f"{s['write_ms'][0]:.2f} / {s['write_ms'][1]:.2f} ms | {s['visible']} | {s['open_s']:.1f} s |")
    lines += [
        "", "What differs besides the numbers:", "",
        "- Write visibility. pgvector: a write is one committed transaction (synchronous_commit, fsync); every replica "
        "on any host sees it at its next search. In-process: a write is fsync'd to the model's write-ahead log before "
        "it is acknowledged; the model instances and replicas that share that data directory (one host) replay the log "
        "before each search and see it at once; replicas on other hosts never do (each host has its own index and "
        "log). The 'second replica' column above is a second store on the same data directory / a second connection.",
        "- Failure domains. In one call (either store) the client sees one server and one error class; the two-hop "
        "client handles two (Triton and Postgres) and two retry policies. With store = pgvector an unreachable "
        "Postgres is UNAVAILABLE for the endpoint's clients (retried, then ServerUnavailableError), never bad input, "
        "and the model reconnects by itself once Postgres is back (tests/integration/test_retrieval_pgvector.py).",
        "- Scale. The in-process index holds every vector in each model instance's memory and is rebuilt by "
        "`make engines`; pgvector holds one copy for the fleet, takes writes from all replicas, and its index "
        "build runs on the database host.",
    ]
    return lines




def _build_row(build: dict) -> list[str]:
    """The whole-corpus build's own figures (the endpoint's exporter, as `make engines` runs it)."""
    if not build:
        return []
    return [f"| (the build: hotpath's exporter on the whole corpus) | embedding {build.get('embed_s')} s + faiss "
            f"{build.get('index_build_s')} s | - | peak RSS {build.get('peak_rss_mb')} MB; recall@10 "
            f"{build.get('recall_at_10')} on {build.get('held_out_queries')} held-out packages (the build's gate) |"]
