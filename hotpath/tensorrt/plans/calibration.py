"""Real inputs for parity checks and INT8 calibration: the model's perf payload, batched by shape for
parity, regrouped at the profile's opt shape for calibration."""

from __future__ import annotations

import json

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import triton_to_np_dtype

from hotpath.specs.spec import ModelSpec


def payload_feeds(spec: ModelSpec) -> list[dict[str, np.ndarray]]:
    """One feed dict (batch of 1) per entry of the model's perf_analyzer input file."""
    from hotpath.exporters.samples import payload_for

    dtypes = {t.name: triton_to_np_dtype(mc.DataType.Name(t.data_type).removeprefix("TYPE_"))
              for t in spec.config.input}
    feeds = []
    for entry in json.loads(payload_for(spec.name).read_text())["data"]:
        feeds.append({name: np.asarray(entry[name]["content"], dtype=dtypes[name]).reshape(entry[name]["shape"])[None]
                      for name in dtypes})
    return feeds


def batched(feeds: list[dict[str, np.ndarray]], batch_size: int) -> list[dict[str, np.ndarray]]:
    """Concatenate same-shaped feeds into batches of up to `batch_size` (rest kept as smaller batches)."""
    groups: dict[tuple, list[dict]] = {}
    for feed in feeds:
        groups.setdefault(tuple((k, v.shape) for k, v in sorted(feed.items())), []).append(feed)
    out = []
    for members in groups.values():
        for i in range(0, len(members), batch_size):
            chunk = members[i:i + batch_size]
            out.append({k: np.concatenate([m[k] for m in chunk]) for k in chunk[0]})
    return out


def at_shape(feeds: list[dict[str, np.ndarray]], shapes: dict[str, list[int]],
             batched: bool = True) -> list[dict[str, np.ndarray]]:
    """The rows of `feeds` at exactly `shapes` (input name -> shape, batch first when `batched`).

    INT8 calibration runs at the calibration profile's opt shape (polygraphy's Calibrator hands
    TensorRT buffers of that shape), so every batch must have it: each row is cut or zero-padded
    (zeros are what the tokenizer pads with: [PAD], attention mask 0) to the non-batch dims, and
    rows are regrouped into full batches, the last one filled up with rows from the start.
    """
    def fit(row: np.ndarray, dims: list[int]) -> np.ndarray:
        out = np.zeros(dims, dtype=row.dtype)
        region = tuple(slice(0, min(have, want)) for have, want in zip(row.shape, dims))
        out[region] = row[region]
        return out

    names = sorted(shapes)
    if not batched:
        return [{n: fit(feed[n], shapes[n]) for n in names} for feed in feeds]
    rows = [{n: fit(feed[n][i], shapes[n][1:]) for n in names}
            for feed in feeds for i in range(len(feed[names[0]]))]
    size = shapes[names[0]][0]
    if not rows or size < 1:
        return []
    count = -(-len(rows) // size)  # whole batches, the last one completed from the first rows
    picked = [rows[i % len(rows)] for i in range(count * size)]
    return [{n: np.stack([r[n] for r in picked[b * size:(b + 1) * size]]) for n in names} for b in range(count)]


def opt_shapes(profile: dict[str, list[list[int]]]) -> dict[str, list[int]]:
    """input name -> the profile's opt shape."""
    return {name: list(opt) for name, (_, opt, _) in profile.items()}
