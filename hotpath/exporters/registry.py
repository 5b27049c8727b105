"""The exporter registry: a spec's `[hotpath] exporter` name -> the class that builds it."""

from __future__ import annotations

from hotpath.exporters.base import Exporter
from hotpath.exporters.image_classifier import ImageClassifierExporter
from hotpath.exporters.retrieval_index import RetrievalIndexExporter
from hotpath.exporters.sentence_embedder import SentenceEmbedderExporter
from hotpath.exporters.sentence_encoder import SentenceEncoderExporter
from hotpath.exporters.smollm2 import SmolLM2Exporter

EXPORTERS: dict[str, type[Exporter]] = {
    SentenceEncoderExporter.name: SentenceEncoderExporter,
    SentenceEmbedderExporter.name: SentenceEmbedderExporter,
    ImageClassifierExporter.name: ImageClassifierExporter,
    SmolLM2Exporter.name: SmolLM2Exporter,
    RetrievalIndexExporter.name: RetrievalIndexExporter,
}


def get_exporter(name: str) -> Exporter:
    """Instantiate the exporter registered under `name`."""
    try:
        return EXPORTERS[name]()
    except KeyError:
        raise KeyError(f"unknown exporter '{name}' (known: {', '.join(sorted(EXPORTERS))})") from None

