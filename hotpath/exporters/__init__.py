"""Exporters turn source weights into the files a model version directory holds.

Each exporter names the files and code its output depends on, so `hotpath engines` can skip work
when none of them changed (see hotpath.fingerprint).
"""

from __future__ import annotations

from hotpath.exporters.base import Exporter, ExportReport
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


__all__ = ["EXPORTERS", "Exporter", "ExportReport", "get_exporter"]
