"""The example request `make serve` shows once the server is up."""

from __future__ import annotations

import numpy as np

from hotpath.client import EmbeddingClient

EXAMPLE_TEXTS = ["How do I reset my password?", "I forgot my login credentials.", "Best pizza in Naples"]


def show_example(url: str) -> None:
    """Send one real request to text_embedding and print the request, the answer and how to repeat it."""
    with EmbeddingClient(url) as client:
        vectors = client.embed(EXAMPLE_TEXTS)
    print(f"\n[demo] gRPC request to text_embedding at {url}: TEXT = {EXAMPLE_TEXTS}")
    print(f"[demo] EMBEDDING shape {list(vectors.shape)}, L2 norms {np.round(np.linalg.norm(vectors, axis=1), 4)}")
    print(f"[demo] first values of EMBEDDING[0]: {np.round(vectors[0, :6], 4)}")
    sims = vectors @ vectors.T
    for text, row in zip(EXAMPLE_TEXTS, sims):
        print(f"[demo]   cos({text[:32]!r:>34}, ...) = {np.round(row, 3)}")
    print(f"[demo] try it: .venv/bin/hotpath embed --url {url} --similarity \"first text\" \"second text\"\n",
          flush=True)
