"""One short real sweep point through the whole perf pipeline (perf_analyzer + statistics)."""

from hotpath.sweeps.measure.perf_analyzer import Measurement
from hotpath.sweeps.measure.point import measure
from hotpath.sweeps.measure.response_cache import texts_payload, unique_texts


def test_one_real_sweep_point(grpc_url):
    # Unique texts: every request misses the response cache and reaches both steps.
    point = measure(grpc_url, "text_embedding_exact", "concurrency", 1, texts_payload("smoke.json", unique_texts(3000, 7)),
                    Measurement(interval_ms=1000, stability_pct=100, max_trials=3))
    assert point.throughput > 0 and 0 < point.p50_ms <= point.p95_ms <= point.p99_ms
    assert {"tokenizer", "text_encoder"} <= set(point.steps)
    encoder = point.steps["text_encoder"]
    assert encoder["requests"] > 0 and encoder["compute_infer_us"] > 0


def test_step_payload_drives_the_encoder_alone(grpc_url):
    point = measure(grpc_url, "text_encoder", "concurrency", 1, None,
                    Measurement(interval_ms=1000, stability_pct=100, max_trials=3))
    assert point.throughput > 0 and point.steps["text_encoder"]["requests"] > 0
