"""Declarative model specs: one TOML file per model (build/) or pipeline (ensembles/).

A spec's top-level keys are Triton `ModelConfig` fields, spelled as in model_config.proto
(`max_batch_size`, `[[input]]`, `[dynamic_batching]`, `[[model_warmup]]`, ...). They are parsed
into a `model_config_pb2.ModelConfig` message by protobuf itself, so a misspelt field or a bad enum
value is caught by the schema, not by hand-written checks. hotpath's own build settings live in
the `[hotpath]` table, which never reaches Triton.

Both tables hotpath reads are parsed here, once, into typed objects with one default per key: `[hotpath]`
into `ModelSpec.hotpath` (hotpath.specs.build_options.BuildOptions) and `[parameters]` into `ModelSpec.parameters`,
the class the served model itself reads them with (hotpath.runtime.parameters, per Python backend; the
engine settings for text_generation). A bad value or an unknown key is a SpecError naming the spec file
and the key; consumers read the objects, never the tables.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

try:
    import tomllib
except ImportError:  # Python 3.10 (the NGC Triton container's interpreter)
    import tomli as tomllib
from google.protobuf import json_format
from tritonclient.grpc import model_config_pb2 as mc

from hotpath.errors import SpecError
from hotpath.specs.build_options import BuildOptions, build_options

KINDS = ("onnx", "python", "ensemble")


@dataclass
class ModelSpec:
    """One model: its Triton config (a protobuf message), its [hotpath] build options and its [parameters]
    as the served model reads them (None: an ensemble, or a backend hotpath has no class for)."""

    name: str
    kind: str
    config: mc.ModelConfig
    hotpath: BuildOptions
    parameters: Any = None
    source: Path | None = None
    raw: dict[str, Any] = field(default_factory=dict)

    def error(self, field_name: str, message: str) -> SpecError:
        return SpecError(self.name, field_name, message, str(self.source) if self.source else None)

    @property
    def hotpath_table(self) -> dict[str, Any]:
        """The [hotpath] table as written (with its kind): what the export fingerprint hashes."""
        return {**self.raw.get("hotpath", {}), "kind": self.kind}


def parameter_class(kind: str, python_backend: str):
    """The class a model of this kind and Python backend reads its parameters with (None: not hotpath's)."""
    from hotpath.runtime import parameters as p
    from hotpath.runtime.images import PreprocessOptions

    if kind == "onnx":
        return p.RunnerParameters   # the local stand-in of the onnxruntime backend reads the same names
    return {"tokenizer": p.TokenizerParameters, "sentence_embedder": p.EmbedderParameters,
            "retrieval": p.RetrievalParameters, "image_preprocess": PreprocessOptions}.get(python_backend)


def _typed_parameters(spec: ModelSpec) -> Any:
    strings = {k: v.string_value for k, v in spec.config.parameters.items()}
    if spec.hotpath.python_backend == "text_generation":
        from hotpath.runtime.llm.settings import ParameterError, from_parameters

        try:
            return from_parameters(strings)
        except ParameterError as exc:
            key = str(exc).removeprefix("parameters.").partition(":")[0]
            raise spec.error(f"parameters.{key}", str(exc).partition(": ")[2]) from None
    cls = parameter_class(spec.kind, spec.hotpath.python_backend)
    if cls is None:
        return None
    from hotpath.runtime.parameters import ParameterError

    try:
        return cls.parse(strings)
    except ParameterError as exc:
        raise spec.error(f"parameters.{exc.key}", str(exc).partition(": ")[2]) from None


def _parameters_to_proto(params: Any, model: str, source: str | None) -> dict[str, Any]:
    # Triton parameters are map<string, {string_value}>; specs may write plain scalars.
    if not isinstance(params, dict):
        raise SpecError(model, "parameters", "must be a table of key = value", source)
    out = {}
    for key, value in params.items():
        if isinstance(value, dict):
            out[key] = value
        elif isinstance(value, bool):
            out[key] = {"string_value": "true" if value else "false"}
        elif isinstance(value, (str, int, float)):
            out[key] = {"string_value": str(value)}
        else:
            raise SpecError(model, f"parameters.{key}", f"unsupported value {value!r}", source)
    return out


def _field_from_parse_error(text: str) -> str:
    # protobuf says e.g. '... has no field named "x" at "ModelConfig".' or
    # '... Invalid enum value X for enum type inference.DataType at ModelConfig.input[0].data_type.'
    first = text.splitlines()[0]
    at = re.search(r'at "?([\w.\[\]]+?)"?\.*$', first)
    path = at.group(1).removeprefix("ModelConfig").strip(".") if at else ""
    named = re.search(r'has no field named "([^"]+)"', first)
    if named:
        return f"{path}.{named.group(1)}" if path else named.group(1)
    return path or "?"


def spec_from_dict(data: dict[str, Any], name: str, source: Path | None = None) -> ModelSpec:
    """Build a ModelSpec from a parsed spec table; raises SpecError naming the field at fault."""
    src = str(source) if source else None
    data = copy.deepcopy(data)
    raw = copy.deepcopy(data)
    hp = data.pop("hotpath", {})
    if not isinstance(hp, dict):
        raise SpecError(name, "hotpath", "must be a table", src)
    declared = data.setdefault("name", name)
    if declared != name:
        raise SpecError(name, "name", f"'{declared}' differs from the spec's file name '{name}'", src)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", name):
        raise SpecError(name, "name", "use letters, digits, '_', '-', '.' only", src)

    kind = hp.get("kind") or ("ensemble" if data.get("platform") == "ensemble" else None)
    if kind not in KINDS:
        raise SpecError(name, "hotpath.kind", f"must be one of {', '.join(KINDS)}, got {kind!r}", src)
    options = build_options(hp, kind, lambda key, message: SpecError(name, key, message, src))
    if kind == "python" and not options.python_backend:
        options = dataclasses.replace(options, python_backend=name)
    if "parameters" in data:
        data["parameters"] = _parameters_to_proto(data["parameters"], name, src)

    config = mc.ModelConfig()
    try:
        json_format.ParseDict(data, config)
    except json_format.ParseError as exc:
        message = str(exc).splitlines()[0]
        raise SpecError(name, _field_from_parse_error(str(exc)), message, src) from None
    spec = ModelSpec(name=name, kind=kind, config=config, hotpath=options, source=source, raw=raw)
    if kind != "ensemble":
        spec.parameters = _typed_parameters(spec)
    return spec


def load_spec(path: Path) -> ModelSpec:
    """Load one TOML spec file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(path.stem, "<toml>", f"not valid TOML: {exc}", str(path)) from None
    return spec_from_dict(data, path.stem, path)


def load_specs(*dirs: Path) -> list[ModelSpec]:
    """Load every `*.toml` spec in the given folders, sorted by name; names must be unique."""
    specs: dict[str, ModelSpec] = {}
    for d in dirs:
        for path in sorted(Path(d).glob("*.toml")):
            spec = load_spec(path)
            if spec.name in specs:
                raise spec.error("name", f"also defined in {specs[spec.name].source}")
            specs[spec.name] = spec
    return [specs[k] for k in sorted(specs)]
