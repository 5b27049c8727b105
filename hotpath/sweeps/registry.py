"""The perf registry: one entry per endpoint tells every perf tool what it needs.

Payloads (the endpoint's and each step model's --input-data), the in-process pipeline (the floor,
and what the lab's FastAPI and PyTriton alternatives serve) and the real inputs it runs on. A new
endpoint is one more entry here (and, to compare it with rivals, one in the lab's perf/lab/compare/rivals.py).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from typing import Callable

from hotpath.errors import HotpathError
from hotpath.exporters.samples import PAYLOADS, Payload, jpeg_photo, short_texts
from hotpath.sweeps.measure.floor import Floor, measure_floor
from hotpath.sweeps.measure.pipelines import (
    IMAGE_CLASSIFIER_GRAPH,
    RETRIEVAL_GRAPH,
    SENTENCE_EMBEDDER_GRAPH,
    TEXT_ENCODER_GRAPH,
    ImagePipeline,
    RetrievalPipeline,
    TextPipeline,
    graph_precision,
)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PerfEntry:
    """How perf measures one endpoint; what the endpoint serves (steps, inputs, instances) is read from the
    repository (hotpath.specs.repository.Endpoint)."""

    name: str
    unit: str                                      # what one request carries ("texts", "images")
    payloads: dict[str, Payload]                   # by model: the endpoint and each of its steps
    pipeline: Callable[[int, bool], Callable]      # (ORT threads, spinning) -> the whole endpoint in-process
    samples: Callable[[], list]                    # real inputs for in-process runs
    floor_batches: tuple[int, ...]
    graph: str = ""                                # the ONNX file the endpoint serves (repository-relative)

    def make_pipeline(self, threads: int, spinning: bool) -> Callable:
        """The endpoint in-process, on the very graph file it serves (so the same precision)."""
        return self.pipeline(threads, spinning, graph=self.graph)

    def precision(self) -> str:
        """The served graph's precision, as `make engines` recorded it."""
        return graph_precision(self.graph)

    def measure_floor(self, quick: bool = False, log=logger.info) -> Floor:
        """The in-process floor now; `quick`: batch 1 and the largest batch, short windows (perf-check)."""
        batches = (1, self.floor_batches[-1]) if quick else self.floor_batches
        log(f"[perf] {self.name}: in-process floor ({'quick' if quick else 'full'})")
        return measure_floor(self.make_pipeline, self.samples(), batches, 1.0 if quick else 3.0, unit=self.unit, log=log)


def _payloads(*models: str) -> dict[str, Payload]:
    return {m: PAYLOADS[m] for m in models}


TEXT_EMBEDDING = PerfEntry(
    name="text_embedding", unit="texts", payloads=_payloads("text_embedding", "sentence_embedder"),
    pipeline=TextPipeline, samples=short_texts, floor_batches=(1, 4, 8, 16), graph=SENTENCE_EMBEDDER_GRAPH)

ENDPOINTS: dict[str, PerfEntry] = {e.name: e for e in (
    TEXT_EMBEDDING,
    # The two-model variant (Python tokenizer -> encoder on a native backend: the TensorRT path on GPU hosts).
    dataclasses.replace(
        TEXT_EMBEDDING, name="text_embedding_exact",
        payloads=_payloads("text_embedding_exact", "tokenizer", "text_encoder"), graph=TEXT_ENCODER_GRAPH),
    PerfEntry(
        name="image_classification", unit="images",
        payloads=_payloads("image_classification", "image_preprocess", "image_classifier"),
        pipeline=ImagePipeline, samples=lambda: [jpeg_photo()], floor_batches=(1, 4, 8), graph=IMAGE_CLASSIFIER_GRAPH),
    # One Python model (embedding + faiss search).
    PerfEntry(
        name="retrieval", unit="queries", payloads=_payloads("retrieval"), pipeline=RetrievalPipeline,
        samples=short_texts, floor_batches=(1, 4, 8, 16), graph=RETRIEVAL_GRAPH),
)}


def get_endpoint(name: str) -> PerfEntry:
    try:
        return ENDPOINTS[name]
    except KeyError:
        raise HotpathError(f"endpoint '{name}' is not in the perf registry (hotpath/sweeps/registry.py; known: "
                           f"{', '.join(ENDPOINTS)})") from None
