"""What the models feeding a plan can send it: the shortest and longest sequence a tokenizer step emits.

A TensorRT profile refuses shapes outside [min, max] at run time, on GPU hosts only (ONNX Runtime
takes any length), so `[hotpath.tensorrt] sequence_length` is checked at build time against every
ensemble step that feeds the model from a tokenizer: one whose parameters are a tokenizer recipe
(hotpath.runtime.parameters.TokenizerParameters: truncation at `max_length`; `pad_to_multiple_of` 0: no
rounding, so one token is possible). The tuner may rewrite `pad_to_multiple_of` (hotpath.tuning.knobs);
`hotpath build` then re-checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from hotpath import paths
from hotpath.runtime.parameters import TokenizerParameters
from hotpath.specs.spec import ModelSpec, load_specs


@dataclass(frozen=True)
class Feeder:
    """One producer of a model input: the tokenizer spec, the ensemble joining them, the lengths it emits."""

    producer: ModelSpec
    ensemble: str
    input: str
    shortest: int
    longest: int

    def where(self) -> str:
        return (f"{_shown(self.producer)} ([parameters] pad_to_multiple_of = "
                f"{self.producer.parameters.pad_to_multiple_of}, max_length = {self.longest}; "
                f"feeds '{self.input}' in ensemble '{self.ensemble}')")


def _shown(spec: ModelSpec) -> str:
    if spec.source is None:
        return f"spec '{spec.name}'"
    try:
        return str(spec.source.relative_to(paths.ROOT))
    except ValueError:
        return str(spec.source)


def feeders(spec: ModelSpec, specs: list[ModelSpec]) -> list[Feeder]:
    """Every tokenizer-like step whose output an ensemble maps into one of `spec`'s inputs."""
    by_name = {s.name: s for s in specs}
    out = []
    for ensemble in (s for s in specs if s.kind == "ensemble"):
        steps = list(ensemble.config.ensemble_scheduling.step)
        produced = {tensor: step.model_name for step in steps for tensor in step.output_map.values()}
        for step in (s for s in steps if s.model_name == spec.name):
            for model_input, tensor in sorted(step.input_map.items()):
                producer = by_name.get(produced.get(tensor, ""))
                if producer is None or not isinstance(producer.parameters, TokenizerParameters):
                    continue
                params = producer.parameters
                out.append(Feeder(producer, ensemble.name, model_input, shortest=params.pad_to_multiple_of or 1,
                                  longest=params.max_length))
    return out


def check_sequence_length(spec: ModelSpec, sequence_length: list[int] | None,
                          specs: list[ModelSpec] | None = None) -> None:
    """Raise SpecError (naming both spec files) when a feeder can emit a length outside [min, max]."""
    if sequence_length is None:
        return
    if specs is None:
        specs = load_specs(paths.model_specs_dir(), paths.ensemble_specs_dir())
    lo, _, hi = sequence_length
    for feeder in feeders(spec, specs):
        if feeder.shortest < lo:
            raise spec.error("hotpath.tensorrt.sequence_length",
                             f"the plan's profile starts at {lo} tokens, but {feeder.where()} emits sequences "
                             f"as short as {feeder.shortest}: TensorRT would refuse them, on GPU hosts only. "
                             f"Lower the minimum to {feeder.shortest} or less (1 fits every padding setting)")
        if feeder.longest > hi:
            raise spec.error("hotpath.tensorrt.sequence_length",
                             f"the plan's profile ends at {hi} tokens, but {feeder.where()} emits sequences up "
                             f"to {feeder.longest}: raise the maximum to {feeder.longest}")
