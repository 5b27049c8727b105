"""`hotpath serve --trace-otlp`: Triton's OpenTelemetry mode sends one request's spans to a receiver on
loopback; the span tree covers the frontend, the ensemble and every step, and hotpath.sweeps.explain.trace's
per-step breakdown reads it."""

import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
import tritonclient.grpc as grpcclient

from hotpath.monitoring.endpoints import load_endpoints
from hotpath.repository_build import build_repository
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked
from hotpath.sweeps.explain.otlp import spans, to_fragments
from hotpath.sweeps.explain.trace import parse_fragments, request_segments
from perf.lab.studies.cold_start import send_sample
from tests.otlp_receiver import OtlpReceiver

# The first endpoint of perf/slo.toml that is an ensemble of several steps (shapes from the repository).
_ENSEMBLE = next(e for e in load_endpoints("cpu") if len(e.steps) > 1)
ENDPOINT, STEPS = _ENSEMBLE.name, _ENSEMBLE.steps


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """`hotpath serve --trace-otlp` on the endpoint's models, one request, its spans."""
    build_repository()  # incremental: nothing to do once `make engines` ran
    repository = linked((ENDPOINT, *STEPS), tmp_path_factory.mktemp("repository"))
    http, grpc, metrics, otlp = free_ports(4)
    with OtlpReceiver(otlp) as receiver:
        cmd = [sys.executable, "-m", "hotpath", "serve", "--repository", str(repository),
               "--http-port", str(http), "--grpc-port", str(grpc), "--metrics-port", str(metrics),
               "--trace-otlp", receiver.url, "--trace-rate", "1",
               "--no-watchdog"]  # its liveness probes would be traced too: this test wants one request
        log = tmp_path_factory.mktemp("serve") / "serve.log"
        with open(log, "w") as out:
            serve = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            t0 = time.monotonic()
            while "serving; Ctrl-C" not in log.read_text():
                assert serve.poll() is None and time.monotonic() - t0 < 120, log.read_text()
                time.sleep(0.2)
            client = grpcclient.InferenceServerClient(f"127.0.0.1:{grpc}")
            send_sample(client, ENDPOINT)   # a real input from the perf registry; unique texts miss the cache
            client.close()
            # Triton's batch span processor exports every 5 s by default.
            got_all = receiver.wait_for(lambda reqs: {s.name for s in spans(reqs)} >= {ENDPOINT, *STEPS}, 30)
            assert got_all, f"spans received: {[s.name for s in spans(receiver.requests)]}"
        finally:
            serve.send_signal(signal.SIGTERM)
            serve.wait(60)
        yield receiver, log.read_text()


def test_serve_announces_tracing(traced):
    _, log = traced
    assert "[serve] traces  OpenTelemetry, 1 request in 1" in log


def test_span_tree_covers_frontend_ensemble_and_steps(traced):
    receiver, _ = traced
    assert set(receiver.paths) == {"/v1/traces"}
    all_spans = spans(receiver.requests)
    assert len({s.trace_id for s in all_spans}) == 1, "one request, one trace"
    by_id = {s.span_id: s for s in all_spans}
    names = Counter(s.name for s in all_spans)
    assert names[ENDPOINT] == 1 and all(names[s] == 1 for s in STEPS) and names["compute"] == len(STEPS)

    def parent(span):
        return by_id.get(span.parent_span_id)

    ensemble = next(s for s in all_spans if s.name == ENDPOINT)
    frontend = parent(ensemble)
    assert frontend is not None and frontend.parent_span_id == b"", "the frontend span is the root"
    assert {e.name for e in frontend.events} >= {"GRPC_WAITREAD_END", "GRPC_SEND_START"}
    for step in STEPS:
        span = next(s for s in all_spans if s.name == step)
        assert parent(span) is ensemble
        compute = [s for s in all_spans if s.name == "compute" and parent(s) is span]
        assert len(compute) == 1
        assert [e.name for e in compute[0].events] == ["COMPUTE_START", "COMPUTE_INPUT_END",
                                                       "COMPUTE_OUTPUT_START", "COMPUTE_END"]
        # A child lies inside its parent in time.
        assert ensemble.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano \
            <= ensemble.end_time_unix_nano
    resource = {a.key: a.value.string_value for r in receiver.requests for rs in r.resource_spans
                for a in rs.resource.attributes}
    assert resource["service.name"] == "hotpath"


def test_per_step_breakdown_reads_the_spans(traced):
    receiver, _ = traced
    (root,) = parse_fragments(to_fragments(spans(receiver.requests)))
    assert root.model == ENDPOINT and [c.model for c in root.children] == list(STEPS)
    segments = request_segments(root)
    owners = {s.owner for s in segments}
    assert owners >= {"frontend", ENDPOINT, *STEPS}
    assert all(s.end_ns >= s.start_ns for s in segments)
    # Consecutive: each segment starts where the previous one ended, from gRPC read to send.
    assert all(a.end_ns == b.start_ns for a, b in zip(segments, segments[1:]))
    last = {s.name: s.us for s in segments if s.owner == STEPS[-1]}
    assert last["compute infer"] > 0 and "queue" in last
