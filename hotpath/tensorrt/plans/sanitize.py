"""Constant folding before TensorRT (what `polygraphy surgeon sanitize --fold-constants` does).

The folded model is what plans are built from (`model.trt.onnx` beside `model.onnx`); its metadata
records the source's sha256, so an unchanged export is not folded again.
"""

from __future__ import annotations

from pathlib import Path

from hotpath.tensorrt.manifest import sha256

SOURCE_KEY = "hotpath.source_sha256"


def source_digest(folded: Path) -> str:
    """The sha256 of the model `folded` was made from ('' when unknown)."""
    import onnx

    if not folded.is_file():
        return ""
    model = onnx.load(str(folded), load_external_data=False)
    return next((p.value for p in model.metadata_props if p.key == SOURCE_KEY), "")


def sanitize(source: Path, folded: Path) -> dict:
    """Fold constants of `source` into `folded`; returns node counts before and after."""
    import onnx
    from polygraphy.backend.onnx import FoldConstants, OnnxFromPath
    from polygraphy.logger import G_LOGGER

    before = len(onnx.load(str(source), load_external_data=False).graph.node)
    with G_LOGGER.verbosity(G_LOGGER.ERROR):
        model = FoldConstants(OnnxFromPath(str(source)), fold_shapes=True)()
    entry = model.metadata_props.add()
    entry.key, entry.value = SOURCE_KEY, sha256(source)
    onnx.checker.check_model(model)
    onnx.save(model, str(folded))
    return {"nodes_before": before, "nodes_after": len(model.graph.node)}


def ensure_sanitized(source: Path, folded: Path) -> dict | None:
    """Fold when `folded` is missing or was made from another `source`; None when it was fresh."""
    if source_digest(folded) == sha256(source):
        return None
    return sanitize(source, folded)
