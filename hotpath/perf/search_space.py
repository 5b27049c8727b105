"""The knobs the tuner turns, per model, and how a knob value maps onto a ModelConfig."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tritonclient.grpc import model_config_pb2 as mc

# Ordered value ladders: the tuner moves one rung at a time.
QUEUE_DELAYS_US = (0, 250, 500, 1000, 2000, 4000, 8000)
PREFERRED_SIZES = ((), (4,), (8,), (4, 8), (8, 16), (16,))
INSTANCE_COUNTS = (1, 2, 3)
ORT_THREADS = (1, 2, 4)


@dataclass(frozen=True)
class Knob:
    name: str
    values: tuple

    def neighbors(self, current: Any) -> list[Any]:
        """The values one rung below and above `current` (or the closest rung if off-ladder)."""
        if current not in self.values:
            return [min(self.values, key=lambda v: _distance(v, current))]
        i = self.values.index(current)
        return [self.values[j] for j in (i - 1, i + 1) if 0 <= j < len(self.values)]


def _distance(a: Any, b: Any) -> float:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return abs(sum(a or (0,)) - sum(b or (0,)))
    return abs(a - b)


def knobs_for(config: mc.ModelConfig, min_batch: int) -> list[Knob]:
    """The knobs that apply to one model: batching only when it batches, ORT threads for ONNX models."""
    knobs = []
    if config.max_batch_size > 0:
        knobs.append(Knob("max_queue_delay_microseconds", QUEUE_DELAYS_US))
        sizes = tuple(s for s in PREFERRED_SIZES if all(v <= config.max_batch_size for v in s))
        knobs.append(Knob("preferred_batch_size", sizes))
    knobs.append(Knob("instance_count", INSTANCE_COUNTS))
    if "intra_op_thread_count" in config.parameters:
        knobs.append(Knob("intra_op_thread_count", ORT_THREADS))
    return knobs


def read_knobs(config: mc.ModelConfig) -> dict[str, Any]:
    """Current knob values of a config."""
    values: dict[str, Any] = {"instance_count": sum(g.count for g in config.instance_group) or 1}
    if config.max_batch_size > 0:
        db = config.dynamic_batching
        values["max_queue_delay_microseconds"] = int(db.max_queue_delay_microseconds)
        preferred = tuple(db.preferred_batch_size)
        # Triton reports an unset preferred size as [max_batch_size]; both mean "no preference".
        values["preferred_batch_size"] = () if preferred == (config.max_batch_size,) else preferred
    if "intra_op_thread_count" in config.parameters:
        values["intra_op_thread_count"] = int(config.parameters["intra_op_thread_count"].string_value or 0)
    return values


def apply_knobs(config: mc.ModelConfig, values: dict[str, Any]) -> mc.ModelConfig:
    """A copy of `config` with knob values applied."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    for name, value in values.items():
        if name == "max_queue_delay_microseconds":
            out.dynamic_batching.max_queue_delay_microseconds = int(value)
        elif name == "preferred_batch_size":
            del out.dynamic_batching.preferred_batch_size[:]
            out.dynamic_batching.preferred_batch_size.extend(value)
        elif name == "instance_count":
            if not out.instance_group:
                out.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
            out.instance_group[0].count = int(value)
            del out.instance_group[1:]
        elif name == "intra_op_thread_count":
            out.parameters["intra_op_thread_count"].string_value = str(value)
        else:
            raise KeyError(f"unknown knob {name}")
    return out
