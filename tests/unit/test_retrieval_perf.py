"""The retrieval comparison's harness and report (perf.lab.compare.retrieval_load / retrieval_report), without servers."""

import numpy as np

from perf.lab.compare.retrieval_load import Point, closed_loop, exact_top_k, query_texts, recall_at_k, throughput_at
from perf.lab.compare.retrieval_report import render_report


def test_exact_top_k_is_the_best_inner_products_in_order():
    rng = np.random.default_rng(0)
    vectors, queries = rng.standard_normal((300, 8)), rng.standard_normal((40, 8))
    ids = [f"d{i}" for i in range(300)]
    got = exact_top_k(vectors, ids, queries, 5)
    want = [[ids[j] for j in row] for row in np.argsort(-(queries @ vectors.T), axis=1)[:, :5]]
    assert got == want


def test_recall_counts_the_share_of_true_neighbours_found():
    assert recall_at_k([["a", "b"], ["c", "x"]], [["b", "a"], ["c", "d"]]) == 0.75
    assert recall_at_k([["x", "y"]], [["a", "b"]]) == 0.0


def test_throughput_at_target_takes_the_best_clean_point_within_it():
    points = [Point("s", 1, 100, 0, 1.0, 5.0, 9.0), Point("s", 4, 300, 0, 1.0, 12.0, 29.0),
              Point("s", 8, 500, 0, 1.0, 20.0, 45.0), Point("s", 2, 400, 3, 1.0, 6.0, 10.0),
              Point("other", 1, 900, 0, 1.0, 1.0, 2.0)]
    assert throughput_at(points, "s", 30.0) == (300.0, 4)
    assert throughput_at(points, "s", 5.0) == (0.0, None)


def test_closed_loop_counts_requests_and_keeps_failures_as_data():
    calls = []

    def connect():
        def search(text):
            calls.append(text)
            if len(calls) % 3 == 0:
                raise RuntimeError("refused")
            return [text]
        return search

    p = closed_loop("fake", connect, ["q1", "q2", "q3"], 2, 0.3, warmup=0)
    assert p.requests == len(calls) and p.errors == len(calls) // 3 and p.errors > 0
    assert p.first_error == "RuntimeError: refused" and p.p95_ms >= p.p50_ms > 0
    assert p.throughput == (p.requests - p.errors) / p.wall_s


def test_a_client_that_cannot_start_is_an_error_not_a_hang():
    def connect():
        raise ConnectionError("no server")

    p = closed_loop("down", connect, ["q"], 3, 0.1)
    assert p.errors == 3 and p.throughput == 0 and "no server" in p.first_error


def test_queries_are_distinct_real_sentences():
    texts = query_texts()
    assert len(texts) >= 100 and len(set(texts)) == len(texts) == len(query_texts())
    assert all(t[-1] in ".)" and len(t) >= 16 for t in texts)


def test_report_has_a_row_per_system_and_the_command():
    points = [Point(s, c, 100 * c, 0, 1.0, 2.0 * c, 3.0 * c) for s in ("hotpath", "two-hop") for c in (1, 8)]
    facts = {"p95_ms": 30.0, "quiet": "quiet", "documents": 10, "queries": 5, "M": 16, "ef_construction": 200,
             "ef_search": 64, "floor_ms": 1.5, "faiss_build_s": 1.0, "index_file_mb": 1.0, "hnsw_rss_mb": 2.0,
             "pg_build": {"copy_s": 0.1, "index_s": 2.0}, "pg_sizes": {"table_bytes": 2 ** 20, "index_bytes": 2 ** 20},
             "pg_rss_mb": 50.0, "build": {},
             "stores": {"in-process": {"recall": 0.99, "search_ms": (0.3, 0.4), "write_ms": (3.0, 5.0),
                                       "visible": "50/50", "open_s": 0.1}}}
    text = "\n".join(render_report(("hotpath", "two-hop"), points, {"hotpath": 0.98, "two-hop": 0.97}, facts,
                                   (1, 8), 5.0, "--corpus built"))
    assert "retrieval_compare --corpus built`" in text
    assert "| hotpath `retrieval`, in-process index | 1 | 0.9800 | 2.00 ms | 3.00 ms | 800.0/s (c=8) | 24.00 ms" in text
    assert "| two hops: hotpath `text_embedding` + pgvector from the client | 2 | 0.9700 |" in text
    assert "two hops / one call: 1.00x" in text
