"""Bounded work, against a real tritonserver on loopback: one worst-case input (a 10 MB text, a PNG
that inflates to 40 megapixels, the largest input the limits admit) no longer stalls the requests
around it.

Load shedding is not the server's: any default_queue_policy stalls tritonserver 2.51's dynamic batcher
~0.5 s between executions (c=8: p95 525 ms, 60-87/s vs 33 ms, 375/s; perf/reports/overload.md), so the
specs set none and the tenant gateway sheds in front of the server (tests/integration/test_gateway.py).
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
from hotpath.specs.spec import load_spec
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
    """Send payloads one after another (until `stop`, cycling); the latency of each. Neighbours ask for
    a 5 s queue timeout (allow_timeout_override), so a stall shows as latency, not as a refusal."""
    out = []
    with grpcclient.InferenceServerClient(url) as c:
        i = 0
        while (stop is None and i < len(payloads)) or (stop is not None and not stop.is_set()):
            started = time.perf_counter()
            c.infer(model, [text_input(INPUT[model], [payloads[i % len(payloads)]])], timeout=5_000_000)
            out.append((time.perf_counter() - started) * 1e3)
            i += 1
    return out


INPUT = {"text_embedding": "TEXT", "text_embedding_exact": "TEXT", "image_classification": "IMAGE"}


def _worst_cases(model):
    """(payload, refused?) for the endpoint: the oversized input and the largest one its limits admit."""
    if INPUT[model] == "TEXT":
        step = "sentence_embedder" if model == "text_embedding" else "tokenizer"
        max_chars = _param(step, "max_text_chars")
        return [(("x" * 10_000_000).encode(), True), ("語" * max_chars, False)]  # CJK: one token per character
    # Noise PNG (incompressible, ~3 bytes per pixel): the largest that both the pixel and byte limits admit.
    side = int(min(_param("image_preprocess", "max_decoded_pixels"), _param("image_preprocess", "max_bytes") / 3.1) ** 0.5)
    return [(_png((6325, 6325), "1"), True), (_png((side, side), "RGB"), False)]


@pytest.mark.parametrize("model", sorted(INPUT))
def test_one_worst_case_input_does_not_stall_its_neighbours(grpc_url, model):
    if INPUT[model] == "TEXT":
        goods = [f"neighbour request {i} about latency" for i in range(40)]
    else:
        goods = [encode(photo(n).resize((640, 480)), "JPEG") for n in ("chelsea", "coffee", "astronaut")]
    baseline = _latencies_ms(grpc_url, model, goods)
    for payload, refused in _worst_cases(model):
        stop, neighbours, failures = threading.Event(), [], []

        def neighbour_load(neighbours=neighbours, stop=stop, failures=failures):
            try:
                neighbours.extend(_latencies_ms(grpc_url, model, goods, stop))
            except Exception as exc:  # noqa: BLE001 - reported by the assertion below
                failures.append(exc)
        worker = threading.Thread(target=neighbour_load)
        worker.start()
        time.sleep(0.2)
        started = time.perf_counter()
        try:
            with grpcclient.InferenceServerClient(grpc_url) as c:
                # The same 5 s queue-timeout override as the neighbours: this checks the input limits, and a
                # 10 MB payload can take longer than the default timeout just to reach the model.
                c.infer(model, [text_input(INPUT[model], [payload])], timeout=5_000_000)
            status = "OK"
        except Exception as exc:  # noqa: BLE001 - the status is what is checked
            status = str(getattr(exc, "status", lambda: "")())
        worst_ms = (time.perf_counter() - started) * 1e3
        time.sleep(0.2)
        stop.set()
        worker.join()
        assert not failures and neighbours, f"{model}: a neighbour failed: {failures}"
        print(f"{model}: worst case {len(payload)} bytes -> {status} in {worst_ms:.0f} ms; neighbours max "
              f"{max(neighbours):.0f} ms, baseline p50 {np.median(baseline):.1f} ms")
        assert status == ("StatusCode.INVALID_ARGUMENT" if refused else "OK"), (len(payload), status)
        # Before the limits: a 10 MB text held the tokenizer 6-7.5 s; a 40 MP PNG slowed images to 1.6 s.
        # What is left is moving the payload itself (the largest admitted image, ~8 MB, stalls its
        # neighbours up to ~0.5 s on a busy 2-core host, most of it before the model's execute()).
        # Bounds relative to this run's own baseline, so a host slowed by other work gives the same verdict.
        bound_ms = 1000 + 20 * np.median(baseline)
        assert worst_ms < bound_ms, f"{model}: the worst-case input took {worst_ms:.0f} ms (bound {bound_ms:.0f})"
        assert max(neighbours) < bound_ms, \
            f"{model}: neighbours up to {max(neighbours):.0f} ms (baseline p50 {np.median(baseline):.0f} ms)"
