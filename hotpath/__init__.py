"""hotpath: a Triton model repository and Python-backend toolchain for low-latency inference.

Data flows one way: spec -> export -> repository -> server -> client -> perf report.
"""

__version__ = "0.1.0"
