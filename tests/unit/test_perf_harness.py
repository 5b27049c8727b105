"""The perf harness without a server: CSV parsing, SLOs, statistics deltas (knobs: test_knobs.py)."""

from pathlib import Path

import pytest

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.specs.repository import read_config
from hotpath.sweeps.gate import CheckRow, format_table
from hotpath.sweeps.measure.perf_analyzer import PerfPoint, parse_csv
from hotpath.sweeps.measure.server_stats import bottleneck, breakdown
from hotpath.tuning.slo import Slo, load_slos

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


def test_check_rows_pass_and_miss_with_the_floor_ratio():
    from hotpath.sweeps.measure.floor import Floor

    slo = Slo("text_embedding", 25.0, 8, Path("x.json"))
    steps = {"tokenizer": {"queue_us": 900, "compute_infer_us": 2000},
             "text_encoder": {"queue_us": 30000, "compute_infer_us": 40000}}
    floor = Floor("texts", [{"batch": 1, "spinning": False, "throughput": 400.0, "p50_ms": 2.5, "p95_ms": 3.0},
                            {"batch": 8, "spinning": False, "throughput": 800.0, "p50_ms": 10, "p95_ms": 30.0}])
    rows = [CheckRow(slo, _point(20.0, steps), floor), CheckRow(slo, _point(30.0, steps))]
    assert [r.ok for r in rows] == [True, False]
    table = format_table(rows)
    assert "PASS" in table and "MISS" in table and "text_encoder" in table
    # throughput 100/s against the best floor row within 25 ms (batch 1, 400/s; batch 8 misses the target)
    assert "| 400.0/s | 0.25 |" in table
    assert "floor text_embedding: 400.0 texts/s at batch 1" in table


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


def test_default_config_drops_batching_and_extra_instances():
    from perf.lab.compare.alternatives.launch import default_config

    encoder = read_config(paths.model_repository() / "text_encoder")
    encoder.instance_group[0].count = 3
    plain = default_config(encoder)
    assert not plain.HasField("dynamic_batching") and plain.instance_group[0].count == 1


def test_cache_payloads_are_unique_or_skewed():
    from hotpath.sweeps.measure.response_cache import unique_texts, zipf_texts

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


def test_side_by_side_section_reports_ratios_to_hotpath_and_to_the_floor():
    from hotpath.sweeps.measure.floor import Floor
    from hotpath.sweeps.registry import get_endpoint
    from perf.lab.compare.rivals import rivals_for
    from perf.lab.compare.side_by_side import section

    slo = Slo("text_embedding", 25.0, 8, Path("x.json"))

    def pt(label, load, p95, tput):
        return PerfPoint("text_embedding", "concurrency", load, tput, p95 / 2, p95, p95, p95, label=label)

    points = [pt("tuned", 1, 17, 70), pt("tuned", 2, 24, 100), pt("tuned", 8, 110, 95),
              pt("default", 1, 19, 60), pt("default", 2, 27, 90), pt("fastapi-async", 1, 6, 150),
              pt("fastapi-async", 2, 20, 120)]
    floor = Floor("texts", [{"batch": 1, "spinning": False, "throughput": 140.0, "p50_ms": 8, "p95_ms": 10},
                            {"batch": 8, "spinning": True, "throughput": 170.0, "p50_ms": 50, "p95_ms": 60}])
    text = "\n".join(section(slo, get_endpoint("text_embedding"), rivals_for("text_embedding"), points, floor,
                             {"fastapi-async": "1 worker", "pytriton": "failed: no port"}))
    assert "| hotpath (tuned config in the specs) | 100.0 | 1.00 | 0.71 | 8.5 ms | 110.0 ms |" in text
    assert "| Triton, default config | 60.0 | 0.60 | 0.43 | 9.5 ms |" in text
    assert "| FastAPI + uvicorn + ORT, async handler | 150.0 | 1.50 | 1.07 | 3.0 ms | - | 1 worker |" in text
    assert "| PyTriton 0.7 | 0.0 |" in text and "failed: no port" in text  # a failed alternative stays visible
    assert ", sync handler" not in text and "Model Analyzer" not in text  # neither measured nor noted: left out
    assert "| in-process floor (no server) | 140.0 | 1.40 | 1.00 | 8.0 ms (batch 1) |" in text
    assert "best alternative (FastAPI + uvicorn + ORT, async handler): throughput 0.67x" in text


def test_reports_carry_the_floor_and_the_ratios_to_it(tmp_path):
    from hotpath.sweeps.measure.floor import Floor
    from hotpath.sweeps.report import floor_section, write_report

    slo = Slo("text_embedding", 25.0, 8, Path("x.json"), floor_ratio_goal=0.75)
    points = [PerfPoint("text_embedding", "concurrency", c, t, p50, p95, p95, p95, label="tuned")
              for c, t, p50, p95 in ((1, 200.0, 4.0, 5.0), (8, 450.0, 15.0, 24.0))]
    floor = Floor("texts", [{"batch": 1, "spinning": False, "throughput": 500.0, "p50_ms": 2.0, "p95_ms": 2.5},
                            {"batch": 8, "spinning": True, "throughput": 600.0, "p50_ms": 13.0, "p95_ms": 14.0}])
    lines = floor_section(slo, floor, points)
    text = "\n".join(lines)
    assert "throughput at the p95 target 450.0/s = 0.75x the floor's 600.0/s (goal 0.75x)" in text
    assert "p50 at concurrency 1 4.00 ms = 2.00x the floor's batch-1 p50 2.00 ms" in text
    assert "| 8 | on | 600.0 | 13.00 | 14.00 |" in text
    path = write_report("t", {"text_embedding": points}, {"text_embedding": slo}, tmp_path, ["preamble"], lines)
    assert "in-process floor (same run, no server)" in path.read_text()
    assert (tmp_path / "t" / "text_embedding-latency-throughput.png").stat().st_size > 0


def test_a_relative_verdict_reads_the_same_on_a_slower_host():
    """The same code on a host 3x slower: the absolute bound misses, the floor-scaled bound does not; a
    regression of the code misses both."""
    from hotpath.sweeps.measure.floor import Floor

    slo = Slo("text_embedding", 25.0, 8, Path("x.json"), floor_reference_ms=3.0, verdict="relative")

    def floor(batch1_ms):
        return Floor("texts", [{"batch": 1, "spinning": False, "throughput": 1000 / batch1_ms, "p50_ms": batch1_ms,
                                "p95_ms": batch1_ms * 1.2}])

    fast, slow = CheckRow(slo, _point(20.0), floor(3.0)), CheckRow(slo, _point(60.0), floor(9.0))
    assert fast.ok and fast.absolute_ok and fast.relative_ok
    assert slow.relative_target_ms == 75.0 and not slow.absolute_ok and slow.relative_ok and slow.ok
    regressed = CheckRow(slo, _point(90.0), floor(9.0))
    assert not regressed.ok and not regressed.relative_ok
    table = format_table([slow, regressed])
    assert "| MISS | PASS (p95 <= 75.0 ms: 25 x floor 9.00 / 3 ms) | PASS (relative) |" in table
    assert "| MISS | MISS (p95 <= 75.0 ms" in table
    absolute = CheckRow(Slo("text_embedding", 25.0, 8, Path("x.json"), floor_reference_ms=3.0), _point(60.0), floor(9.0))
    assert not absolute.ok and absolute.relative_ok, "verdict 'absolute' fails on the written target"


def test_a_relative_verdict_needs_a_reference_floor(tmp_path):
    bad = tmp_path / "slo.toml"
    bad.write_text('[profiles.cpu.endpoints.x]\np95_ms = 5\nconcurrency = 1\ninput_data = "x.json"\n'
                   'verdict = "relative"\n')
    with pytest.raises(HotpathError, match="'relative' needs floor_reference_ms"):
        load_slos("cpu", bad)
    assert load_slos("cpu")["text_embedding"].verdict == "relative"
