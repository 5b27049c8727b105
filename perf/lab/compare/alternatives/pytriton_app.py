"""PyTriton: an endpoint's whole pipeline bound as one Python callable, with PyTriton's dynamic batching.

    python -m perf.lab.compare.alternatives.pytriton_app --endpoint image_classification \\
        --grpc-port 8601 --http-port 8600 --metrics-port 8602
"""

from __future__ import annotations

import argparse

import numpy as np


def _as_wire(array: np.ndarray) -> np.ndarray:
    """Strings as UTF-8 bytes objects: what PyTriton sends for BYTES tensors."""
    if array.dtype == np.object_ or array.dtype.kind == "U":
        return np.vectorize(lambda v: v if isinstance(v, bytes) else str(v).encode(), otypes=[np.object_])(array)
    return array


def main() -> None:
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig
    from tritonclient.grpc import model_config_pb2 as mc
    from tritonclient.utils import triton_to_np_dtype

    from hotpath import paths
    from hotpath.specs.repository import read_config
    from hotpath.sweeps.registry import get_endpoint

    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", default="text_embedding")
    parser.add_argument("--http-port", type=int, default=8600)
    parser.add_argument("--grpc-port", type=int, default=8601)
    parser.add_argument("--metrics-port", type=int, default=8602)
    parser.add_argument("--max-queue-delay-us", type=int, default=1000)
    parser.add_argument("--ort-threads", type=int, default=2)
    args = parser.parse_args()
    pipeline = get_endpoint(args.endpoint).make_pipeline(args.ort_threads, False)
    config = read_config(paths.model_repository() / args.endpoint)

    def tensor(t) -> Tensor:
        name = mc.DataType.Name(t.data_type).removeprefix("TYPE_")
        dtype = bytes if name == "STRING" else triton_to_np_dtype(name)
        return Tensor(name=t.name, dtype=dtype, shape=tuple(t.dims))

    (inp,) = [i for i in config.input if not i.optional]   # optional ones (retrieval's TOP_K, OP, ID): defaults

    @batch
    def infer(**inputs):
        outputs = pipeline(pipeline.decode(inputs[inp.name]))
        return {name: _as_wire(value) for name, value in outputs.items()}

    server = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                          http_address="127.0.0.1", grpc_address="127.0.0.1", exit_on_error=True)
    # perf_analyzer reads the statistics endpoint, which PyTriton restricts by default.
    security = TritonSecurityConfig(restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"])
    with Triton(config=server, security_config=security) as triton:
        triton.bind(model_name=args.endpoint, infer_func=infer,
                    inputs=[tensor(inp)], outputs=[tensor(t) for t in config.output],
                    config=ModelConfig(max_batch_size=config.max_batch_size,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)))
        triton.serve()


if __name__ == "__main__":
    main()
