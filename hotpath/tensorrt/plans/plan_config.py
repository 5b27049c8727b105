"""The Triton config of a model's plans, built as a model_config_pb2 message from its spec.

Written to `<model>/configs/tensorrt.pbtxt` (Triton's custom config, `--model-config-name=tensorrt`)
beside the onnxruntime `config.pbtxt`, which CPU hosts and the ONNX fallback serve. It names only
plans that exist: Triton fails to load a model whose cc_model_filenames entry for its GPU names an
absent file, so a GPU without a plan falls to `model.plan` (none: the load fails and the container's
start-up checker, which writes its own config per host, serves the ONNX fallback instead).
"""

from __future__ import annotations

from typing import Iterable

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.specs.spec import ModelSpec
from hotpath.tensorrt.manifest import Manifest
from hotpath.tensorrt.plans.options import TensorRTOptions
from hotpath.tensorrt.plans.profiles import batch_range
from hotpath.tensorrt.recipe import Recipe

DEFAULT_PLAN = "model.plan"


def plan_config(spec: ModelSpec, recipe: Recipe, opts: TensorRTOptions,
                built: Iterable[Manifest] = ()) -> mc.ModelConfig:
    """tensorrt_plan platform, GPU instances, the `built` plans by compute capability, warmup and CUDA graphs."""
    config = mc.ModelConfig()
    config.CopyFrom(spec.config)
    config.backend = ""
    config.platform = "tensorrt_plan"
    config.ClearField("parameters")  # the ORT thread settings mean nothing to TensorRT
    for group in config.instance_group:
        group.kind = mc.ModelInstanceGroup.KIND_GPU
    config.default_model_filename = DEFAULT_PLAN
    for manifest in sorted(built, key=lambda m: m.plan):
        if manifest.hardware_compatibility.upper() == "AMPERE_PLUS":
            config.default_model_filename = manifest.plan  # runs on every GPU of cc >= 8.0
        else:
            config.cc_model_filenames[manifest.compute_capability] = manifest.plan
    if opts.cuda_graphs:
        _cuda_graphs(config, spec, recipe)
    return config


def _cuda_graphs(config: mc.ModelConfig, spec: ModelSpec, recipe: Recipe) -> None:
    """One graph per preferred batch size at the profile's opt shape, each serving the batch sizes above
    the next smaller graph's (graph_lower_bound): without a lower bound Triton's TensorRT backend
    replays a graph only for a batch of exactly its size."""
    cuda = config.optimization.cuda
    cuda.graphs = True
    batch = batch_range(spec)
    sizes = sorted(set(spec.config.dynamic_batching.preferred_batch_size)) or ([batch[1]] if batch else [0])
    profile = recipe.profiles[0]
    below = 0
    for size in sizes:
        graph = cuda.graph_spec.add()
        graph.batch_size = size
        for name, (_, opt, _) in profile.items():
            graph.input[name].dim.extend(opt[1:] if batch else opt)
        if batch:
            lower = graph.graph_lower_bound
            lower.batch_size = below + 1
            shapes = {name: opt[1:] for name, (_, opt, _) in profile.items()}
            for name, dims in shapes.items():
                # The non-batch dims stay exact: Triton packs a smaller batch's rows at their own
                # length, so a graph captured at another sequence length would read them at the
                # wrong stride. Rows past the batch are computed and dropped (each output row
                # depends on its own input row only).
                lower.input[name].dim.extend(dims)
            _warm(config, size, shapes)
        below = size


def _warm(config: mc.ModelConfig, batch_size: int, shapes: dict[str, list[int]]) -> None:
    """A zero-data warmup at a graph's captured shape unless one exists: a graph serving a smaller batch
    reads the rows past it from the input buffers, which then hold zeros (valid ids) written at load,
    not memory no request has written yet."""
    for warmup in config.model_warmup:
        if warmup.batch_size == batch_size and all(n in warmup.inputs and list(warmup.inputs[n].dims) == d
                                                     for n, d in shapes.items()):
            return
    warmup = config.model_warmup.add(name=f"cuda_graph_batch{batch_size}", batch_size=batch_size)
    dtypes = {t.name: t.data_type for t in config.input}
    for name, dims in shapes.items():
        warmup.inputs[name].data_type = dtypes[name]
        warmup.inputs[name].dims.extend(dims)
        warmup.inputs[name].zero_data = True
