"""Optimization profiles from a spec: batch min 1 / opt = largest preferred batch size / max = max_batch_size;
variable dimensions (sequence length) min / opt / max from `[hotpath.tensorrt] sequence_length`."""

from __future__ import annotations

from hotpath.specs.spec import ModelSpec


def batch_range(spec: ModelSpec) -> tuple[int, int, int] | None:
    """(min, opt, max) batch size, or None when the model does not batch (max_batch_size 0)."""
    cfg = spec.config
    if cfg.max_batch_size <= 0:
        return None
    preferred = list(cfg.dynamic_batching.preferred_batch_size) if cfg.HasField("dynamic_batching") else []
    return 1, max(preferred) if preferred else cfg.max_batch_size, cfg.max_batch_size


def derive_profiles(spec: ModelSpec, sequence_length: list[int] | None) -> dict[str, list[list[int]]]:
    """input name -> [min shape, opt shape, max shape], batch dimension first when the model batches."""
    batch = batch_range(spec)
    profile = {}
    for tensor in spec.config.input:
        dims = list(tensor.dims)
        if -1 in dims and sequence_length is None:
            raise spec.error("hotpath.tensorrt.sequence_length",
                             f"input '{tensor.name}' has variable dims {dims}; give [min, opt, max]")
        shapes = []
        for k in range(3):
            shape = [sequence_length[k] if d == -1 else d for d in dims]
            shapes.append(([batch[k]] if batch else []) + shape)
        profile[tensor.name] = shapes
    return profile
