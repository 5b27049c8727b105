"""(d) PyTriton: the same pipeline bound as one Python callable, with PyTriton's dynamic batching.

    python -m hotpath.perf.alternatives.pytriton_app --grpc-port 8601 --http-port 8600 --metrics-port 8602
"""

from __future__ import annotations

import argparse

import numpy as np


def main() -> None:
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig, TritonSecurityConfig

    from hotpath.perf.alternatives.text_pipeline import TextPipeline
    from hotpath.runtime.text import decode_utf8

    parser = argparse.ArgumentParser()
    parser.add_argument("--http-port", type=int, default=8600)
    parser.add_argument("--grpc-port", type=int, default=8601)
    parser.add_argument("--metrics-port", type=int, default=8602)
    parser.add_argument("--max-queue-delay-us", type=int, default=1000)
    args = parser.parse_args()
    pipeline = TextPipeline()

    @batch
    def infer(TEXT):  # noqa: N803 (tensor name)
        return {"EMBEDDING": pipeline(decode_utf8(TEXT)).astype(np.float32)}

    config = TritonConfig(http_port=args.http_port, grpc_port=args.grpc_port, metrics_port=args.metrics_port,
                          http_address="127.0.0.1", grpc_address="127.0.0.1", exit_on_error=True)
    # perf_analyzer reads the statistics endpoint, which PyTriton restricts by default.
    security = TritonSecurityConfig(restricted_endpoints=["shared-memory", "model-repository", "trace", "logging"])
    with Triton(config=config, security_config=security) as triton:
        triton.bind(model_name="text_embedding", infer_func=infer,
                    inputs=[Tensor(name="TEXT", dtype=bytes, shape=(1,))],
                    outputs=[Tensor(name="EMBEDDING", dtype=np.float32, shape=(384,))],
                    config=ModelConfig(max_batch_size=32,
                                       batcher=DynamicBatcher(max_queue_delay_microseconds=args.max_queue_delay_us)))
        triton.serve()


if __name__ == "__main__":
    main()
