"""Triton trace files -> consecutive per-request segments (hotpath.sweeps.explain.trace), on a captured real trace."""

import json
from pathlib import Path

import pytest

from hotpath.runtime.timing import ExecuteLog, read_logs, timed
from hotpath.sweeps.explain.trace import Segment, parse_fragments, read_trace_files, request_segments, summarize

DATA = Path(__file__).parent.parent / "data" / "perf"
TRACE = DATA / "trace-text_embedding.json"   # 30 requests of text_embedding at concurrency 1, tritonserver 2.51


def test_real_trace_parses_into_ensemble_roots_with_both_steps():
    roots = read_trace_files([TRACE])
    assert len(roots) == 30
    for root in roots:
        assert root.model == "text_embedding"
        assert [c.model for c in root.children] == ["tokenizer", "text_encoder"]


def test_segments_are_consecutive_and_cover_the_server_span():
    for root in read_trace_files([TRACE]):
        segs = request_segments(root)
        assert all(s.end_ns >= s.start_ns for s in segs)
        assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))
        assert segs[0].start_ns == root.ts["GRPC_WAITREAD_END"]
        assert segs[-1].end_ns == root.ts["GRPC_SEND_END"]
        names = [(s.owner, s.name) for s in segs]
        assert ("tokenizer", "queue") in names and ("text_encoder", "compute infer") in names


def test_stub_timing_splits_the_python_step_compute():
    stub = read_logs(DATA / "stub-timing")
    split = 0
    for root in read_trace_files([TRACE]):
        plain = {(s.owner, s.name): s for s in request_segments(root)}
        segs = request_segments(root, stub)
        by = {(s.owner, s.name): s for s in segs}
        if ("text_encoder", "execute()") not in by:
            continue
        split += 1
        infer = plain[("text_encoder", "compute infer")]
        parts = [by[("text_encoder", n)] for n in ("to stub", "execute()", "from stub")]
        assert parts[0].start_ns == infer.start_ns and parts[-1].end_ns == infer.end_ns
        assert parts[1].us > parts[0].us  # ORT's work dominates the hand-over on this model
        assert all(a.end_ns == b.start_ns for a, b in zip(segs, segs[1:]))
    assert split >= 25


def test_open_array_of_a_running_server_is_read(tmp_path):
    text = TRACE.read_text()
    assert text.endswith("]")
    f = tmp_path / "trace.json"
    f.write_text(text[:-1] + ",")  # what the server has written before it shuts down
    assert len(read_trace_files([f])) == 30


def test_step_without_compute_timestamps_is_refused():
    frags = [{"id": 1, "model_name": "m", "model_version": 1},
             {"id": 1, "timestamps": [{"name": "REQUEST_START", "ns": 10}, {"name": "QUEUE_START", "ns": 11},
                                      {"name": "REQUEST_END", "ns": 20}]}]
    (root,) = parse_fragments(frags)
    with pytest.raises(ValueError, match="lacks compute timestamps"):
        request_segments(root)


def test_summarize_medians_and_offsets():
    reqs = [[Segment("f", "a", 0, 10 * k), Segment("m", "b", 10 * k, 10 * k + 1000)] for k in (1, 2, 3)]
    stats = summarize(reqs)
    assert [(s.owner, s.name) for s in stats] == [("f", "a"), ("m", "b")]
    assert stats[0].p50_us == pytest.approx(0.02) and stats[0].mean_us == pytest.approx(0.02)
    assert stats[1].p50_us == pytest.approx(1.0) and stats[1].offset_us == pytest.approx(0.02)


def test_execute_log_records_only_when_enabled(tmp_path, monkeypatch):
    class Model:
        def __init__(self, args):
            self.execute_log = ExecuteLog.open(args)

        @timed
        def execute(self, requests):
            return [r * 2 for r in requests]

    args = {"model_name": "tok", "model_instance_name": "tok_0_0"}
    monkeypatch.delenv("HOTPATH_STUB_TIMING_DIR", raising=False)
    assert Model(args).execute([1, 2]) == [2, 4]
    monkeypatch.setenv("HOTPATH_STUB_TIMING_DIR", str(tmp_path))
    m = Model(args)
    assert m.execute([1, 2, 3]) == [2, 4, 6]
    rows = read_logs(tmp_path)["tok"]
    assert len(rows) == 1 and rows[0][2] == 3 and rows[0][1] >= rows[0][0]
    json.dumps(rows)
