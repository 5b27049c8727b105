"""Parity of two runners (polygraphy's Comparator): lives in hotpath.tensorrt.parity, which the container
also runs on the plans it rebuilds; re-exported here for the build steps."""

from hotpath.tensorrt.parity import Parity, compare, onnxrt_runner, trt_runner

__all__ = ["Parity", "compare", "onnxrt_runner", "trt_runner"]
