"""TensorRT plans that record what they were built for, and the checks that use those records.

Container-safe: these modules import only the standard library (and, when a plan is built or
compared, numpy, polygraphy, ONNX Runtime and TensorRT), so the production image can run them at
start without the toolchain. Only `builder` and `parity.trt_runner` need TensorRT. Building plans
from specs lives in `hotpath.plans`.
"""
