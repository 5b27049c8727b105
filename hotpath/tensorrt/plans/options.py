"""A spec's `[hotpath.tensorrt]` table, checked, and the Recipe it yields.

    [hotpath.tensorrt]
    precision = "fp16"                 # fp16 (default) | fp32 | int8 (calibrated on the perf payloads)
    compute_capabilities = ["8.0", "8.6", "8.9", "9.0"]   # one plan each, mapped by cc_model_filenames
    sequence_length = [1, 32, 256]     # min / opt / max of every variable (-1) dimension; checked against
                                       # the tokenizer steps feeding the model (hotpath.tensorrt.plans.feeders)
    hardware_compatible = false        # AMPERE_PLUS: one plan for every GPU of cc >= 8.0
    version_compatible = false         # runs with later TensorRT versions (lean runtime in the plan)
    cuda_graphs = true                 # CUDA graphs for the preferred batch sizes at opt length, each
                                       # serving the batch sizes down to the next smaller graph's
    onnx_fallback = true               # keep the onnxruntime model for hosts where no plan fits
    parity_atol = 1e-2                 # TensorRT vs ONNX Runtime; default per precision
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.specs.spec import ModelSpec
from hotpath.tensorrt.plans.feeders import check_sequence_length
from hotpath.tensorrt.plans.profiles import derive_profiles
from hotpath.tensorrt.recipe import PRECISIONS, Recipe

# Parity tolerance (max abs difference vs ONNX Runtime) per precision, unless the spec sets one.
DEFAULT_ATOL = {"fp32": 1e-3, "fp16": 1e-2, "int8": 5e-2}
SANITIZED_ONNX = "model.trt.onnx"
KEYS = {"precision", "compute_capabilities", "sequence_length", "hardware_compatible", "version_compatible",
        "cuda_graphs", "onnx_fallback", "parity_atol", "parity_rtol"}


@dataclass
class TensorRTOptions:
    precision: str = "fp16"
    compute_capabilities: list[str] = field(default_factory=list)
    sequence_length: list[int] | None = None
    hardware_compatible: bool = False
    version_compatible: bool = False
    cuda_graphs: bool = False
    onnx_fallback: bool = False
    parity_atol: float | None = None
    parity_rtol: float = 0.0


def _field(spec: ModelSpec, name: str, message: str):
    return spec.error(f"hotpath.tensorrt.{name}", message)


def tensorrt_options(spec: ModelSpec) -> TensorRTOptions | None:
    """The model's TensorRT options, or None when its spec asks for no plans; raises SpecError."""
    table = spec.hotpath.tensorrt
    if table is None:
        return None
    unknown = set(table) - KEYS
    if unknown:
        raise _field(spec, sorted(unknown)[0], f"unknown key (known: {', '.join(sorted(KEYS))})")
    opts = TensorRTOptions(**table)
    if opts.precision not in PRECISIONS:
        raise _field(spec, "precision", f"must be one of {', '.join(PRECISIONS)}, got {opts.precision!r}")
    for cc in opts.compute_capabilities:
        major, dot, minor = str(cc).partition(".")
        if not (dot and major.isdigit() and minor.isdigit()):
            raise _field(spec, "compute_capabilities", f"'{cc}' is not of the form X.Y (e.g. '9.0')")
    if opts.sequence_length is not None:
        lo_opt_hi = opts.sequence_length
        if len(lo_opt_hi) != 3 or not 1 <= lo_opt_hi[0] <= lo_opt_hi[1] <= lo_opt_hi[2]:
            raise _field(spec, "sequence_length", f"must be [min, opt, max] with 1 <= min <= opt <= max, "
                                                  f"got {lo_opt_hi}")
    strings = [t.name for t in (*spec.config.input, *spec.config.output) if t.data_type == mc.TYPE_STRING]
    if strings:
        raise spec.error("hotpath.tensorrt", f"TensorRT has no string tensors ({', '.join(strings)}); "
                                             "keep this model on ONNX Runtime")
    return opts


def recipe_for(spec: ModelSpec, specs: list[ModelSpec] | None = None) -> Recipe | None:
    """The build recipe of the spec's plans (None without `[hotpath.tensorrt]`).

    Raises SpecError when a tokenizer feeding the model (in `specs`, default: build/ and ensembles/)
    can emit a sequence length outside the profile.
    """
    opts = tensorrt_options(spec)
    if opts is None:
        return None
    check_sequence_length(spec, opts.sequence_length, specs)
    atol = opts.parity_atol if opts.parity_atol is not None else DEFAULT_ATOL[opts.precision]
    return Recipe(
        model=spec.name, onnx=SANITIZED_ONNX, precision=opts.precision,
        profiles=[derive_profiles(spec, opts.sequence_length)],
        hardware_compatibility="AMPERE_PLUS" if opts.hardware_compatible else "NONE",
        version_compatible=opts.version_compatible,
        compute_capabilities=[str(cc) for cc in opts.compute_capabilities],
        onnx_fallback=opts.onnx_fallback, parity_atol=float(atol), parity_rtol=float(opts.parity_rtol),
        calibration_cache="calibration.cache" if opts.precision == "int8" else None)
