"""`retrieval` in one Python model vs its parts: p50/p95 at concurrency 1 on a local tritonserver.

Sequential gRPC requests (unique texts, so text_embedding's response cache never answers) to
sentence_embedder (the embedding step alone), text_embedding (that step behind an ensemble: what one
more hop costs) and retrieval (embedding + HNSW search, k=10, in one process), plus the retrieval
stub's resident memory.

    flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study retrieval_latency [--requests 300]
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np
import psutil

from hotpath.client import EmbeddingClient, RetrievalClient
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.stubs import stub_pids
from hotpath.server.subset import linked
from perf.lab.studies import runner

WORDS = "compress files download web editor terminal music player secure shell client library python tool".split()


def texts(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, 5)) + f" {seed}-{i}" for i in range(n)]


def timed(fn, items) -> np.ndarray:
    fn(items[:20])  # warm the channel and the models
    out = []
    for item in items[20:]:
        t = time.perf_counter()
        fn([item])
        out.append((time.perf_counter() - t) * 1e3)
    return np.array(out)


def main(argv: list[str] | None = None) -> int:
    ap = runner.parser("retrieval_latency", __doc__, allow_busy=False)
    ap.add_argument("--requests", type=int, default=300)
    args = ap.parse_args(argv)
    os.environ["HOTPATH_RETRIEVAL_DATA_DIR"] = tempfile.mkdtemp(prefix="retrieval-bench-")
    repo = linked(("retrieval", "text_embedding", "sentence_embedder"))
    http, grpc, metrics = free_ports(3)
    with LocalTriton(repository=repo, ports=ServerPorts(http=http, grpc=grpc, metrics=metrics)) as server:
        url = server.grpc_url
        rows = []
        with EmbeddingClient(url, model="sentence_embedder") as c:
            rows.append(("sentence_embedder (embedding alone, no ensemble)", timed(c.embed, texts(args.requests, 1))))
        with EmbeddingClient(url) as c:
            rows.append(("text_embedding (the same step behind a one-step ensemble)", timed(c.embed, texts(args.requests, 2))))
        with RetrievalClient(url) as c:
            rows.append(("retrieval, k=10 (embedding + search, one Python model)",
                         timed(lambda t: c.search(t, 10), texts(args.requests, 3))))
        rss = psutil.Process(stub_pids(server.process.pid, "retrieval")[0]).memory_info().rss / 2**20
    print(f"{args.requests - 20} sequential requests each (c=1), after 20 warm-up requests")
    print("| endpoint | p50 ms | p95 ms |")
    print("|---|---|---|")
    for name, ms in rows:
        print(f"| {name} | {np.median(ms):.2f} | {np.percentile(ms, 95):.2f} |")
    print(f"retrieval stub RSS: {rss:.0f} MiB")
    return 0
