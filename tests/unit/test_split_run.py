"""SplitRunner: a batch cut by length across single-thread sessions gives what one padded run gives."""

import numpy as np
import onnx
from onnx import TensorProto, helper

from hotpath.runtime.core_gate import CoreGate
from hotpath.runtime.split_run import SplitRunner, balanced_cut


def _masked_mean_model(path):
    """Output [n, 2]: the mean of the unmasked ids and the row's own length: padding-invariant like the
    pooled encoder, and wrong if a row were cut short or mixed with another."""
    ids, mask, types = (helper.make_tensor_value_info(n, TensorProto.INT64, ["n", "l"])
                        for n in ("input_ids", "attention_mask", "token_type_ids"))
    out = helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["n", 2])
    nodes = [helper.make_node("Mul", ["input_ids", "attention_mask"], ["masked"]),
             helper.make_node("Cast", ["masked"], ["mf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["attention_mask"], ["kf"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["token_type_ids"], ["tf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["mf", "tf"], ["mt"]),
             helper.make_node("ReduceSum", ["mt", "axes"], ["s"], keepdims=0),
             helper.make_node("ReduceSum", ["kf", "axes"], ["k"], keepdims=0),
             helper.make_node("Div", ["s", "k"], ["mean"]),
             helper.make_node("Unsqueeze", ["mean", "axes"], ["m1"]),
             helper.make_node("Unsqueeze", ["k", "axes"], ["k1"]),
             helper.make_node("Concat", ["m1", "k1"], ["embedding"], axis=1)]
    axes = helper.make_tensor("axes", TensorProto.INT64, [1], [1])
    graph = helper.make_graph(nodes, "masked_mean", [ids, mask, types], [out], initializer=[axes])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(path))
    return path


def _batch(rng, n, longest=40):
    lengths = rng.integers(1, longest + 1, n)
    width = int(lengths.max())
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int64)
    ids = rng.integers(1, 30000, (n, width)).astype(np.int64) * mask
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def test_balanced_cut_is_a_partition_that_puts_long_rows_together():
    lengths = np.array([5, 40, 6, 7, 39, 8, 5, 6])
    parts = balanced_cut(lengths, 2)
    assert sorted(np.concatenate(parts).tolist()) == list(range(8))
    assert set(parts[-1].tolist()) >= {1, 4}, "the two long rows share the part padded to 40"
    short = parts[0]
    assert len(short) * lengths[short].max() <= len(parts[1]) * 40 or len(parts[1]) == 1
    assert [len(p) for p in balanced_cut(lengths, 1)] == [8]


def test_split_runs_equal_one_padded_run(tmp_path):
    model = _masked_mean_model(tmp_path / "m.onnx")
    runner = SplitRunner(model, threads=2, split_from=2)
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 8, 17, 32):
        feeds = _batch(rng, n)
        want = runner.wide.run(None, feeds)[0]
        got = runner.run(feeds)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        np.testing.assert_array_equal(got[:, 1], feeds["attention_mask"].sum(1))


def test_one_thread_never_splits(tmp_path):
    runner = SplitRunner(_masked_mean_model(tmp_path / "m.onnx"), threads=1, split_from=2)
    assert runner.narrow == [] and runner.run(_batch(np.random.default_rng(1), 5)).shape == (5, 2)


def test_one_text_on_more_threads_batches_on_one(tmp_path):
    """wide_threads > threads: one text runs on the wide session, a batch on this instance's single thread."""
    model = _masked_mean_model(tmp_path / "m.onnx")
    runner = SplitRunner(model, threads=1, split_from=2, wide_threads=2, spin_duration_us=100, allow_spinning=True)
    assert len(runner.narrow) == 1 and runner.pool is None
    calls = []
    for name, session in (("wide", runner.wide), ("narrow", runner.narrow[0])):
        run = session.run
        session.run = lambda *a, _run=run, _name=name, **k: calls.append(_name) or _run(*a, **k)
    rng = np.random.default_rng(2)
    for n in (1, 5):
        feeds = _batch(rng, n)
        got = runner.run(feeds)
        np.testing.assert_array_equal(got[:, 1], feeds["attention_mask"].sum(1))
    assert calls == ["wide", "narrow"]


def test_split_runner_runs_one_text_narrow_while_another_instance_runs(tmp_path):
    model = _masked_mean_model(tmp_path / "m.onnx")
    mine, other = (CoreGate(tmp_path, "hotpath-cores-1-m-", name) for name in ("m_0_0", "m_0_1"))
    runner = SplitRunner(model, threads=1, split_from=2, wide_threads=2, gate=mine)
    calls = []
    for name, session in (("wide", runner.wide), ("narrow", runner.narrow[0])):
        run = session.run
        session.run = lambda *a, _run=run, _name=name, **k: calls.append(_name) or _run(*a, **k)
    feeds = _batch(np.random.default_rng(3), 1)
    runner.run(feeds)
    assert other.enter()      # the gate was left: the other instance finds this one idle
    got = runner.run(feeds)
    other.leave()
    runner.run(_batch(np.random.default_rng(4), 5))
    np.testing.assert_array_equal(got[:, 1], feeds["attention_mask"].sum(1))
    assert calls == ["wide", "narrow", "narrow"]
    assert SplitRunner(model, threads=2, split_from=2, gate=mine).gate is None   # no wide layout: no gate
