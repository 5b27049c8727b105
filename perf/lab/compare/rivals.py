"""What `python -m perf compare` puts beside each endpoint: its alternatives, the step a single-model tuner
searches, extra report sections. The endpoint itself (payloads, the in-process pipeline, the floor) is the
product's registry (hotpath.sweeps.registry); a new endpoint is one more entry there and one here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hotpath.errors import HotpathError
from perf.lab.compare.alternatives import launch


@dataclass(frozen=True)
class Rivals:
    searched_step: str                             # the step Model Analyzer gets (it cannot search ensembles)
    alternatives: tuple[launch.Alternative, ...]
    extra_sections: Callable | None = field(default=None, repr=False)  # (url, endpoint, log) -> report lines


def _cache_sections(url: str, endpoint: str, log) -> list[str]:
    from hotpath.sweeps.measure.response_cache import measure_cache

    return measure_cache(url, endpoint, log=log)


def _alternatives(what: str) -> tuple[launch.Alternative, ...]:
    """Triton's default config, FastAPI (sync and async handlers), PyTriton, Model Analyzer's pick."""
    return (launch.triton_default(), launch.fastapi("sync", 1, what), launch.fastapi("async", 2, what),
            launch.pytriton(), launch.model_analyzer())


_TEXT = "tokenizer + ORT per request"
RIVALS: dict[str, Rivals] = {
    # One step (tokenizer + encoder in one Python model): Model Analyzer searches that step.
    "text_embedding": Rivals("sentence_embedder", _alternatives(_TEXT), extra_sections=_cache_sections),
    # The two-model variant (Python tokenizer -> encoder on a native backend), the same alternatives.
    "text_embedding_exact": Rivals("text_encoder", _alternatives(_TEXT)),
    "image_classification": Rivals("image_classifier",
                                   _alternatives("Pillow decode + hotpath's preprocess + ORT per request")),
    # One Python model (embedding + faiss search); the two-hop and pgvector comparison is its own run
    # (python -m perf study retrieval_compare, perf/reports/retrieval.md).
    "retrieval": Rivals("retrieval", _alternatives("tokenizer + ORT + faiss search per request")),
}


def rivals_for(endpoint: str) -> Rivals:
    try:
        return RIVALS[endpoint]
    except KeyError:
        raise HotpathError(f"endpoint '{endpoint}' has no alternatives (perf/lab/compare/rivals.py; known: "
                           f"{', '.join(RIVALS)})") from None
