"""run_batched: one model call per same-shaped group; a failed call fails its whole group, as the native
onnxruntime backend fails a batch (the local stand-in must not isolate what production does not)."""

import numpy as np

from hotpath.runtime.batching import run_batched


def _double(calls):
    def run(batch):
        calls.append({k: v.shape for k, v in batch.items()})
        if (batch["x"] < 0).any():
            raise ValueError("negative input")
        return [batch["x"] * 2]
    return run


def test_same_shapes_run_in_one_call_and_split_back_in_order():
    calls = []
    reqs = [{"x": np.full((n, 3), n, dtype=np.float32)} for n in (1, 2, 3)]
    out = run_batched(_double(calls), ["y"], reqs)
    assert len(calls) == 1 and calls[0]["x"] == (6, 3)
    for n, res in zip((1, 2, 3), out):
        np.testing.assert_array_equal(res["y"], np.full((n, 3), 2 * n))


def test_different_shapes_form_separate_groups():
    calls = []
    reqs = [{"x": np.ones((1, 4), np.float32)}, {"x": np.ones((2, 5), np.float32)}, {"x": np.ones((1, 4), np.float32)}]
    out = run_batched(_double(calls), ["y"], reqs)
    assert sorted(c["x"] for c in calls) == [(2, 4), (2, 5)]
    assert [r["y"].shape for r in out] == [(1, 4), (2, 5), (1, 4)]


def test_a_failing_call_fails_its_whole_group_and_only_it():
    calls = []
    reqs = [{"x": np.ones((1, 2), np.float32)}, {"x": -np.ones((1, 2), np.float32)}, {"x": np.ones((2, 3), np.float32)}]
    out = run_batched(_double(calls), ["y"], reqs)
    assert len(calls) == 2, "no per-request retry: Triton's native backend runs a batch once"
    assert isinstance(out[0], ValueError) and isinstance(out[1], ValueError)
    np.testing.assert_array_equal(out[2]["y"], [[2, 2, 2], [2, 2, 2]])
