"""text_embedding's response cache: a repeated text is answered from the cache, unchanged."""

import uuid

import numpy as np

from hotpath.client import EmbeddingClient
from hotpath.sweeps.measure.server_stats import snapshot


def test_repeated_text_is_a_cache_hit_with_the_same_answer(grpc_url):
    text = f"cache probe {uuid.uuid4()}"
    with EmbeddingClient(grpc_url) as client:
        before = snapshot(grpc_url)["text_embedding"]
        first = client.embed([text])
        middle = snapshot(grpc_url)["text_embedding"]
        second = client.embed([text])
        after = snapshot(grpc_url)["text_embedding"]
    assert middle["cache_miss_count"] == before["cache_miss_count"] + 1
    assert after["cache_hit_count"] == middle["cache_hit_count"] + 1
    np.testing.assert_array_equal(first, second)
