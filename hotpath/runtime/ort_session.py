"""ONNX Runtime sessions configured for serving on shared CPUs."""

from __future__ import annotations

from pathlib import Path


def make_session(model_path: Path | str, intra_op_threads: int = 0, inter_op_threads: int = 0,
                 allow_spinning: bool = False, op_libraries: tuple[str, ...] = (),
                 spin_duration_us: int | None = None):
    """A CPU InferenceSession.

    Spinning is off by default: ORT's idle intra-op threads otherwise busy-wait and, on a small host,
    starve the Triton stubs and the tokenizer running beside them (measured: ~1.8 of 2 cores burnt
    at concurrency 1). With `allow_spinning` and `spin_duration_us`, a worker spins that long after
    its last task and then sleeps: the pool stays awake between the ops of one run (no wake-up per
    op) without burning a core between requests (perf/reports/fixed_cost.md).
    """
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = int(intra_op_threads)
    options.inter_op_num_threads = int(inter_op_threads)
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if allow_spinning else "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "1" if allow_spinning else "0")
    if allow_spinning and spin_duration_us is not None:
        options.add_session_config_entry("session.intra_op.spin_duration_us", str(int(spin_duration_us)))
    for library in op_libraries:
        options.register_custom_ops_library(library)
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])

