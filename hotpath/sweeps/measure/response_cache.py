"""Response cache for text_embedding: latency of hits vs misses, hit rate under repeated texts."""

from __future__ import annotations

import json
import logging

import numpy as np

from hotpath.exporters.samples import generated_dir, short_texts
from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.measure.point import measure

logger = logging.getLogger(__name__)

WORDS = ("fast inference gpu batching latency target search ranking moderation retrieval document query "
         "index vector cache replica shard budget tail percentile queue kernel").split()


def texts_payload(name: str, texts: list[str]):
    """A perf_analyzer --input-data file of one-text requests."""
    path = generated_dir() / name
    path.write_text(json.dumps({"data": [{"TEXT": [t]} for t in texts]}))
    return path


def unique_texts(n: int, seed: int = 1) -> list[str]:
    """n distinct short texts (8-32 tokens), never repeated: every request is a cache miss."""
    rng = np.random.default_rng(seed)
    return [f"{i} " + " ".join(rng.choice(WORDS, rng.integers(6, 24))) for i in range(n)]


def zipf_texts(n: int, distinct: int = 3000, seed: int = 2) -> list[str]:
    """n requests drawn from `distinct` texts with a Zipf(1.1) popularity, like real query logs."""
    rng = np.random.default_rng(seed)
    base = unique_texts(distinct, seed=seed + 100)
    weights = 1.0 / np.arange(1, distinct + 1) ** 1.1  # truncated Zipf: no pile-up on the last rank
    ranks = rng.choice(distinct, size=n, p=weights / weights.sum())
    return [base[r] for r in ranks]


def measure_cache(url: str, endpoint: str = "text_embedding", log=logger.info) -> list[str]:
    """Report lines: miss and hit latency at concurrency 1, and a repeated-text load at concurrency 8."""
    m = Measurement(2000, 30, 4)
    misses = measure(url, endpoint, "concurrency", 1, texts_payload("cache_misses.json", unique_texts(5000)), m, "misses")
    hot = short_texts()[:10]
    from hotpath.client import EmbeddingClient

    with EmbeddingClient(url, model=endpoint) as client:  # fill the cache with the hot texts
        for text in hot:
            client.embed([text])
    hits = measure(url, endpoint, "concurrency", 1, texts_payload("cache_hot.json", hot), m, "hits")
    mixed = measure(url, endpoint, "concurrency", 8, texts_payload("cache_zipf.json", zipf_texts(20000)), m, "zipf")
    rows = []
    for name, p in (("all misses (unique texts), c=1", misses), ("all hits (10 repeated texts), c=1", hits),
                    ("Zipf(1.1) over 3000 texts, c=8", mixed)):
        rate = p.steps.get(endpoint, {}).get("cache_hit_rate", 0.0)
        rows.append(f"| {name} | {rate:.0%} | {p.p50_ms:.2f} | {p.p95_ms:.2f} | {p.throughput:.1f} |")
        log(f"[perf] cache {name}: hit rate {rate:.0%}, p50 {p.p50_ms:.2f} ms, p95 {p.p95_ms:.2f} ms, {p.throughput:.1f}/s")
    return ["", f"### {endpoint}: response cache", "",
            "Enabled in the endpoint's spec (`[response_cache]`), local cache of the server.", "",
            "| load | hit rate | p50 ms | p95 ms | infer/s |", "|---|---|---|---|---|", *rows,
            "", f"Hit vs miss p50: {misses.p50_ms / max(hits.p50_ms, 1e-6):.1f}x faster on a hit."]
