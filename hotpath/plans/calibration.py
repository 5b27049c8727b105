"""Real inputs for parity checks and INT8 calibration: the model's perf payload, batched by shape."""

from __future__ import annotations

import json

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc
from tritonclient.utils import triton_to_np_dtype

from hotpath.spec import ModelSpec


def payload_feeds(spec: ModelSpec) -> list[dict[str, np.ndarray]]:
    """One feed dict (batch of 1) per entry of the model's perf_analyzer input file."""
    from hotpath.perf.payloads import payload_for

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
