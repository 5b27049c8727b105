"""The OpenAI-compatible API's cost and hotpath's /v1/embeddings beside infinity-emb, in one run.

1. The API's own cost: c=1 p50 of POST /v1/embeddings minus the same request (one short text) to
   text_embedding over gRPC (tritonclient), rounds interleaved API / gRPC so drift hits both alike.
   Both clients are Python on the same host; their own costs are inside the figures.
2. Side by side on one protocol (OpenAI-style HTTP embeddings, one text per request): hotpath's API and
   infinity-emb (ONNX Runtime engine, mean pooling, the same model files, its own venv), c=1 p50 and a
   closed-loop concurrency sweep: throughput at the p95 target is the best req/s among the loads whose
   p95 stays under it. Every request carries a text never sent before (no response cache helps either;
   Triton's cache is also off), rounds interleaved.

`python -m perf study openai_api [--rounds 3 --requests 300 --duration 8 --concurrency 1,2,4,8]`; writes
perf/reports/openai_api.md.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from urllib.parse import urlparse

import aiohttp
import numpy as np

from hotpath import paths
from hotpath.client import EmbeddingClient
from hotpath.errors import HotpathError
from hotpath.exporters.sentence_encoder import minilm_dir
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.subset import linked
from hotpath.specs.repository import Repository
from hotpath.sweeps.measure.host_load import require_quiet
from perf.lab.studies import runner

MODEL = "text_embedding"
TEXT = "request {} asks how to reset a forgotten password for the customer portal"   # ~16 tokens


def _texts(tag: str):
    for i in count():
        yield TEXT.format(f"{tag}-{i}")


@dataclass
class Point:
    label: str
    concurrency: int
    requests_per_s: float
    p50_ms: float
    p95_ms: float
    errors: int


def c1_http(base_url: str, texts, n: int) -> float:
    """p50 ms of `n` sequential POST /embeddings on one keep-alive connection."""
    url = urlparse(base_url)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
    times = []
    for _ in range(n):
        body = json.dumps({"model": MODEL, "input": next(texts), "encoding_format": "float"}).encode()
        t0 = time.perf_counter()
        conn.request("POST", url.path + "/embeddings", body, {"content-type": "application/json"})
        response = conn.getresponse()
        data = response.read()
        times.append(time.perf_counter() - t0)
        if response.status != 200:
            raise HotpathError(f"{base_url}: {response.status} {data[:200]!r}")
    conn.close()
    return statistics.median(times) * 1e3


def c1_grpc(client: EmbeddingClient, texts, n: int) -> float:
    times = []
    for _ in range(n):
        text = next(texts)
        t0 = time.perf_counter()
        client.embed([text])
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


async def _closed_loop(base_url: str, texts, concurrency: int, duration_s: float) -> tuple[list[float], int, float]:
    latencies, errors = [], 0
    stop_at = time.perf_counter() + duration_s

    async def worker(session: aiohttp.ClientSession):
        nonlocal errors
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            async with session.post(base_url + "/embeddings", json={"model": MODEL, "input": next(texts),
                                                                    "encoding_format": "float"}) as r:
                await r.read()
                if r.status != 200:
                    errors += 1
                    continue
            latencies.append(time.perf_counter() - t0)

    started = time.perf_counter()
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return latencies, errors, time.perf_counter() - started


def sweep_point(label: str, base_url: str, texts, concurrency: int, duration_s: float) -> Point:
    latencies, errors, wall = asyncio.run(_closed_loop(base_url, texts, concurrency, duration_s))
    ms = np.array(latencies) * 1e3
    return Point(label, concurrency, len(latencies) / wall, float(np.percentile(ms, 50)), float(np.percentile(ms, 95)),
                 errors)


def best_under(points: list[Point], p95_ms: float) -> Point | None:
    ok = [p for p in points if p.p95_ms <= p95_ms and not p.errors]
    return max(ok, key=lambda p: p.requests_per_s) if ok else None


def _median_points(points: list[Point]) -> list[Point]:
    """Per (label, concurrency): the round whose throughput is the median."""
    out = []
    for key in dict.fromkeys((p.label, p.concurrency) for p in points):
        group = sorted((p for p in points if (p.label, p.concurrency) == key), key=lambda p: p.requests_per_s)
        out.append(group[len(group) // 2])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("openai_api", __doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=300, help="c=1 requests per round and system")
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per concurrency point")
    parser.add_argument("--concurrency", default="1,2,4,8")
    parser.add_argument("--p95-ms", type=float, default=25.0)
    parser.add_argument("--no-infinity", action="store_true", help="measure the API's own cost only")
    parser.add_argument("--out", default=str(paths.ROOT / "perf" / "reports" / "openai_api.md"))
    args = parser.parse_args(argv)
    quiet = require_quiet(args.allow_busy)
    loads = [int(c) for c in args.concurrency.split(",")]
    c1 = {"api": [], "grpc": [], "infinity": []}
    points: list[Point] = []
    repository = linked(Repository().endpoint(MODEL).models)   # text_embedding's models only
    with LocalTriton(repository, ServerPorts(*free_ports(3)), cache_bytes=0, log=lambda m: None) as triton, \
            OpenAIServer(triton.grpc_url, free_ports(1)[0], repository) as api, \
            EmbeddingClient(triton.grpc_url) as grpc_client:
        with _infinity(args.no_infinity) as infinity:
            systems = {"api": api.base_url, **({"infinity": infinity} if infinity else {})}
            texts = {name: _texts(name) for name in (*systems, "grpc")}
            for name, url in systems.items():   # warm both (first requests load and compile)
                c1_http(url, texts[name], 50)
            c1_grpc(grpc_client, texts["grpc"], 50)
            for r in range(args.rounds):
                c1["grpc"].append(c1_grpc(grpc_client, texts["grpc"], args.requests))
                for name, url in systems.items():
                    c1[name].append(c1_http(url, texts[name], args.requests))
                print(f"[openai_api] round {r + 1}: c=1 p50 " + ", ".join(f"{k} {v[-1]:.2f} ms" for k, v in c1.items()
                                                                          if v), flush=True)
                for load in loads:
                    for name, url in systems.items():
                        point = sweep_point(name, url, texts[name], load, args.duration)
                        points.append(point)
                        print(f"[openai_api]   {name} c={load}: {point.requests_per_s:.0f} req/s, p50 "
                              f"{point.p50_ms:.1f} ms, p95 {point.p95_ms:.1f} ms, errors {point.errors}", flush=True)
    report = render(args, quiet.summary(), c1, _median_points(points), loads)
    Path(args.out).write_text(report)
    print(report)
    return 0


class _infinity:
    def __init__(self, skip: bool):
        self.skip, self._cm = skip, None

    def __enter__(self) -> str | None:
        if self.skip:
            return None
        from perf.lab.compare.alternatives.infinity_emb import infinity_server

        self._cm = infinity_server(free_ports(1)[0], minilm_dir())
        return self._cm.__enter__()

    def __exit__(self, *exc):
        if self._cm:
            self._cm.__exit__(*exc)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def render(args, host: str, c1: dict[str, list[float]], points: list[Point], loads: list[int]) -> str:
    med = {k: statistics.median(v) for k, v in c1.items() if v}
    overhead = [a - g for a, g in zip(c1["api"], c1["grpc"])]
    lines = ["# The OpenAI-compatible API: its own cost and /v1/embeddings beside infinity-emb", "",
             f"Command: `python -m perf study openai_api --rounds {args.rounds} --requests {args.requests} --duration "
             f"{args.duration:g} --concurrency {args.concurrency} --p95-ms {args.p95_ms:g}`"
             + (" --no-infinity" if args.no_infinity else "") + f" ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
             f"CPU: {_cpu()}. Host at the start: {host}.", "",
             "One short text per request (~16 tokens), never sent before (no cache helps; Triton's response cache off). "
             "Clients are Python on the same host (http.client / tritonclient at c=1, aiohttp for the sweep); "
             "their own costs are inside every figure. Rounds interleaved; medians of rounds.", "",
             "## The API's own cost (c=1 p50)", "",
             "| | p50 ms per round | median |", "|---|---|---|",
             f"| gRPC to text_embedding | {', '.join(f'{v:.2f}' for v in c1['grpc'])} | {med['grpc']:.2f} |",
             f"| POST /v1/embeddings | {', '.join(f'{v:.2f}' for v in c1['api'])} | {med['api']:.2f} |",
             f"| **API overhead** | {', '.join(f'{v:+.2f}' for v in overhead)} | **{statistics.median(overhead):+.2f}** |",
             ""]
    if "infinity" in med:
        lines += ["## Side by side: /v1/embeddings, hotpath vs infinity-emb 0.0.78 (ONNX Runtime, mean pooling)", "",
                  "| | c=1 p50 ms (rounds) | " + " | ".join(f"c={c}: req/s, p95 ms" for c in loads)
                  + f" | req/s at p95 <= {args.p95_ms:g} ms |",
                  "|---|---|" + "---|" * len(loads) + "---|"]
        for name, title in (("api", "hotpath API"), ("infinity", "infinity-emb")):
            row = {p.concurrency: p for p in points if p.label == name}
            best = best_under(list(row.values()), args.p95_ms)
            lines.append(f"| {title} | {med[name]:.2f} ({', '.join(f'{v:.2f}' for v in c1[name])}) | "
                         + " | ".join(f"{row[c].requests_per_s:.0f}, {row[c].p95_ms:.1f}" for c in loads) + " | "
                         + (f"{best.requests_per_s:.0f} (c={best.concurrency})" if best else "none") + " |")
        api_best = best_under([p for p in points if p.label == "api"], args.p95_ms)
        inf_best = best_under([p for p in points if p.label == "infinity"], args.p95_ms)
        peak = {name: max((p for p in points if p.label == name), key=lambda p: p.requests_per_s)
                for name in ("api", "infinity")}
        lines += ["", f"Peak throughput (any p95): hotpath {peak['api'].requests_per_s:.0f} req/s (c={peak['api'].concurrency})"
                      f" vs infinity {peak['infinity'].requests_per_s:.0f} req/s (c={peak['infinity'].concurrency}): "
                      f"{peak['api'].requests_per_s / peak['infinity'].requests_per_s:.2f}x."]
        if api_best and inf_best:
            lines += ["", f"hotpath/infinity at the p95 target: {api_best.requests_per_s / inf_best.requests_per_s:.2f}x "
                          f"(goal >= 1.3x); c=1 p50 {med['api']:.2f} vs {med['infinity']:.2f} ms (goal: not above)."]
    lines += ["", f"Python {sys.version.split()[0]}; hotpath's API: Starlette on uvicorn (uvloop, httptools), "
                  "bare grpc.aio calls to Triton (hotpath.openai_api.triton); text_embedding as specified in build/sentence_embedder.toml.", ""]
    return "\n".join(lines)
