"""Retrieval side by side in one run (perf/reports/retrieval.md):

  hotpath           the `retrieval` endpoint: query text in, top-k documents out, one gRPC call (the
                    exact text embedding and a faiss HNSW search in one Triton model)
  hotpath-pgvector  the same endpoint configured with store = "pgvector" (hotpath.retrieval.pg_variant):
                    one gRPC call, the model queries Postgres
  two-hop           what teams do today: hotpath `text_embedding` over gRPC, then a pgvector query from
                    the client (two network hops, two failure domains)
  fastapi           FastAPI + uvicorn + the same ONNX graph in ONNX Runtime + HF tokenizers + the same
                    faiss index (perf.lab.compare.alternatives: RetrievalPipeline behind the FastAPI app)

Every system searches the same corpus: the build output of `make engines` (corpus.jsonl and the very
vectors in its faiss index), which this run also COPYs into a fresh pgvector table with the same HNSW
parameters. Every system is driven by the same closed-loop Python client (perf.lab.compare.retrieval_load):
p50 at concurrency 1, throughput at the p95 target, recall@10 against exact inner-product search over
the whole corpus. Then the two stores alone, in this process: index build time and size, search and
write latency, recall, and whether a second replica sees a write at once.

    flock /tmp/hotpath-bench.lock .venv/bin/python -m perf study retrieval_compare
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from hotpath import paths
from perf.lab.compare.retrieval_load import Point, Search, closed_loop, exact_top_k, query_texts, recall_at_k
from perf.lab.studies import runner

SYSTEMS = ("hotpath", "hotpath-pgvector", "two-hop", "fastapi")
CONCURRENCY = (1, 2, 4, 8)
K = 10
TABLE = "hotpath_bench_documents"
PG_SETTINGS = {"shared_buffers": "512MB", "maintenance_work_mem": "1GB", "max_parallel_maintenance_workers": "1"}
DEFAULT_P95_MS = 30.0


logger = logging.getLogger(__name__)


def _log(message: str) -> None:
    logger.info(f"[retrieval-perf] {message}")


def p95_target() -> tuple[float, int]:
    from hotpath.tuning.slo import load_slos

    slo = load_slos("cpu").get("retrieval")
    return (slo.p95_ms, slo.concurrency) if slo else (DEFAULT_P95_MS, 8)


# -- clients: one per load thread ----------------------------------------------------------------------

def _text_input(text: str):
    import tritonclient.grpc as grpcclient

    item = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
    item.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_))
    return item


def triton_search(url: str, model: str, k: int = K) -> Callable[[], Search]:
    def connect() -> Search:
        import tritonclient.grpc as grpcclient

        client = grpcclient.InferenceServerClient(url)
        top_k = grpcclient.InferInput("TOP_K", [1, 1], "INT64")
        top_k.set_data_from_numpy(np.array([[k]], dtype=np.int64))
        outputs = [grpcclient.InferRequestedOutput("IDS")]

        def search(text: str) -> list[str]:
            ids = client.infer(model, [_text_input(text), top_k], outputs=outputs).as_numpy("IDS")
            return [i.decode() for i in ids.reshape(-1) if i]
        return search
    return connect


def two_hop_search(url: str, store_args: dict, k: int = K) -> Callable[[], Search]:
    def connect() -> Search:
        import tritonclient.grpc as grpcclient

        from hotpath.runtime.retrieval.pgvector_store import PgVectorStore

        client = grpcclient.InferenceServerClient(url)
        store = PgVectorStore(**store_args)
        outputs = [grpcclient.InferRequestedOutput("EMBEDDING")]

        def search(text: str) -> list[str]:
            vector = client.infer("text_embedding", [_text_input(text)], outputs=outputs).as_numpy("EMBEDDING")
            return [i for i in store.search(vector.reshape(1, -1), k).ids[0] if i]
        return search
    return connect


def http_search(url: str, model: str = "retrieval") -> Callable[[], Search]:
    """The FastAPI app (KServe v2 HTTP; it answers with the spec's default_k)."""
    def connect() -> Search:
        import tritonclient.http as httpclient

        client = httpclient.InferenceServerClient(url)
        outputs = [httpclient.InferRequestedOutput("IDS", binary_data=True)]

        def search(text: str) -> list[str]:
            item = httpclient.InferInput("TEXT", [1, 1], "BYTES")
            item.set_data_from_numpy(np.array([[text.encode()]], dtype=np.object_), binary_data=True)
            ids = client.infer(model, [item], outputs=outputs).as_numpy("IDS")
            return [i.decode() if isinstance(i, bytes) else str(i) for i in ids.reshape(-1) if i]
        return search
    return connect


# -- systems -------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _env(**values: str) -> Iterator[None]:
    import os

    saved = dict(os.environ)   # the servers started meanwhile inherit `values`; afterwards, as it was
    os.environ.update(values)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def bench_repository(dest: Path, export: Path | None, dsn: str, table: str) -> Path:
    """text_embedding (its response cache off) and its step, `retrieval` and `retrieval_pg` (pgvector at
    `dsn`), both serving `export`."""
    from hotpath.retrieval.pg_variant import VARIANT, pgvector_params, variant_model
    from hotpath.server.subset import linked

    def no_cache(config) -> None:
        # The queries repeat (recall pass, then load): cached embeddings would time the cache, not the model.
        config.response_cache.enable = False

    dest.mkdir(parents=True)
    linked(["sentence_embedder"], dest)
    variant_model(dest, "text_embedding", {}, source="text_embedding", edit=no_cache)
    variant_model(dest, "retrieval", {}, export=export)
    variant_model(dest, VARIANT, pgvector_params(dsn, table), export=export)
    return dest


@contextlib.contextmanager
def triton(repo: Path, data_dir: Path) -> Iterator[str]:
    """A tritonserver on `repo` (the in-process store's WAL in `data_dir`, empty); yields its gRPC url."""
    from hotpath.server.local_triton import LocalTriton
    from hotpath.server.ports import ServerPorts, free_ports

    http, grpc, metrics = free_ports(3)
    with _env(HOTPATH_RETRIEVAL_DATA_DIR=str(data_dir)):
        server = LocalTriton(repository=repo, ports=ServerPorts(http, grpc, metrics), log=_log).start()
    try:
        yield server.grpc_url
    finally:
        server.stop()


@contextlib.contextmanager
def fastapi_app(repo: Path, p95_ms: float, concurrency: int) -> Iterator[str]:
    """The FastAPI alternative serving `repo`'s retrieval build (same graph and index as the endpoint)."""
    from perf.lab.compare.alternatives import launch

    alt = launch.fastapi("sync", 1, "tokenizer + ORT + faiss per request")
    ctx = launch.Context("", "retrieval", [], "retrieval", p95_ms, concurrency, _log)
    with _env(HOTPATH_MODEL_REPOSITORY=str(repo)), alt.serve(ctx) as target:
        yield target.url


def measure_system(name: str, connect: Callable[[], Search], queries: list[str], truth: list[list[str]],
                   concurrency: tuple[int, ...], duration_s: float) -> tuple[float, list[Point]]:
    search = connect()
    found = [search(q) for q in queries]
    recall = recall_at_k(found, truth)
    _log(f"{name:>16}: recall@{K} {recall:.4f} on {len(queries)} queries")
    points = []
    for c in concurrency:
        from perf.lab.compare.generation import wait_quiet

        others = wait_quiet(_log)
        p = dataclasses.replace(closed_loop(name, connect, queries, c, duration_s), others_cores=others)
        points.append(p)
        _log(f"{name:>16} c={c}: p50 {p.p50_ms:6.2f} ms  p95 {p.p95_ms:6.2f} ms  {p.throughput:7.1f}/s  "
             f"errors {p.errors}{'  first: ' + p.first_error[:120] if p.errors else ''}")
    return recall, points


# -- the stores alone ------------------------------------------------------------------------------------

def _percentiles(seconds: list[float]) -> tuple[float, float]:
    ms = np.array(seconds) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 95))


def _timed(calls: Callable[[int], object], n: int) -> list[float]:
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        calls(i)
        out.append(time.perf_counter() - t0)
    return out


def compare_stores(base: Path, store_args: dict, query_vectors: np.ndarray, truth: list[list[str]],
                   writes: int = 50) -> dict[str, dict]:
    """In-process (HnswStore over the build, a fresh WAL dir) vs pgvector (the loaded table): search
    latency (batch 1), recall@10, durable single-document write latency, and visibility of a write in a
    second instance (a second replica: another HnswStore on the same data dir; another connection)."""
    from hotpath.runtime.retrieval.hnsw_store import HnswStore
    from hotpath.runtime.retrieval.pgvector_store import PgVectorStore

    out: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="hotpath-retrieval-wal-") as wal:
        ef = store_args["ef_search"]
        pairs = {"in-process (faiss HNSW + WAL)": lambda: HnswStore(base, Path(wal), ef_search=ef),
                 "pgvector (Postgres 16, pgvector 0.6 HNSW)": lambda: PgVectorStore(**store_args)}
        for label, open_store in pairs.items():
            t0 = time.perf_counter()
            first = open_store()
            open_s = time.perf_counter() - t0
            second = open_store()
            out[label] = {"open_s": open_s, **_measure_store(first, second, query_vectors, truth, writes)}
            for s in (first, second):
                s.close()
            _log(f"store {label}: {out[label]}")
    return out


def _measure_store(first, second, query_vectors: np.ndarray, truth: list[list[str]], writes: int) -> dict:
    n = len(query_vectors)
    found = [first.search(query_vectors[i:i + 1], K).ids[0] for i in range(n)]
    search = _timed(lambda i: first.search(query_vectors[i % n][None], K), 3 * n)
    vectors = query_vectors[:writes]
    write = _timed(lambda i: first.upsert([f"bench-write-{i}"], vectors[i:i + 1], [f"written {i}"]), writes)
    # the other replica's very next search, right after each write returned
    seen = sum(second.search(vectors[i:i + 1], 1).ids[0][0] == f"bench-write-{i}" for i in range(writes))
    first.delete([f"bench-write-{i}" for i in range(writes)])
    return {"recall": recall_at_k(found, truth), "search_ms": _percentiles(search), "write_ms": _percentiles(write),
            "visible": f"{seen}/{writes}"}


def open_rss_mb(base: Path) -> float:
    """Resident memory one in-process store adds to a process: opened in a fresh interpreter, RSS after
    minus before (an allocator reused by earlier work in this process would hide it)."""
    import subprocess

    code = ("import sys, tempfile, psutil; from pathlib import Path; p = psutil.Process(); "
            "from hotpath.runtime.retrieval.hnsw_store import HnswStore; before = p.memory_info().rss; "
            "s = HnswStore(Path(sys.argv[1]), Path(tempfile.mkdtemp())); print(p.memory_info().rss - before)")
    done = subprocess.run([sys.executable, "-c", code, str(base)], capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 2**20


def faiss_build_seconds(vectors: np.ndarray, m: int, ef_construction: int) -> float:
    from hotpath.runtime.retrieval.hnsw import HnswIndex

    t0 = time.perf_counter()
    HnswIndex.build(vectors, m, ef_construction, 64, threads=2)
    return time.perf_counter() - t0


def postgres_rss_mb(pid: int | None) -> float:
    import psutil

    if not pid:
        return 0.0
    root = psutil.Process(pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20


# -- the run ---------------------------------------------------------------------------------------------

def run(systems: tuple[str, ...], concurrency: tuple[int, ...], duration_s: float, report: Path,
        allow_busy: bool, corpus: str) -> None:
    from hotpath.retrieval.pg_variant import build_dir
    from hotpath.retrieval.pgserver_local import LocalPostgres
    from hotpath.runtime.retrieval.pgvector_seed import build_arrays, manifest
    from hotpath.runtime.retrieval.pgvector_store import PgVectorStore
    from hotpath.sweeps.measure.host_load import require_quiet
    from hotpath.sweeps.measure.pipelines import TextPipeline
    from perf.lab.compare.retrieval_corpus import full_build

    if corpus == "full":
        base, build_metrics = full_build(_log)
    else:
        base, build_metrics = build_dir(), {}
    quiet = require_quiet(allow_busy, log=_log)
    info = manifest(base)
    p95_ms, slo_c = p95_target()
    ids, vectors, documents = build_arrays(base)
    queries = query_texts()
    query_vectors = TextPipeline(2, False, graph=str(base / "model.onnx"))(queries)["EMBEDDING"]
    truth = exact_top_k(vectors, ids, query_vectors, K)
    _log(f"corpus {len(ids)} documents x {vectors.shape[1]}; {len(queries)} queries; p95 target {p95_ms} ms")
    m, efc, ef = int(info["M"]), int(info["ef_construction"]), int(info["ef_search"])
    facts: dict = {"documents": len(ids), "queries": len(queries), "M": m, "ef_construction": efc, "ef_search": ef,
                   "corpus": corpus, "build": build_metrics, "faiss_build_s_engines": info.get("index_build_s"),
                   "p95_ms": p95_ms, "quiet": quiet.summary(),
                   "index_file_mb": (base / "index.faiss").stat().st_size / 2**20}
    facts["faiss_build_s"] = faiss_build_seconds(vectors, m, efc)
    facts["hnsw_rss_mb"] = open_rss_mb(base)
    from hotpath.sweeps.registry import get_endpoint

    # perf/slo.toml's floor_reference_ms for retrieval: the in-process floor (make engines' build) in this run
    facts["floor_ms"] = get_endpoint("retrieval").measure_floor(quick=True, log=_log).single_p50_ms()
    _log(f"faiss HNSW build: {facts['faiss_build_s']:.1f} s")
    pg = LocalPostgres(settings=PG_SETTINGS)
    points: list[Point] = []
    recall: dict[str, float] = {}
    try:
        pg.start()
        store_args = {"dsn": pg.dsn, "dim": int(vectors.shape[1]), "table": TABLE, "m": m, "ef_construction": efc,
                      "ef_search": ef}
        loader = PgVectorStore(**store_args, maintenance_work_mem=PG_SETTINGS["maintenance_work_mem"])
        facts["pg_build"] = loader.load(ids, vectors, documents)
        facts["pg_sizes"] = loader.sizes()
        loader.close()
        _log(f"pgvector: {facts['pg_build']}, {facts['pg_sizes']}")
        facts["stores"] = compare_stores(base, store_args, query_vectors, truth)
        with tempfile.TemporaryDirectory(prefix="hotpath-retrieval-bench-") as tmp:
            repo = bench_repository(Path(tmp) / "repo", base if corpus == "full" else None, pg.dsn, TABLE)
            if set(systems) - {"fastapi"}:
                with triton(repo, Path(tmp) / "data") as url:
                    connects = {"hotpath": lambda: triton_search(url, "retrieval"),
                                "hotpath-pgvector": lambda: triton_search(url, "retrieval_pg"),
                                "two-hop": lambda: two_hop_search(url, store_args)}
                    for name in (s for s in systems if s != "fastapi"):
                        recall[name], got = measure_system(name, connects[name](), queries, truth, concurrency,
                                                           duration_s)
                        points += got
            if "fastapi" in systems:
                with fastapi_app(repo, p95_ms, slo_c) as http_url:
                    recall["fastapi"], got = measure_system("fastapi", http_search(http_url), queries, truth,
                                                            concurrency, duration_s)
                    points += got
        facts["pg_rss_mb"] = postgres_rss_mb(pg.pid)
    finally:
        pg.remove()
    report.write_text("\n".join(render(systems, points, recall, facts, concurrency, duration_s)) + "\n")
    _log(f"report: {report}")


def render(systems, points: list[Point], recall: dict[str, float], facts: dict, concurrency, duration_s) -> list[str]:
    from perf.lab.compare.retrieval_report import render_report

    return render_report(systems, points, recall, facts, concurrency, duration_s, " ".join(sys.argv[1:]))


def main(argv: list[str] | None = None) -> int:
    parser = runner.parser("retrieval_compare", __doc__)
    parser.add_argument("--system", action="append", choices=SYSTEMS, help="only these (repeatable)")
    parser.add_argument("--concurrency", type=int, nargs="+", default=list(CONCURRENCY))
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per load point")
    parser.add_argument("--report", type=Path, default=paths.ROOT / "perf" / "reports" / "retrieval.md")
    parser.add_argument("--corpus", choices=("full", "built"), default="full",
                        help="full: every Debian package (built once into the work dir); built: make engines' build")
    args = parser.parse_args(argv)
    run(tuple(args.system or SYSTEMS), tuple(args.concurrency), args.duration, args.report, args.allow_busy,
        args.corpus)
    return 0
