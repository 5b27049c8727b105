"""The embedding parity check's inputs: a sample of the parity corpus, embedded as the served model does.

Shared by the text encoder's INT8 gate and the sentence embedder's build-time parity check.
"""

from __future__ import annotations

import numpy as np

from hotpath.exporters.parity_corpus import EDGE_CASES
from hotpath.runtime.text import encode

EMBEDDING_SAMPLE = 600      # corpus texts embedded by both pipelines at build time (every edge case included)
BATCH = 16                  # served batches: padded to their longest text, as one execute() does


def embedding_sample(corpus: list[str], size: int = EMBEDDING_SAMPLE) -> list[str]:
    """Every edge case plus an even spread over the rest of the corpus."""
    rest = corpus[len(EDGE_CASES):]
    step = max(1, len(rest) // max(1, size - len(EDGE_CASES)))
    return EDGE_CASES + rest[::step][: size - len(EDGE_CASES)]


def served_embeddings(tokenizer, session, texts: list[str], batch: int = BATCH) -> np.ndarray:
    """Embeddings as the served model computes them: one tokenizer call and one run per batch."""
    out = []
    for i in range(0, len(texts), batch):
        feeds = encode(tokenizer, texts[i:i + batch])
        out.append(session.run(None, {x.name: feeds[x.name] for x in session.get_inputs()})[0])
    return np.concatenate(out)
