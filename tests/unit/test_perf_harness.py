"""The perf harness without a server: CSV parsing, SLOs, statistics deltas, knobs, spec write-back."""

import shutil
from pathlib import Path

import pytest

from hotpath import paths
from hotpath.config import read_config
from hotpath.errors import HotpathError, SpecError
from hotpath.perf.analyzer import PerfPoint, parse_csv
from hotpath.perf.check import CheckRow, format_table
from hotpath.perf.search_space import Knob, apply_knobs, knobs_for, read_knobs
from hotpath.perf.slo import Slo, load_slos
from hotpath.perf.spec_writer import write_back
from hotpath.perf.stats import bottleneck, breakdown

DATA = Path(__file__).parent.parent / "data" / "perf"


def test_parse_real_perf_analyzer_csv():
    # Captured from perf_analyzer 2.50 against text_embedding on this project's local server.
    (point,) = parse_csv((DATA / "text_embedding_concurrency8.csv").read_text(), "text_embedding", "concurrency")
    assert point.load == 8 and point.throughput == pytest.approx(90.6818)
    assert (point.p50_ms, point.p95_ms, point.p99_ms) == (85.530, 132.991, 155.760)
    assert point.server_compute_infer_us == 47464 and point.server_queue_us == 2
    (one,) = parse_csv((DATA / "text_embedding_concurrency1.csv").read_text(), "text_embedding", "concurrency")
    assert one.load == 1 and one.p50_ms < point.p50_ms


def test_parse_csv_without_rows_fails_clearly():
    header = (DATA / "text_embedding_concurrency1.csv").read_text().splitlines()[0]
    with pytest.raises(HotpathError, match="no measurement rows"):
        parse_csv(header + "\n", "m", "concurrency")


def test_slos_of_the_cpu_profile():
    slos = load_slos("cpu")
    assert slos["text_embedding"].p95_ms == 25 and slos["text_embedding"].concurrency == 8
    assert slos["image_classification"].p95_ms == 60
    assert "gpu" in (paths.ROOT / "perf" / "slo.toml").read_text()


def test_slo_errors_name_what_is_missing(tmp_path):
    with pytest.raises(HotpathError, match="no profile 'tpu'"):
        load_slos("tpu")
    bad = tmp_path / "slo.toml"
    bad.write_text("[profiles.cpu.endpoints.x]\np95_ms = 5\n")
    with pytest.raises(HotpathError, match="endpoints.x needs 'concurrency'"):
        load_slos("cpu", bad)


def _point(p95, steps=None):
    return PerfPoint("text_embedding", "concurrency", 8, 100.0, p95 / 2, p95, p95, p95, steps=steps or {})


def test_check_rows_pass_and_miss():
    slo = Slo("text_embedding", 25.0, 8, Path("x.json"))
    steps = {"tokenizer": {"queue_us": 900, "compute_infer_us": 2000},
             "text_encoder": {"queue_us": 30000, "compute_infer_us": 40000}}
    rows = [CheckRow(slo, _point(20.0, steps)), CheckRow(slo, _point(30.0, steps))]
    assert [r.ok for r in rows] == [True, False]
    table = format_table(rows)
    assert "PASS" in table and "MISS" in table and "text_encoder" in table


def _snap(success, queue_ns, infer_ns, inference, execution):
    return {"success_count": success, "queue_ns": queue_ns, "compute_input_ns": 0, "compute_infer_ns": infer_ns,
            "compute_output_ns": 0, "inference_count": inference, "execution_count": execution}


def test_breakdown_is_a_per_request_delta_and_finds_the_bottleneck():
    before = {"tokenizer": _snap(10, 1_000_000, 5_000_000, 10, 10), "text_encoder": _snap(10, 0, 0, 10, 10)}
    after = {"tokenizer": _snap(110, 2_000_000, 105_000_000, 110, 60),
             "text_encoder": _snap(110, 500_000_000, 800_000_000, 110, 30)}
    steps = breakdown(before, after, ["tokenizer", "text_encoder", "missing"])
    assert steps["tokenizer"]["compute_infer_us"] == pytest.approx(1000.0)
    assert steps["tokenizer"]["avg_batch"] == pytest.approx(2.0)
    assert steps["text_encoder"]["queue_us"] == pytest.approx(5000.0)
    assert "missing" not in steps
    assert bottleneck(steps) == "text_encoder"


def test_knob_ladders_and_config_round_trip():
    assert Knob("q", (0, 500, 1000)).neighbors(500) == [0, 1000]
    assert Knob("q", (0, 500, 1000)).neighbors(0) == [500]
    assert Knob("q", (0, 500, 1000)).neighbors(700) == [500]
    encoder = read_config(paths.model_repository() / "text_encoder")
    names = [k.name for k in knobs_for(encoder, 1)]
    assert names == ["max_queue_delay_microseconds", "preferred_batch_size", "instance_count", "intra_op_thread_count"]
    values = {"max_queue_delay_microseconds": 4000, "preferred_batch_size": (4, 8), "instance_count": 2,
              "intra_op_thread_count": 1}
    assert read_knobs(apply_knobs(encoder, values)) == values
    assert read_knobs(encoder) != values  # the original is untouched


@pytest.fixture()
def spec_dir(tmp_path):
    d = tmp_path / "build"
    shutil.copytree(paths.model_specs_dir(), d)
    return d


def test_write_back_changes_only_knobs_and_keeps_comments(spec_dir):
    before = (spec_dir / "text_encoder.toml").read_text()
    changes = write_back("text_encoder", {"max_queue_delay_microseconds": 2000, "preferred_batch_size": (4, 8),
                                          "instance_count": 1, "intra_op_thread_count": 1}, spec_dir)
    after = (spec_dir / "text_encoder.toml").read_text()
    assert "dynamic_batching.max_queue_delay_microseconds: 1000 -> 2000" in changes
    assert "parameters.intra_op_thread_count: 2 -> 1" in changes
    assert not any(c.startswith("instance_group") for c in changes)  # unchanged value, no change
    assert "max_queue_delay_microseconds = 2000" in after and "preferred_batch_size = [4, 8]" in after
    comments = [line for line in before.splitlines() if line.startswith("#")]
    assert comments and all(c in after for c in comments)


def test_write_back_refuses_an_invalid_result(spec_dir):
    before = (spec_dir / "text_encoder.toml").read_text()
    with pytest.raises(SpecError, match="preferred_batch_size"):
        write_back("text_encoder", {"preferred_batch_size": (64,)}, spec_dir)
    assert (spec_dir / "text_encoder.toml").read_text() == before


def test_default_config_drops_batching_and_extra_instances():
    from hotpath.perf.compare import default_config

    encoder = read_config(paths.model_repository() / "text_encoder")
    encoder.instance_group[0].count = 3
    plain = default_config(encoder)
    assert not plain.HasField("dynamic_batching") and plain.instance_group[0].count == 1


def test_cache_payloads_are_unique_or_skewed():
    from hotpath.perf.cache import unique_texts, zipf_texts

    texts = unique_texts(500)
    assert len(set(texts)) == 500
    zipf = zipf_texts(1000, distinct=50)
    counts = sorted((zipf.count(t) for t in set(zipf)), reverse=True)
    assert len(set(zipf)) <= 50 and counts[0] > 5 * counts[len(counts) // 2]


def test_parse_csv_of_a_server_without_triton_statistics():
    text = ("Concurrency,Inferences/Second,Client Send,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency\n"
            "2,110.5,10,5,17729,22718,24032,27436\n")
    (point,) = parse_csv(text, "text_embedding", "concurrency")
    assert point.p95_ms == 24.032 and point.server_compute_infer_us == 0


def test_side_by_side_section_reports_ratios_to_the_tuned_config():
    from hotpath.perf.compare import _section

    slo = Slo("text_embedding", 25.0, 8, Path("x.json"))

    def pt(label, load, p95, tput):
        return PerfPoint("text_embedding", "concurrency", load, tput, p95 / 2, p95, p95, p95, label=label)

    points = [pt("tuned", 1, 17, 70), pt("tuned", 2, 24, 100), pt("tuned", 8, 110, 95),
              pt("default", 1, 19, 60), pt("default", 2, 27, 90), pt("fastapi", 2, 20, 120)]
    floor = [{"batch": 1, "spinning": False, "throughput": 140.0, "p50_ms": 8, "p95_ms": 10},
             {"batch": 8, "spinning": True, "throughput": 170.0, "p50_ms": 50, "p95_ms": 60}]
    text = "\n".join(_section(slo, points, floor, {"fastapi": "1 worker"}))
    assert "| (b) Triton, tuned (hotpath) | 100.0 | 1.00 | 110.0 ms |" in text
    assert "| (a) Triton, default config | 60.0 | 0.60 |" in text
    assert "| (c) FastAPI + uvicorn + ORT | 120.0 | 1.20 |" in text
    assert "| (f) in-process floor (no server) | 140.0 | 1.40 |" in text and "(b) / (f) = 0.71" in text
