"""hotpath.client error types: each status maps to its own exception, and only UNAVAILABLE is retried."""

import time

import pytest
from tritonclient.utils import InferenceServerException

from hotpath.client import (
    ClientError,
    EmbeddingClient,
    InvalidInputError,
    RequestTimeoutError,
    RetryPolicy,
    ServerFaultError,
    ServerUnavailableError,
    client_error,
)
from hotpath.server.ports import free_ports


@pytest.mark.parametrize("status,kind", [
    ("StatusCode.INVALID_ARGUMENT", InvalidInputError), ("400", InvalidInputError),
    ("StatusCode.UNAVAILABLE", ServerUnavailableError), ("503", ServerUnavailableError),
    ("502", ServerUnavailableError),   # the gateway's HTTP answer when no server could complete the call
    ("StatusCode.DEADLINE_EXCEEDED", RequestTimeoutError),
    ("StatusCode.INTERNAL", ServerFaultError), ("500", ServerFaultError), ("StatusCode.NOT_FOUND", ServerFaultError),
    (None, ClientError),
])
def test_each_status_has_its_exception_type(status, kind):
    error = client_error("m at h", InferenceServerException("boom", status=status))
    assert type(error) is kind and str(error) == "m at h: boom"
    assert error.retryable == (kind is ServerUnavailableError)
    assert len({InvalidInputError.exit_code, ServerUnavailableError.exit_code, ServerFaultError.exit_code,
                RequestTimeoutError.exit_code, ClientError.exit_code}) == 5


def test_a_model_without_a_version_now_is_unavailable_not_a_fault():
    """What Triton 2.51 answers while its models unload after SIGTERM (tests/integration/test_lifecycle.py)."""
    exiting = InferenceServerException("Request for unknown model: 'text_embedding' has no available versions",
                                       status="StatusCode.NOT_FOUND")
    assert type(client_error("m at h", exiting)) is ServerUnavailableError
    unknown = InferenceServerException("Request for unknown model: 'nope' is not found", status="StatusCode.NOT_FOUND")
    assert type(client_error("m at h", unknown)) is ServerFaultError
    closing = InferenceServerException("CANCELLED", status="StatusCode.CANCELLED")   # a port closing mid-call
    assert type(client_error("m at h", closing)) is ServerUnavailableError


def test_a_dead_stub_is_retryable_other_internal_errors_are_faults():
    """What Triton 2.51 answers after a Python stub was killed (tests/integration/test_stub_health.py)."""
    dead = InferenceServerException("in ensemble 'text_embedding_exact', Stub process 'tokenizer_0_0' is not healthy.",
                                    status="StatusCode.INTERNAL")
    assert type(client_error("m at h", dead)) is ServerUnavailableError
    bug = InferenceServerException("Failed to process the request(s): list index out of range",
                                   status="StatusCode.INTERNAL")
    assert type(client_error("m at h", bug)) is ServerFaultError
    # A proxy reset the call's stream (the replica behind it died mid-call: tests/integration/test_scaleout.py).
    reset = InferenceServerException("Stream removed (RST_STREAM (Received RST_STREAM with error code 2))",
                                     status="StatusCode.INTERNAL")
    assert type(client_error("m at h", reset)) is ServerUnavailableError


class Flaky:
    """Fails with the given statuses in turn, then answers."""

    def __init__(self, *statuses):
        self.statuses, self.calls = list(statuses), 0

    def __call__(self):
        self.calls += 1
        if self.statuses:
            raise InferenceServerException("refused", status=self.statuses.pop(0))
        return "ok"


def test_unavailable_is_retried_until_it_succeeds():
    fn = Flaky("StatusCode.UNAVAILABLE", "StatusCode.UNAVAILABLE")
    assert RetryPolicy(attempts=3, initial_backoff_s=0.001).call(fn, "x") == "ok" and fn.calls == 3


@pytest.mark.parametrize("status", ["StatusCode.INVALID_ARGUMENT", "StatusCode.INTERNAL", "400"])
def test_other_errors_are_never_retried(status):
    fn = Flaky(status, status)
    with pytest.raises(ClientError):
        RetryPolicy(attempts=5, initial_backoff_s=0.001).call(fn, "x")
    assert fn.calls == 1


def test_retries_are_bounded_in_count_and_time(monkeypatch):
    fn = Flaky(*["StatusCode.UNAVAILABLE"] * 10)
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)   # the waits asked for, not the host's scheduling
    with pytest.raises(ServerUnavailableError):
        RetryPolicy(attempts=4, initial_backoff_s=0.02, max_backoff_s=0.03).call(fn, "x")
    assert fn.calls == 4
    assert len(slept) == 3 and all(0 < s <= 0.03 for s in slept), slept  # three sleeps, each at most its cap


def test_unreachable_server_is_unavailable_after_bounded_retries():
    (port,) = free_ports(1)
    with EmbeddingClient(f"127.0.0.1:{port}", retry=RetryPolicy(attempts=2, initial_backoff_s=0.01)) as client:
        with pytest.raises(ServerUnavailableError, match=f"text_embedding at 127.0.0.1:{port}"):
            client.embed(["x"])


def test_generation_retries_like_every_client_but_never_after_the_first_token(monkeypatch):
    from hotpath.client import Generation, GenerationClient, RetryPolicy, ServerUnavailableError, TokenDelta

    client = GenerationClient("127.0.0.1:1", retry=RetryPolicy(attempts=3, initial_backoff_s=0.001))
    calls = []
    done = Generation("hi", "stop", 1, 1, [0.01], 0.01)

    def unavailable_twice(prompt, **params):
        calls.append(prompt)
        if len(calls) < 3:
            raise ServerUnavailableError("text_generation: Server exiting", "StatusCode.UNAVAILABLE")
        yield done

    monkeypatch.setattr(client, "_stream_once", unavailable_twice)
    assert client.generate("p") is done and len(calls) == 3

    calls.clear()

    def broken_after_a_token(prompt, **params):
        calls.append(prompt)
        yield TokenDelta("h", 0.01)
        raise ServerUnavailableError("text_generation: stream broke", "StatusCode.UNAVAILABLE")

    monkeypatch.setattr(client, "_stream_once", broken_after_a_token)
    with pytest.raises(ServerUnavailableError):
        list(client.stream("p"))
    assert len(calls) == 1, "a stream that yielded tokens is not replayed"

    calls.clear()

    def bad_input(prompt, **params):
        calls.append(prompt)
        raise InvalidInputError("text_generation: bad", "StatusCode.INVALID_ARGUMENT")
        yield

    monkeypatch.setattr(client, "_stream_once", bad_input)
    with pytest.raises(InvalidInputError):
        client.generate("p")
    assert len(calls) == 1, "INVALID_ARGUMENT is never retried, streamed or not"
    client.close()


@pytest.mark.parametrize("message,kind", [
    ("text_generation: [INVALID_ARGUMENT] MAX_TOKENS must be within 1..512, got 0", InvalidInputError),
    ("text_generation: [UNAVAILABLE] admission queue full (32 waiting for a slot, 16 generating); retry later",
     ServerUnavailableError),
    ("text_generation: [INTERNAL] request failed (KeyError)", ServerFaultError),
    ("text_generation: MAX_TOKENS must be within 1..512, got 0", ClientError),   # untagged: nothing to go by
    ("in text [UNAVAILABLE] not at the start", ClientError),
])
def test_stream_errors_are_classed_by_the_status_in_their_message(message, kind):
    """A decoupled model's error on a gRPC stream reaches tritonclient without a status code (Triton 2.51
    puts only ModelStreamInferResponse.error_message on the wire); hotpath's models tag the message."""
    error = client_error("text_generation at h", InferenceServerException(message, status=None))
    assert type(error) is kind
    assert error.exit_code == {InvalidInputError: 65, ServerUnavailableError: 69, ServerFaultError: 70,
                               ClientError: 1}[kind]


def test_generation_inputs_follow_the_vllm_backend_and_refuse_what_is_not_utf8():
    import json

    import numpy as np

    from hotpath.client import generation_inputs

    inputs = {i.name(): i for i in generation_inputs("hi", max_tokens=2**32 + 4, seed=7, stop="x",
                                                      history=["a", "b"], system="be brief")}
    params = json.loads(inputs["sampling_parameters"]._get_content()[4:])
    assert params == {"max_tokens": 2**32 + 4, "seed": 7, "stop": "x"}   # JSON: whole, never wrapped
    chat = json.loads(inputs["messages"]._get_content()[4:])
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"] and chat[-1]["content"] == "hi"
    for name in ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
                 "return_num_output_tokens"):
        assert inputs[name].datatype() == "BOOL" and np.frombuffer(inputs[name]._get_content(), bool).tolist() == [True]
    assert "text_input" not in inputs
    raw = {i.name(): i for i in generation_inputs("The capital of France is", raw=True)}
    assert raw["text_input"]._get_content()[4:] == b"The capital of France is" and "messages" not in raw
    assert "sampling_parameters" not in raw   # nothing given: the model's defaults
    with pytest.raises(InvalidInputError, match="prompt is not valid UTF-8"):
        generation_inputs("\udcff")   # what Python makes of the command-line argument $'\xff'
    with pytest.raises(InvalidInputError, match=r"history\[1\] is not valid UTF-8"):
        generation_inputs("hi", history=["ok", "\udcfe"])
    assert generation_inputs(b"\xff", raw=True)[0]._get_content()[4:] == b"\xff"   # raw bytes go as they are


def test_cli_generate_with_undecodable_argument_is_a_clear_input_error():
    """`hotpath generate $'\\xff'` printed a traceback (UnicodeEncodeError) and exited 1."""
    import subprocess
    import sys

    (port,) = free_ports(1)
    out = subprocess.run([sys.executable, "-m", "hotpath", "generate", "--url", f"127.0.0.1:{port}", b"\xff"],
                         capture_output=True, timeout=60)
    stderr = out.stderr.decode(errors="replace")
    assert out.returncode == 65, stderr
    assert "Traceback" not in stderr and "prompt is not valid UTF-8" in stderr


class _Result:
    def __init__(self, **arrays):
        self.arrays = arrays

    def as_numpy(self, name):
        return self.arrays.get(name)


class _StreamingTriton:
    """tritonclient.grpc's stream calls, answering each request with the given outcomes in turn."""

    def __init__(self, *outcomes):
        import numpy as np

        self.outcomes, self.np = list(outcomes), np
        self.opened, self.closed, self.callback = [], [], None

    def start_stream(self, callback, headers=None, **kwargs):
        self.callback = callback
        self.opened.append(headers)

    def stop_stream(self, cancel_requests=False):
        self.closed.append(cancel_requests)

    def async_stream_infer(self, model, inputs, request_id=""):
        np = self.np
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            self.callback(result=None, error=outcome)
            return
        self.callback(result=_Result(text_output=np.array([b"o"], object)))
        self.callback(result=_Result(text_output=np.array([b"k"], object), finish_reason=np.array([b"stop"], object),
                                     num_input_tokens=np.array([3], np.uint32), num_output_tokens=np.array([2], np.uint32)))

    def close(self):
        pass


def test_generation_stream_errors_keep_their_class_and_queue_full_is_retried():
    from hotpath.client import GenerationClient

    full = InferenceServerException("text_generation: [UNAVAILABLE] admission queue full (32 waiting for a slot, "
                                    "0 generating); retry later")
    fake = _StreamingTriton(full, full, "ok")
    client = GenerationClient("127.0.0.1:1", retry=RetryPolicy(attempts=3, initial_backoff_s=0.001))
    client._client = fake
    result = client.generate("hi")
    assert result.text == "ok" and result.finish_reason == "stop"
    # One stream per request, each closed at its end; no triton_grpc_error header (it crashed Triton 2.51).
    assert fake.opened == [None] * 3 and len(fake.closed) == 3 and not client._streaming

    bad = InferenceServerException("text_generation: [INVALID_ARGUMENT] PROMPT is empty")
    fake = _StreamingTriton(bad, "ok")
    client._client = fake
    with pytest.raises(InvalidInputError, match="PROMPT is empty") as caught:
        client.generate(" ")
    assert caught.value.exit_code == 65 and len(fake.outcomes) == 1, "INVALID_ARGUMENT is never retried"

    status = InferenceServerException("Request for unknown model", status="StatusCode.INVALID_ARGUMENT")
    client._client = _StreamingTriton(status)
    with pytest.raises(InvalidInputError):
        client.generate("hi")
