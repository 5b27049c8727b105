"""The exporter registry: a spec's `[hotpath] exporter` name -> the class that builds it.

An exporter is named for the model it builds (build/<model>.toml says `exporter = "<model>"`).
"""

from __future__ import annotations

from hotpath.exporters.base import Exporter
from hotpath.exporters.image_classifier import ImageClassifierExporter
from hotpath.exporters.retrieval_index import RetrievalIndexExporter
from hotpath.exporters.sentence_embedder import SentenceEmbedderExporter
from hotpath.exporters.sentence_encoder import TextEncoderExporter
from hotpath.exporters.smollm2 import TextGenerationExporter

EXPORTERS: dict[str, type[Exporter]] = {
    TextEncoderExporter.name: TextEncoderExporter,
    SentenceEmbedderExporter.name: SentenceEmbedderExporter,
    ImageClassifierExporter.name: ImageClassifierExporter,
    TextGenerationExporter.name: TextGenerationExporter,
    RetrievalIndexExporter.name: RetrievalIndexExporter,
}

def get_exporter(name: str) -> Exporter:
    """Instantiate the exporter registered under `name`; KeyError (its message for the spec error) if none is."""
    try:
        return EXPORTERS[name]()
    except KeyError:
        raise KeyError(f"unknown exporter '{name}' (known: {', '.join(sorted(EXPORTERS))})") from None
