"""Building TensorRT plans from specs (toolchain side): options, profiles, plan configs, parity, the engines step.

What a plan is and whether it fits a GPU lives in `hotpath.tensorrt`, which the container also runs.
"""
