"""Pick the ANN library for the `retrieval` endpoint: hnswlib vs usearch vs faiss-cpu HNSW.

Same embeddings (the endpoint's own vectors of Debian package descriptions, saved by the caller as
.npy), same HNSW parameters, 2 build threads: build time, recall@10 against exact inner-product
search on held-out queries, single-query latency (c=1, k=10) and the index's size on disk.

    .venv/bin/python -m perf study retrieval_ann EMBEDDINGS.npy [--m 16 --ef-construction 200 --ef-search 64]

hnswlib and usearch (CANDIDATES, pinned) are installed into .hotpath/study-libs/retrieval_ann/ on first use.
"""

from __future__ import annotations

import os
import tempfile
import time

import numpy as np

from perf.lab.studies import runner


def exact(base: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    return np.argsort(-(queries @ base.T), axis=1)[:, :k]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(f) & set(t)) / len(t) for f, t in zip(found, truth)]))


def hnswlib_lib(base, m, efc, ef, path):
    import hnswlib

    index = hnswlib.Index(space="ip", dim=base.shape[1])
    index.init_index(max_elements=len(base), ef_construction=efc, M=m)
    index.add_items(base, np.arange(len(base)), num_threads=2)
    index.set_ef(ef)
    index.set_num_threads(1)
    index.save_index(path)
    return lambda q, k: index.knn_query(q, k=k)[0]


def usearch_lib(base, m, efc, ef, path):
    from usearch.index import Index

    index = Index(ndim=base.shape[1], metric="ip", dtype="f32", connectivity=m, expansion_add=efc, expansion_search=ef)
    index.add(np.arange(len(base)), base, threads=2)
    index.save(path)
    return lambda q, k: np.atleast_2d(index.search(q, k, threads=1).keys)


def faiss_lib(base, m, efc, ef, path):
    import faiss

    faiss.omp_set_num_threads(2)
    index = faiss.IndexHNSWFlat(base.shape[1], m, faiss.METRIC_INNER_PRODUCT)
    index.hnsw.efConstruction = efc
    index.add(base)
    index.hnsw.efSearch = ef
    faiss.write_index(index, path)

    def search(q, k):
        faiss.omp_set_num_threads(1)
        return index.search(q, k)[1]
    return search


# The libraries compared with faiss (import name -> pin); not dependencies of hotpath.
CANDIDATES = {"hnswlib": "hnswlib==0.8.0", "usearch": "usearch==2.26.6", "numkong": "numkong==7.8.6"}  # numkong: usearch's kernels
LIBS = {"hnswlib 0.8.0": hnswlib_lib, "usearch 2.26.6": usearch_lib, "faiss-cpu 1.15.1": faiss_lib}


def main(argv: list[str] | None = None) -> int:
    ap = runner.parser("retrieval_ann", __doc__, allow_busy=False)
    ap.add_argument("embeddings")
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--ef-construction", type=int, default=200)
    ap.add_argument("--ef-search", type=int, default=64)
    ap.add_argument("--held-out", type=int, default=500)
    args = ap.parse_args(argv)
    runner.candidates("retrieval_ann", CANDIDATES)
    vectors = np.load(args.embeddings).astype(np.float32)
    order = np.random.default_rng(0).permutation(len(vectors))
    queries, base = vectors[order[:args.held_out]], vectors[order[args.held_out:]]
    truth = exact(base, queries, 10)
    print(f"{len(base)} documents, {len(queries)} held-out queries, M={args.m} "
          f"ef_construction={args.ef_construction} ef_search={args.ef_search}")
    print("| library | build s | recall@10 | query p50 ms | query p95 ms | index MB |")
    print("|---|---|---|---|---|---|")
    for name, make in LIBS.items():
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "index")
            t0 = time.perf_counter()
            search = make(base, args.m, args.ef_construction, args.ef_search, path)
            build = time.perf_counter() - t0
            found = np.vstack([search(q[None, :], 10) for q in queries])
            times = []
            for q in queries:
                t = time.perf_counter()
                search(q[None, :], 10)
                times.append((time.perf_counter() - t) * 1e3)
            size = os.path.getsize(path) / 2**20
        print(f"| {name} | {build:.2f} | {recall(found, truth):.4f} | {np.median(times):.3f} | "
              f"{np.percentile(times, 95):.3f} | {size:.1f} |")
    return 0
