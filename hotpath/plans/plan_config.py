"""The Triton config of a model's plans, built as a model_config_pb2 message from its spec.

Written to `<model>/configs/tensorrt.pbtxt` (Triton's custom config, `--model-config-name=tensorrt`)
beside the onnxruntime `config.pbtxt`, which CPU hosts and the ONNX fallback serve.
"""

from __future__ import annotations

from tritonclient.grpc import model_config_pb2 as mc

from hotpath.plans.options import TensorRTOptions
from hotpath.plans.profiles import batch_range
from hotpath.spec import ModelSpec
from hotpath.tensorrt.recipe import Recipe, plan_filename

DEFAULT_PLAN = "model.plan"


def plan_config(spec: ModelSpec, recipe: Recipe, opts: TensorRTOptions) -> mc.ModelConfig:
    """tensorrt_plan platform, GPU instances, one plan per compute capability, warmup and CUDA graphs."""
    config = mc.ModelConfig()
    config.CopyFrom(spec.config)
    config.backend = ""
    config.platform = "tensorrt_plan"
    config.ClearField("parameters")  # the ORT thread settings mean nothing to TensorRT
    for group in config.instance_group:
        group.kind = mc.ModelInstanceGroup.KIND_GPU
    config.default_model_filename = DEFAULT_PLAN
    for cc in recipe.compute_capabilities:
        config.cc_model_filenames[cc] = plan_filename(cc)
    if opts.cuda_graphs:
        cuda = config.optimization.cuda
        cuda.graphs = True
        batch = batch_range(spec)
        preferred = list(spec.config.dynamic_batching.preferred_batch_size) or ([batch[1]] if batch else [0])
        profile = recipe.profiles[0]
        for size in preferred:
            graph = cuda.graph_spec.add()
            graph.batch_size = size
            for name, (_, opt, _) in profile.items():
                graph.input[name].dim.extend(opt[1:] if batch else opt)
    return config
