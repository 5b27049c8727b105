"""Lifecycle under load, on a real tritonserver: SIGTERM drains and exits within the exit timeout and
every refusal reaches hotpath's client as UNAVAILABLE (retryable, never NOT_FOUND or a fault); a new
model version rolled out through explicit model control fails no request.

Closed loops send unique texts to a one-model endpoint and to an ensemble (tokenizer -> encoder) and
classify each raw tritonclient error with hotpath.client.client_error, the mapping every hotpath
client uses, so the test sees what the server really answers and what callers make of it.
"""

import collections
import os
import shutil
import signal
import threading
import time
import uuid
from dataclasses import dataclass

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath.client import ClientError, Generation, GenerationClient, ServerUnavailableError, client_error, text_input
from hotpath.server.admin import admin_headers
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.sweeps.measure.reconfigure import load_config, served_config

SINGLE, ENSEMBLE = "text_embedding", "text_embedding_exact"   # one step, two steps
STEP = "sentence_embedder"   # SINGLE's one step
MODELS = [SINGLE, STEP, ENSEMBLE, "tokenizer", "text_encoder"]
EXIT_TIMEOUT_S = 10


@dataclass
class Call:
    endpoint: str
    start: float
    end: float
    raw: str = ""                    # tritonclient's status and message, "" on success
    error: ClientError | None = None


class Load:
    """`loops` closed loops per endpoint until stopped; every call recorded."""

    def __init__(self, url: str, endpoints=(SINGLE, ENSEMBLE), loops: int = 2):
        self.url, self.calls, self._stop = url, [], threading.Event()
        self._threads = [threading.Thread(target=self._loop, args=(e,)) for e in endpoints for _ in range(loops)]

    def _loop(self, endpoint: str) -> None:
        client = grpcclient.InferenceServerClient(self.url)
        while not self._stop.is_set():
            call = Call(endpoint, time.monotonic(), 0.0)
            try:
                client.infer(endpoint, [text_input("TEXT", [f"lifecycle {uuid.uuid4()}"])], client_timeout=30)
            except InferenceServerException as exc:
                call.raw, call.error = f"{exc.status()}: {exc.message()}", client_error(endpoint, exc)
            call.end = time.monotonic()
            self.calls.append(call)
            if call.error:
                time.sleep(0.01)   # a refused loop would otherwise spin on the 2 cores the server needs
        client.close()

    def __enter__(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for t in self._threads:
            t.join()


def _copy(built, target, models=MODELS):
    """`models` as real folders of links to the built files: a version added here (the server links
    Python models rather than copying them) never lands in model_repository/."""
    for model in models:
        shutil.copytree(built / model, target / model,
                        copy_function=lambda src, dst: os.symlink(os.path.realpath(src), dst))
    return target


@pytest.fixture
def repository(triton, tmp_path):   # the session server's fixture builds the repository first
    return _copy(triton.repository, tmp_path)


def _server(repository, exit_timeout_s: int = EXIT_TIMEOUT_S, **kwargs) -> LocalTriton:
    return LocalTriton(repository, ServerPorts(*free_ports(3)), log=lambda m: None,
                       exit_timeout_s=exit_timeout_s, **kwargs)


def _summary(calls) -> str:
    return str(collections.Counter(c.raw[:100] if c.raw else "OK" for c in calls))


def test_sigterm_under_load_drains_refuses_as_unavailable_and_exits_in_time(repository):
    server = _server(repository).start()
    readiness: list[tuple[float, bool]] = []
    try:
        # One model (the Python step itself) and a two-step ensemble: text_embedding is a one-step ensemble,
        # whose in-flight request Triton may refuse while stopping (the rule for ensembles below).
        with Load(server.grpc_url, endpoints=(STEP, ENSEMBLE)) as load:
            time.sleep(2.0)
            killed = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            while server.process.poll() is None and time.monotonic() - killed < EXIT_TIMEOUT_S + 5:
                readiness.append((time.monotonic(), server.is_ready()))
                time.sleep(0.05)
            exited = time.monotonic()
            time.sleep(0.3)   # a few calls against the closed port too
    finally:
        server.stop()
    calls = load.calls
    assert server.process.returncode == 0, server.log_tail()
    assert exited - killed <= EXIT_TIMEOUT_S + 1, f"exit took {exited - killed:.1f} s"
    before = [c for c in calls if c.end < killed]
    assert len(before) > 20 and not [c for c in before if c.error], _summary(before)
    # In flight at the signal: the one model's requests all finish. An ensemble's request whose
    # next step had not started is refused by that stopped step (Triton 2.51 stops every model at once,
    # triton-inference-server/server#6287): allowed, but only as UNAVAILABLE.
    in_flight = [c for c in calls if c.start < killed <= c.end]
    assert not [c for c in in_flight if c.endpoint == STEP and c.error], _summary(in_flight)
    after = [c for c in calls if c.start >= killed]
    refused = [c for c in after if c.error]
    assert len(refused) > 10, _summary(after)
    wrong = [c for c in in_flight + after if c.error and not isinstance(c.error, ServerUnavailableError)]
    assert not wrong, _summary(wrong)
    # The server says it is not ready from shortly after the signal until it is gone.
    # Within 1 s on a quiet host; 5 s leaves room for a loaded 2-core CI host, where one is_ready() poll
    # can itself take a second. A server ready while it drains shows no not-ready sample at all (None).
    first_down = next((t for t, ready in readiness if not ready), None)
    assert first_down is not None and first_down - killed < 5.0, (killed, first_down)
    assert not [t for t, ready in readiness if ready and t > first_down]
    print(f"\nSIGTERM under load: exit {exited - killed:.1f} s; in flight {len(in_flight)} "
          f"({_summary(in_flight)}); after {len(after)}: {_summary(after)}")


def _roll_out_new_version(server: LocalTriton, client: grpcclient.InferenceServerClient, model: str) -> float:
    """Version 2 of `model` next to version 1 in the served repository, then load it: Triton serves v2
    and retires v1 (version policy: latest 1). Returns the seconds the load took."""
    shutil.copytree(server.staged / model / "1", server.staged / model / "2", symlinks=True)
    t0 = time.monotonic()
    client.load_model(model, headers=admin_headers())
    seconds = time.monotonic() - t0
    assert client.is_model_ready(model, "2") and not client.is_model_ready(model, "1")
    return seconds


def test_rolling_out_new_versions_and_configs_under_load_fails_no_request(repository):
    with _server(repository, model_control="explicit") as server, Load(server.grpc_url) as load:
        client = grpcclient.InferenceServerClient(server.grpc_url)
        time.sleep(1.0)
        started = time.monotonic()
        took = {m: _roll_out_new_version(server, client, m) for m in (STEP, "tokenizer", "text_encoder")}
        config = served_config(client, STEP)   # and a config change (instances) of the new version
        config.instance_group[0].count = 1 if config.instance_group[0].count > 1 else 2
        load_config(client, STEP, config)
        assert served_config(client, STEP).instance_group[0].count == config.instance_group[0].count
        finished = time.monotonic()
        time.sleep(0.5)
        client.close()
    during = [c for c in load.calls if started <= c.start < finished]
    for endpoint in (SINGLE, ENSEMBLE):
        assert len([c for c in during if c.endpoint == endpoint]) > 20, _summary(during)
    failed = [c for c in load.calls if c.error]
    assert not failed, _summary(failed)
    print(f"\nrollout under load: {len(during)} calls during {finished - started:.1f} s of loads "
          f"({', '.join(f'{m} {s:.1f} s' for m, s in took.items())}), 0 failed")


@pytest.mark.xfail(reason="known defect: in two of four full-suite runs the streams in "
                   "flight at SIGTERM were not ended and tritonserver waited out its exit timeout (rc 1); module "
                   "runs pass; cause not found", strict=False)
def test_sigterm_ends_streams_in_flight_promptly_and_retryably(built_repository, tmp_path):
    """Token streams of the decoupled generation model that run when SIGTERM arrives end at once: each
    either finished or got UNAVAILABLE "being unloaded" (retryable elsewhere; Triton finalizes a decoupled
    model only once every response sender is closed, so running streams would hold the shutdown for the
    longest generation), and the server exits well within its exit timeout."""
    # The production exit timeout (30 s): vLLM's own shutdown takes ~5 s after the streams ended (its process
    # manager waits that long for EngineCore), past half of this module's 10 s.
    exit_timeout_s = 30
    server = _server(_copy(built_repository, tmp_path, ["text_generation"]),
                     exit_timeout_s=exit_timeout_s).start(timeout=600)   # vLLM loads
    events: dict[int, list] = {i: [] for i in range(3)}

    def stream(i: int) -> None:
        try:
            with GenerationClient(server.grpc_url) as client:
                events[i] += client.stream(f"Tell a long story about robot number {i}.", max_tokens=64)
        except ClientError as exc:
            events[i].append(exc)

    threads = [threading.Thread(target=stream, args=(i,)) for i in events]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 60
        while sum(len(e) for e in events.values()) < 3 * 4:   # every stream has sent a few tokens
            failed = [e for got in events.values() for e in got if isinstance(e, Exception)]
            assert not failed, f"a stream failed before the signal: {failed}"
            assert time.monotonic() < deadline, f"streams sent {[len(e) for e in events.values()]} events in 60 s"
            time.sleep(0.02)
        killed = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        running = [i for i, got in events.items() if not any(isinstance(e, Generation) for e in got)]
        for t in threads:
            t.join(60)
        server.process.wait(exit_timeout_s + 5)
        exit_s = time.monotonic() - killed
    finally:
        server.stop()
    assert server.process.returncode == 0 and exit_s <= exit_timeout_s / 2, exit_s
    assert running, "every stream ended before the signal: nothing was in flight"
    for i, got in events.items():
        last = got[-1]
        if isinstance(last, Generation):
            assert last.finish_reason == "length" and last.completion_tokens == 64, (i, last)
        else:
            assert isinstance(last, ServerUnavailableError) and "being unloaded" in str(last), (i, last)
            assert not [e for e in got[:-1] if isinstance(e, Exception)], (i, got)
