"""Next-token choice from a row of logits: greedy, or temperature + nucleus (top-p) sampling."""

from __future__ import annotations

import numpy as np

from hotpath.runtime.generation.params import GenerationParams


def make_rng(params: GenerationParams) -> np.random.Generator | None:
    """A per-request generator (seeded when SEED is given); None for greedy requests."""
    return None if params.greedy else np.random.default_rng(params.seed)


def choose(logits: np.ndarray, params: GenerationParams, rng: np.random.Generator | None) -> int:
    if params.greedy or rng is None:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    if params.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cumulative = np.cumsum(probs[order])
        # Keep the smallest prefix whose mass reaches top_p (always at least one token).
        keep = order[:int(np.searchsorted(cumulative, params.top_p)) + 1]
        kept = probs[keep] / probs[keep].sum()
        return int(keep[rng.choice(len(keep), p=kept)])
    return int(rng.choice(len(probs), p=probs))
