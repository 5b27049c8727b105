"""The tuning knobs: one object per knob, reading and applying it on a ModelConfig and writing it into a spec.

Every place that touches a knob (the tuner's search, the config reload on a live server, the
write-back into build/<model>.toml, Model Analyzer's settings) goes through these objects, so a
new knob is one class and one entry in KNOBS.
"""

from __future__ import annotations

from typing import Any

from tritonclient.grpc import model_config_pb2 as mc


class Knob:
    """One tunable setting of a step model and its ordered ladder of values (the tuner moves one rung)."""

    name: str
    ladder_values: tuple = ()
    uses_threads = False   # changing it changes how many CPU threads the step keeps busy

    def applies(self, config: mc.ModelConfig) -> bool:
        raise NotImplementedError

    def ladder(self, config: mc.ModelConfig) -> tuple:
        return self.ladder_values

    def read(self, config: mc.ModelConfig) -> Any:
        raise NotImplementedError

    def apply(self, config: mc.ModelConfig, value: Any) -> None:
        """Set `value` on `config` in place."""
        raise NotImplementedError

    def write(self, doc, value: Any) -> str | None:
        """Set `value` in a tomlkit spec document; returns 'field: old -> new', or None when unchanged."""
        raise NotImplementedError

    def neighbors(self, current: Any, ladder: tuple) -> list:
        """The rungs just below and above `current` (the closest rung when it is off the ladder)."""
        if current not in ladder:
            return [min(ladder, key=lambda v: _distance(v, current))] if ladder else []
        i = ladder.index(current)
        return [ladder[j] for j in (i - 1, i + 1) if 0 <= j < len(ladder)]


def _distance(a: Any, b: Any) -> float:
    if isinstance(a, tuple) or isinstance(b, tuple):
        return abs(sum(a or (0,)) - sum(b or (0,)))
    return abs(a - b)


def _put(table, key: str, value: Any, label: str) -> str | None:
    old = table.get(key)
    old_plain = list(old) if isinstance(old, list) else old
    if old_plain == value:
        return None
    table[key] = value
    return f"{label}: {old_plain} -> {value}"


def _table(doc, key: str):
    import tomlkit  # here: the container applies knobs (hotpath.tuning.tuned_values) without tomlkit

    return doc.setdefault(key, tomlkit.table())


class QueueDelay(Knob):
    name = "max_queue_delay_microseconds"
    ladder_values = (0, 100, 250, 500, 1000, 2000, 4000)

    def applies(self, config):
        return config.max_batch_size > 0

    def read(self, config):
        return int(config.dynamic_batching.max_queue_delay_microseconds)

    def apply(self, config, value):
        config.dynamic_batching.max_queue_delay_microseconds = int(value)

    def write(self, doc, value):
        return _put(_table(doc, "dynamic_batching"), self.name, int(value), f"dynamic_batching.{self.name}")


class PreferredBatchSizes(Knob):
    name = "preferred_batch_size"
    ladder_values = ((), (4,), (8,), (4, 8), (8, 16), (16,))

    def applies(self, config):
        return config.max_batch_size > 0

    def ladder(self, config):
        return tuple(s for s in self.ladder_values if all(v <= config.max_batch_size for v in s))

    def read(self, config):
        preferred = tuple(int(v) for v in config.dynamic_batching.preferred_batch_size)
        # Triton reports an unset preferred size as [max_batch_size]; both mean "no preference".
        return () if preferred == (config.max_batch_size,) else preferred

    def apply(self, config, value):
        del config.dynamic_batching.preferred_batch_size[:]
        config.dynamic_batching.preferred_batch_size.extend(value)

    def write(self, doc, value):
        db = _table(doc, "dynamic_batching")
        if value:
            return _put(db, self.name, [int(v) for v in value], f"dynamic_batching.{self.name}")
        if self.name in db:
            old = list(db[self.name])
            del db[self.name]
            return f"dynamic_batching.{self.name}: {old} -> (none)"
        return None


class InstanceCount(Knob):
    name = "instance_count"
    ladder_values = (1, 2, 3, 4)
    uses_threads = True

    def applies(self, config):
        return True

    def read(self, config):
        return sum(g.count for g in config.instance_group) or 1

    def apply(self, config, value):
        if not config.instance_group:
            config.instance_group.add(kind=mc.ModelInstanceGroup.KIND_CPU)
        config.instance_group[0].count = int(value)
        del config.instance_group[1:]

    def write(self, doc, value):
        if "instance_group" not in doc:
            import tomlkit

            doc["instance_group"] = tomlkit.aot()
            doc["instance_group"].append(tomlkit.table())
        return _put(doc["instance_group"][0], "count", int(value), "instance_group[0].count")


class IntParameter(Knob):
    """An integer in the config's `parameters` map (and the spec's [parameters] table)."""

    def applies(self, config):
        return self.name in config.parameters

    def read(self, config):
        return int(config.parameters[self.name].string_value or 0)

    def apply(self, config, value):
        config.parameters[self.name].string_value = str(int(value))

    def write(self, doc, value):
        return _put(_table(doc, "parameters"), self.name, int(value), f"parameters.{self.name}")


class IntraOpThreads(IntParameter):
    """ORT's intra-op threads per instance (native onnxruntime backend and the local ORT runner)."""

    name = "intra_op_thread_count"
    ladder_values = (1, 2, 3, 4)
    uses_threads = True


class PadToMultiple(IntParameter):
    """The tokenizer's padded length multiple: fewer distinct shapes batch better, longer rows cost compute."""

    name = "pad_to_multiple_of"
    ladder_values = (0, 8, 16, 32)

    def ladder(self, config):
        # The tokenizer refuses a multiple that does not divide its max_length.
        max_length = int(config.parameters["max_length"].string_value or 0) if "max_length" in config.parameters else 0
        return tuple(v for v in self.ladder_values if not v or not max_length or max_length % v == 0)


class OneTextThreads(IntParameter):
    """ORT threads for a run of one text (hotpath.runtime.split_run: `one_text_thread_count`): more cores for a
    request at low load, while batches stay on one thread per part. 0: as intra_op_thread_count."""

    name = "one_text_thread_count"
    ladder_values = (1, 2, 4)

    def ladder(self, config):
        import os

        return tuple(v for v in self.ladder_values if v <= (os.cpu_count() or 1))


class SpinDuration(IntParameter):
    """How long ORT's idle intra-op threads spin before sleeping (`spin_duration_us`, 0: off): no wake-up
    per op inside one run vs CPU taken from the processes beside it (perf/reports/fixed_cost.md)."""

    name = "spin_duration_us"
    ladder_values = (0, 100, 1000)


KNOBS: tuple[Knob, ...] = (QueueDelay(), PreferredBatchSizes(), InstanceCount(), IntraOpThreads(), PadToMultiple(),
                           OneTextThreads(), SpinDuration())
BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


def knob(name: str) -> Knob:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown knob {name} (known: {', '.join(BY_NAME)})") from None


def knobs_for(config: mc.ModelConfig) -> list[Knob]:
    """The knobs that apply to one model: batching only when it batches, ORT threads for ONNX models."""
    return [k for k in KNOBS if k.applies(config)]


def read_knobs(config: mc.ModelConfig) -> dict[str, Any]:
    """Current knob values of a config."""
    return {k.name: k.read(config) for k in knobs_for(config)}


def apply_knobs(config: mc.ModelConfig, values: dict[str, Any]) -> mc.ModelConfig:
    """A copy of `config` with knob values applied."""
    out = mc.ModelConfig()
    out.CopyFrom(config)
    for name, value in values.items():
        knob(name).apply(out, value)
    return out


def write_knobs(doc, values: dict[str, Any]) -> list[str]:
    """Set knob values in a tomlkit spec document; returns the changes made."""
    return [c for c in (knob(n).write(doc, v) for n, v in values.items()) if c]
