"""The config.pbtxt writer: spec -> validated `ModelConfig` -> config.pbtxt (protobuf text_format), parsed back
by hotpath.specs.repository.

Protobuf catches schema errors (unknown fields, bad enums); this module checks what the schema
cannot: value ranges, consistency between batching, warmup and tensors, and ensemble wiring.
"""

from __future__ import annotations

from typing import Iterable

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.errors import SpecError
from hotpath.specs.repository import parse_pbtxt
from hotpath.specs.spec import ModelSpec

_DTYPE_NAMES = set(mc.DataType.keys()) - {"TYPE_INVALID"}


def _dtype(value: int) -> str:
    return mc.DataType.Name(value)


def _check_tensors(spec: ModelSpec, field: str, tensors: Iterable) -> None:
    seen = set()
    tensors = list(tensors)
    if not tensors:
        raise spec.error(field, "at least one tensor is required")
    for i, t in enumerate(tensors):
        where = f"{field}[{i}]"
        if not t.name:
            raise spec.error(f"{where}.name", "is empty")
        if t.name in seen:
            raise spec.error(f"{where}.name", f"duplicate tensor name '{t.name}'")
        seen.add(t.name)
        if t.data_type == mc.TYPE_INVALID:
            raise spec.error(f"{where}.data_type", f"missing; one of {', '.join(sorted(_DTYPE_NAMES))}")
        if not t.dims and not t.HasField("reshape"):
            raise spec.error(f"{where}.dims", "missing (use [1] for one value per batch item)")
        for d in t.dims:
            if d != -1 and d < 1:
                raise spec.error(f"{where}.dims", f"dimension {d} must be -1 (variable) or >= 1")


def _check_batching(spec: ModelSpec) -> None:
    cfg = spec.config
    if cfg.max_batch_size < 0:
        raise spec.error("max_batch_size", "must be >= 0 (0 disables batching)")
    if cfg.HasField("dynamic_batching"):
        db = cfg.dynamic_batching
        if cfg.max_batch_size == 0:
            raise spec.error("dynamic_batching", "needs max_batch_size > 0")
        for size in db.preferred_batch_size:
            if not 1 <= size <= cfg.max_batch_size:
                raise spec.error("dynamic_batching.preferred_batch_size",
                                 f"{size} is outside 1..max_batch_size ({cfg.max_batch_size})")
        if list(db.preferred_batch_size) != sorted(set(db.preferred_batch_size)):
            raise spec.error("dynamic_batching.preferred_batch_size", "must be strictly increasing")
    for i, group in enumerate(cfg.instance_group):
        if group.count < 1:
            raise spec.error(f"instance_group[{i}].count", "must be >= 1")


def _check_warmup(spec: ModelSpec) -> None:
    cfg = spec.config
    inputs = {t.name: t for t in cfg.input}
    for i, warm in enumerate(cfg.model_warmup):
        where = f"model_warmup[{i}]"
        if not warm.name:
            raise spec.error(f"{where}.name", "is empty")
        if cfg.max_batch_size and not 1 <= warm.batch_size <= cfg.max_batch_size:
            raise spec.error(f"{where}.batch_size", f"must be within 1..{cfg.max_batch_size}")
        missing = {n for n, t in inputs.items() if not t.optional} - set(warm.inputs)   # optional: may be left out
        if missing:
            raise spec.error(f"{where}.inputs", f"no sample for input(s) {', '.join(sorted(missing))}")
        for name, sample in warm.inputs.items():
            if name not in inputs:
                raise spec.error(f"{where}.inputs.{name}", "is not an input of the model")
            decl = inputs[name]
            if sample.data_type != decl.data_type:
                raise spec.error(f"{where}.inputs.{name}.data_type",
                                 f"{_dtype(sample.data_type)} != declared {_dtype(decl.data_type)}")
            if len(sample.dims) != len(decl.dims) or any(
                    d != s for d, s in zip(decl.dims, sample.dims) if d != -1):
                raise spec.error(f"{where}.inputs.{name}.dims",
                                 f"{list(sample.dims)} does not fit declared {list(decl.dims)}")
            if any(s < 1 for s in sample.dims):
                raise spec.error(f"{where}.inputs.{name}.dims", "warmup dims must be concrete (>= 1)")
            if sample.WhichOneof("input_data_type") is None:
                raise spec.error(f"{where}.inputs.{name}",
                                 "needs one of zero_data, random_data or input_data_file")
            files = spec.hotpath.warmup_files
            if sample.WhichOneof("input_data_type") == "input_data_file" and sample.input_data_file not in files:
                raise spec.error(f"{where}.inputs.{name}.input_data_file",
                                 f"{sample.input_data_file!r} is not in hotpath.warmup_files "
                                 f"({', '.join(sorted(files)) or 'none declared'})")


def validate(spec: ModelSpec) -> None:
    """Check one model's config; raises SpecError naming the field at fault."""
    cfg = spec.config
    if bool(cfg.backend) == bool(cfg.platform):
        raise spec.error("backend", "set exactly one of 'backend' or 'platform'")
    if spec.kind == "ensemble" and cfg.platform != "ensemble":
        raise spec.error("platform", "an ensemble spec needs platform = \"ensemble\"")
    if spec.kind == "python" and cfg.backend != "python":
        raise spec.error("backend", "a python-kind spec needs backend = \"python\"")
    _check_tensors(spec, "input", cfg.input)
    _check_tensors(spec, "output", cfg.output)
    _check_batching(spec)
    _check_warmup(spec)
    if spec.kind == "ensemble" and not cfg.ensemble_scheduling.step:
        raise spec.error("ensemble_scheduling.step", "an ensemble needs at least one step")
    if spec.kind == "onnx" and any(t.data_type == mc.TYPE_STRING for t in cfg.input):
        # Triton's native onnxruntime backend validates nothing per request and runs a dynamic batch as
        # one call: one bad or huge text would fail or stall every request batched with it.
        raise spec.error("input", "an ONNX model may not take TYPE_STRING inputs: text is decoded, bounded and "
                         "validated per request in a Python step in front of it (python_backends/)")
    if cfg.response_cache.enable and spec.kind != "ensemble":
        # Triton core (2.51 and still on main) inserts every response of a dynamically batched model into
        # the cache, errors included (DynamicBatchScheduler::DelegateResponse), and replays a cached error
        # as a success with no outputs; the ensemble scheduler caches successes only.
        raise spec.error("response_cache.enable", "only an ensemble may enable the response cache: tritonserver "
                         "caches a single model's error responses and replays them as empty successes; "
                         "put the model behind an ensemble and enable the cache there")


def _same_shape(a: Iterable[int], b: Iterable[int]) -> bool:
    a, b = list(a), list(b)
    return len(a) == len(b) and all(x == y or -1 in (x, y) for x, y in zip(a, b))


def validate_ensemble(spec: ModelSpec, models: dict[str, mc.ModelConfig]) -> None:
    """Check an ensemble's wiring: steps exist, tensors exist and agree in type and shape."""
    cfg = spec.config
    # tensor name in the ensemble's namespace -> (data_type, dims without batch), producer
    available: dict[str, tuple[int, list[int], str]] = {
        t.name: (t.data_type, list(t.dims), "ensemble input") for t in cfg.input}
    for i, step in enumerate(cfg.ensemble_scheduling.step):
        where = f"ensemble_scheduling.step[{i}]"
        target = models.get(step.model_name)
        if target is None:
            raise spec.error(f"{where}.model_name", f"no model named '{step.model_name}' in the repository")
        if cfg.max_batch_size > target.max_batch_size:
            raise spec.error(f"{where}.model_name",
                             f"ensemble max_batch_size {cfg.max_batch_size} exceeds "
                             f"'{step.model_name}' max_batch_size {target.max_batch_size}")
        t_inputs = {t.name: t for t in target.input}
        t_outputs = {t.name: t for t in target.output}
        unmapped = {n for n, t in t_inputs.items() if not t.optional} - set(step.input_map)
        if unmapped:
            raise spec.error(f"{where}.input_map", f"'{step.model_name}' input(s) not fed: {sorted(unmapped)}")
        for model_in, ens_name in step.input_map.items():
            if model_in not in t_inputs:
                raise spec.error(f"{where}.input_map.{model_in}", f"'{step.model_name}' has no input '{model_in}'")
            if ens_name not in available:
                raise spec.error(f"{where}.input_map.{model_in}",
                                 f"tensor '{ens_name}' is not produced before this step")
            dtype, dims, producer = available[ens_name]
            want = t_inputs[model_in]
            if dtype != want.data_type:
                raise spec.error(f"{where}.input_map.{model_in}",
                                 f"'{ens_name}' from {producer} is {_dtype(dtype)}, "
                                 f"'{step.model_name}.{model_in}' wants {_dtype(want.data_type)}")
            if not _same_shape(dims, want.dims):
                raise spec.error(f"{where}.input_map.{model_in}",
                                 f"'{ens_name}' from {producer} has dims {dims}, "
                                 f"'{step.model_name}.{model_in}' wants {list(want.dims)}")
        for model_out, ens_name in step.output_map.items():
            if model_out not in t_outputs:
                raise spec.error(f"{where}.output_map.{model_out}",
                                 f"'{step.model_name}' has no output '{model_out}'")
            out = t_outputs[model_out]
            available[ens_name] = (out.data_type, list(out.dims), f"step '{step.model_name}'")
    for i, t in enumerate(cfg.output):
        if t.name not in available:
            raise spec.error(f"output[{i}]", f"no step produces '{t.name}'")
        dtype, dims, producer = available[t.name]
        if dtype != t.data_type or not _same_shape(dims, t.dims):
            raise spec.error(f"output[{i}]", f"'{t.name}' from {producer} is {_dtype(dtype)} {dims}, "
                                             f"declared {_dtype(t.data_type)} {list(t.dims)}")


def validate_all(specs: list[ModelSpec]) -> None:
    """Validate every spec, then every ensemble against the models beside it."""
    for spec in specs:
        validate(spec)
    models = {s.name: s.config for s in specs}
    for spec in specs:
        if spec.kind == "ensemble":
            validate_ensemble(spec, models)


def to_pbtxt(config: mc.ModelConfig) -> str:
    """Serialize with protobuf text_format, then parse back and compare (fails loudly on drift)."""
    text = text_format.MessageToString(config)
    if parse_pbtxt(text) != config:
        raise SpecError(config.name, "<config>", "config.pbtxt does not parse back to the same message")
    return text


# Still the old spelling of `hotpath build` (which accepts it): every committed config.pbtxt carries this line.
HEADER = "# Generated by `hotpath build` from {source}; edit the spec, not this file.\n"


def render(spec: ModelSpec) -> str:
    """config.pbtxt text for a spec, with a header naming its source spec."""
    source = spec.source.relative_to(spec.source.parent.parent) if spec.source else "<memory>"
    return HEADER.format(source=source) + to_pbtxt(spec.config)
