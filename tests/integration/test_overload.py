"""Bounded work and load shedding, against a real tritonserver on loopback.

- One worst-case input (a 10 MB text, a PNG that inflates to 40 megapixels, the largest input the
  limits admit) no longer stalls the requests around it.
- Open loop at about twice capacity for a few seconds: the queue policies in the specs refuse the
  excess at once with UNAVAILABLE, and the admitted requests keep their latency.
"""

import io
import threading
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from PIL import Image

from hotpath.client import text_input
from hotpath.paths import model_specs_dir
from hotpath.perf.open_loop import run_open_loop
from hotpath.perf.slo import load_slos
from hotpath.spec import load_spec
from tests.imagegen import encode, photo


def _param(model: str, key: str) -> int:
    return int(load_spec(model_specs_dir() / f"{model}.toml").config.parameters[key].string_value)


def _png(size, mode) -> bytes:
    out = io.BytesIO()
    rng = np.random.default_rng(0)
    img = Image.new(mode, size) if mode == "1" else Image.fromarray(rng.integers(0, 256, (*size, 3), dtype=np.uint8))
    img.save(out, "PNG", compress_level=1)
    return out.getvalue()


def _latencies_ms(url, model, payloads, stop: threading.Event | None = None) -> list[float]:
    """Send payloads one after another (until `stop`, cycling); the latency of each."""
    out = []
    with grpcclient.InferenceServerClient(url) as c:
        i = 0
        while (stop is None and i < len(payloads)) or (stop is not None and not stop.is_set()):
            started = time.perf_counter()
            c.infer(model, [text_input(INPUT[model], [payloads[i % len(payloads)]])])
            out.append((time.perf_counter() - started) * 1e3)
            i += 1
    return out


INPUT = {"text_embedding": "TEXT", "text_embedding_exact": "TEXT", "image_classification": "IMAGE"}


def _worst_cases(model):
    """(payload, refused?) for the endpoint: the oversized input and the largest one its limits admit."""
    if INPUT[model] == "TEXT":
        step = "text_embedding" if model == "text_embedding" else "tokenizer"
        max_chars = _param(step, "max_text_chars")
        return [(("x" * 10_000_000).encode(), True), ("語" * max_chars, False)]  # CJK: one token per character
    side = int(_param("image_preprocess", "max_decoded_pixels") ** 0.5)
    return [(_png((6325, 6325), "1"), True), (_png((side, side), "RGB"), False)]


@pytest.mark.parametrize("model", sorted(INPUT))
def test_one_worst_case_input_does_not_stall_its_neighbours(grpc_url, model):
    if INPUT[model] == "TEXT":
        goods = [f"neighbour request {i} about latency" for i in range(40)]
    else:
        goods = [encode(photo(n).resize((640, 480)), "JPEG") for n in ("chelsea", "coffee", "astronaut")]
    baseline = _latencies_ms(grpc_url, model, goods)
    for payload, refused in _worst_cases(model):
        stop, neighbours = threading.Event(), []
        worker = threading.Thread(target=lambda: neighbours.extend(_latencies_ms(grpc_url, model, goods, stop)))
        worker.start()
        time.sleep(0.2)
        started = time.perf_counter()
        try:
            with grpcclient.InferenceServerClient(grpc_url) as c:
                c.infer(model, [text_input(INPUT[model], [payload])])
            status = "OK"
        except Exception as exc:  # noqa: BLE001 - the status is what is checked
            status = str(getattr(exc, "status", lambda: "")())
        worst_ms = (time.perf_counter() - started) * 1e3
        time.sleep(0.2)
        stop.set()
        worker.join()
        assert status == ("StatusCode.INVALID_ARGUMENT" if refused else "OK"), (len(payload), status)
        # Before the limits: a 10 MB text held the tokenizer 6-7.5 s; a 40 MP PNG slowed images to 1.6 s.
        assert worst_ms < 500, f"{model}: the worst-case input took {worst_ms:.0f} ms"
        assert max(neighbours) < np.median(baseline) + 300, \
            f"{model}: neighbours up to {max(neighbours):.0f} ms (baseline p50 {np.median(baseline):.0f} ms)"


def test_open_loop_at_twice_capacity_sheds_load_fast_and_keeps_admitted_latency(grpc_url):
    """text_embedding (one model: its queue policy is the whole story) at ~2x a 2-core host's capacity."""
    target_ms = load_slos("cpu")["text_embedding"].p95_ms
    unique = "offered load {} with a unique text so the response cache never answers"

    def inputs(i):
        return [text_input("TEXT", [unique.format(i)])]

    warm = run_open_loop(grpc_url, "text_embedding", lambda i: [text_input("TEXT", [f"warm {i} " + unique])],
                         rate=100, duration_s=1)  # first batches of each shape are slow: not the subject
    assert len(warm.of("OK")) == len(warm.outcomes), warm.summary()
    result = run_open_loop(grpc_url, "text_embedding", inputs, rate=700, duration_s=4)
    print(result.summary())
    refused, admitted = result.of("UNAVAILABLE"), result.of("OK")
    assert len(refused) + len(admitted) == len(result.outcomes), {o.status for o in result.outcomes}
    assert refused, "nothing refused at ~2x capacity: no queue policy in effect"
    assert admitted, result.summary()
    full = [o.latency_s * 1e3 for o in refused if "Exceeds maximum queue size" in o.message]
    timed_out = [o for o in refused if "timeout expired" in o.message]
    assert len(full) + len(timed_out) == len(refused), {o.message for o in refused}
    assert full and np.percentile(full, 50) < 5, result.summary()  # a full queue answers at once
    assert result.latency_ms("OK", 95) < 2 * target_ms, result.summary()
