"""text_generation served by a real tritonserver vs transformers' greedy generation on the same weights."""

import contextlib
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from hotpath import paths
from hotpath.client import ClientError, Generation, GenerationClient, TokenDelta
from hotpath.exporters.smollm2 import load_reference
from hotpath.spec import load_spec

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about latency.",
    "Translate 'good morning' into Russian and Japanese.",
    "List three prime numbers.",
    "Hi",
    "Explain in one sentence why the sky is blue.",
]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def hf():
    return load_reference()


def _greedy(hf, messages: list[dict], max_tokens: int = MAX_TOKENS):
    """transformers' greedy continuation of a conversation: (token ids without EOS, prompt length, text)."""
    import torch

    model, tokenizer = hf
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0, len(ids):].tolist()
    if tokenizer.eos_token_id in gen:
        gen = gen[:gen.index(tokenizer.eos_token_id)]
    return gen, len(ids), tokenizer.decode(gen, skip_special_tokens=True)


@pytest.fixture(scope="module")
def reference(hf):
    """Greedy continuations (token ids, EOS dropped) and prompt lengths from transformers."""
    return {prompt: _greedy(hf, [{"role": "user", "content": prompt}]) for prompt in PROMPTS}


@pytest.fixture()
def client(grpc_url):
    with GenerationClient(grpc_url, timeout_s=60) as c:
        yield c


def _check(result: Generation, want):
    tokens, prompt_tokens, text = want
    assert result.token_ids == tokens
    assert result.text == text
    assert result.prompt_tokens == prompt_tokens  # same chat template, same tokenizer
    assert result.completion_tokens == len(tokens)
    assert result.finish_reason == ("length" if len(tokens) == MAX_TOKENS else "stop")


def test_greedy_output_equals_transformers_one_at_a_time(client, reference):
    for prompt in PROMPTS:
        _check(client.generate(prompt, max_tokens=MAX_TOKENS), reference[prompt])


def test_greedy_output_unchanged_under_concurrent_load(grpc_url, reference):
    results, errors = {}, []

    def run(i, prompt):
        try:
            with GenerationClient(grpc_url, timeout_s=120) as c:
                results[i] = c.generate(prompt, max_tokens=MAX_TOKENS)
        except Exception as exc:  # surfaced below with the prompt
            errors.append((prompt, exc))

    jobs = PROMPTS * 3  # 18 streams > 16 slots: some wait in the queue and join the running batch later
    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, prompt in enumerate(jobs):
        _check(results[i], reference[prompt])
    # Overlap proves batching: streams' token arrival windows intersect.
    spans = sorted((r.token_times_s[0], r.token_times_s[-1]) for r in results.values() if r.token_times_s)
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def test_stream_order_and_final_response(client, reference):
    prompt = PROMPTS[2]  # Cyrillic/Japanese output: multi-byte characters across tokens
    events = list(client.stream(prompt, max_tokens=MAX_TOKENS))
    final = events[-1]
    assert isinstance(final, Generation) and all(isinstance(e, TokenDelta) for e in events[:-1])
    deltas = [e for e in events[:-1] if e.token_id >= 0]
    assert [e.token_id for e in deltas] == final.token_ids == reference[prompt][0]
    assert "".join(e.text for e in events[:-1]) == final.text == reference[prompt][2]
    times = [e.at_s for e in deltas]
    assert times == sorted(times) and final.total_s >= times[-1]
    assert len(deltas) == final.completion_tokens


def test_stop_string_and_sampling_inputs(client, reference):
    prompt = PROMPTS[0]
    full = reference[prompt][2]
    stop = full.split()[3]
    result = client.generate(prompt, max_tokens=MAX_TOKENS, stop=[stop])
    assert result.finish_reason == "stop" and result.text == full[:full.find(stop)]
    a = client.generate(prompt, max_tokens=12, temperature=0.9, top_p=0.9, seed=123)
    b = client.generate(prompt, max_tokens=12, temperature=0.9, top_p=0.9, seed=123)
    assert a.token_ids == b.token_ids and a.completion_tokens > 0


def test_cancelled_streams_free_their_slots(grpc_url):
    slots = int(load_spec(paths.model_specs_dir() / "text_generation.toml").config.parameters["max_batch"].string_value)
    holders = [GenerationClient(grpc_url, timeout_s=60) for _ in range(slots)]
    streams = [h.stream(f"Tell a very long story about ship number {i}.", max_tokens=400) for i, h in
               enumerate(holders)]
    try:
        for s in streams:
            assert isinstance(next(s), TokenDelta)  # every slot is generating
        waiting = GenerationClient(grpc_url, timeout_s=60)
        done = {}
        t = threading.Thread(target=lambda: done.setdefault("r", waiting.generate("Say OK.", max_tokens=4)))
        t.start()
        time.sleep(1.0)
        assert "r" not in done  # queued behind the long generations holding every slot
        started = time.perf_counter()
        for s in streams:
            s.close()  # leaving the stream cancels the request on the server
        t.join(timeout=60)
        assert "r" in done, "the queued request never ran: cancelled streams kept their slots"
        assert done["r"].finish_reason in ("length", "stop")
        # Freed at the next step, long before slots x 400 tokens could have been generated.
        assert time.perf_counter() - started < 30
        waiting.close()
    finally:
        for h in holders:
            h.close()


def _http_generate_status(http_url, prompt, params):
    """HTTP status of Triton's generate endpoint: it maps the model's error code (INVALID_ARG -> 400),
    which gRPC stream responses do not carry (they hold the message only)."""
    body = {"PROMPT": prompt, **{k.upper(): v for k, v in params.items()}}
    request = urllib.request.Request(f"http://{http_url}/v2/models/text_generation/generate",
                                     data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("prompt,params,message", [
    ("", {}, "PROMPT is empty"),
    (b"\xff\xfe broken", {}, "not valid UTF-8"),
    ("hi", {"max_tokens": 0}, "MAX_TOKENS"),
    ("hi", {"max_tokens": -3}, "MAX_TOKENS"),
    ("hi", {"max_tokens": 1_000_000}, "MAX_TOKENS"),
    ("hi", {"temperature": -0.5}, "TEMPERATURE"),
    ("hi", {"top_p": 0.0}, "TOP_P"),
    ("word " * 600, {}, "tokens after the chat template"),
    ("hi", {"history": ["a user turn without its reply"]}, "HISTORY must alternate"),
    ("hi", {"history": ["word " * 300, "word " * 300]}, "tokens after the chat template"),
], ids=["empty", "non-utf8", "max-tokens-0", "max-tokens-negative", "max-tokens-huge", "temperature-negative",
        "top-p-0", "prompt-too-long", "history-odd", "history-too-long"])
def test_bad_inputs_get_invalid_argument(triton, client, prompt, params, message):
    with pytest.raises(ClientError, match=message):
        client.generate(prompt, **params)
    if isinstance(prompt, str):  # JSON cannot carry non-UTF-8 bytes
        status, body = _http_generate_status(triton.http_url, prompt, params)
        assert status == 400 and message in body, (status, body)
    assert client.generate("Hi", max_tokens=2).completion_tokens >= 1  # still serving


def test_cli_streams_to_the_terminal(grpc_url, reference):
    out = subprocess.run([sys.executable, "-m", "hotpath", "generate", "--url", grpc_url,
                          "--max-tokens", str(MAX_TOKENS), PROMPTS[0]], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == reference[PROMPTS[0]][2].strip()
    assert "first token" in out.stderr and "completion" in out.stderr


def test_tokens_per_second_batched_beats_one_at_a_time(grpc_url):
    """Continuous batching pays: 4 concurrent streams finish more tokens per second than one."""
    def tokens_per_s(concurrency):
        results = []

        def run():
            with GenerationClient(grpc_url) as c:
                results.append(c.generate("Count from one to fifty in words.", max_tokens=32))

        threads = [threading.Thread(target=run) for _ in range(concurrency)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(r.completion_tokens for r in results) / (time.perf_counter() - start)

    one, four = tokens_per_s(1), tokens_per_s(4)
    assert four > 1.5 * one, f"1 stream {one:.1f} tok/s, 4 streams {four:.1f} tok/s"


def _metric(triton, name: str, **labels) -> float:
    """Sum of a metric's samples on the server's metrics port whose labels include `labels`."""
    with urllib.request.urlopen(triton.metrics_url) as r:
        text = r.read().decode()
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(w in line for w in want))


def _published(triton, name: str, above: float, **labels) -> float:
    """The metric once the model's publisher (every second) has pushed it past `above`."""
    for _ in range(100):
        value = _metric(triton, name, **labels)
        if value > above:
            return value
        time.sleep(0.1)
    return value


def test_follow_up_turns_reuse_the_conversation_and_keep_greedy_tokens(triton, grpc_url, hf, reference):
    """Turn 2 of four chats (history = turn 1 and its reply) at once: the same tokens as transformers on
    the whole conversation, with the earlier turns' KV entries taken from the prefix cache."""
    hits = _metric(triton, "hotpath_generation_prefix_cache_lookups_total", model="text_generation", result="hit")
    reused = _metric(triton, "hotpath_generation_prefix_cache_tokens_total", model="text_generation")
    firsts = PROMPTS[:4]
    follow = "Now say it again in fewer words."
    results, errors = {}, []

    def run(prompt):
        try:
            with GenerationClient(grpc_url, timeout_s=120) as c:
                first = c.generate(prompt, max_tokens=MAX_TOKENS)
                results[prompt] = first, c.generate(follow, max_tokens=16, history=[prompt, first.text])
        except Exception as exc:  # surfaced below with the prompt
            errors.append((prompt, exc))

    threads = [threading.Thread(target=run, args=(p,)) for p in firsts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for prompt in firsts:
        first, second = results[prompt]
        _check(first, reference[prompt])
        want = _greedy(hf, [{"role": "user", "content": prompt}, {"role": "assistant", "content": first.text},
                            {"role": "user", "content": follow}], 16)
        assert (second.token_ids, second.prompt_tokens, second.text) == want
    assert _published(triton, "hotpath_generation_prefix_cache_lookups_total", hits + len(firsts) - 1,
                      model="text_generation", result="hit") >= hits + len(firsts)
    # Each follow-up reused at least its first turn's prompt and most of the reply (whole 16-token blocks).
    least = sum(reference[p][1] + len(reference[p][0]) - 32 for p in firsts)
    assert _published(triton, "hotpath_generation_prefix_cache_tokens_total", reused + least - 1,
                      model="text_generation") >= reused + least


def test_generation_metrics_are_published(triton, client):
    assert _metric(triton, "hotpath_generation_kv_capacity_tokens", model="text_generation") == float(
        load_spec(paths.model_specs_dir() / "text_generation.toml").config.parameters["kv_tokens"].string_value)
    ttft = _metric(triton, "hotpath_generation_ttft_seconds_count", model="text_generation")
    itl = _metric(triton, "hotpath_generation_itl_seconds_count", model="text_generation")
    result = client.generate(PROMPTS[3], max_tokens=8)
    assert _published(triton, "hotpath_generation_ttft_seconds_count", ttft, model="text_generation") == ttft + 1
    assert _published(triton, "hotpath_generation_itl_seconds_count", itl + result.completion_tokens - 2,
                      model="text_generation") == itl + result.completion_tokens - 1
    assert _metric(triton, "hotpath_generation_ttft_seconds_bucket", model="text_generation", le="+Inf") >= ttft + 1
    for name in ("kv_used_tokens", "running", "waiting", "preemptions_total"):
        assert _metric(triton, f"hotpath_generation_{name}", model="text_generation") >= 0


@pytest.fixture(scope="module")
def explicit(tmp_path_factory):
    """A second tritonserver serving only text_generation, with explicit model control (reloads)."""
    from hotpath.repository_build import build_repository
    from hotpath.server.ports import ServerPorts, free_ports
    from hotpath.server.process import LocalTriton
    from hotpath.server.subset import linked

    build_repository()  # incremental, as the session server's
    http, grpc, metrics = free_ports(3)
    server = LocalTriton(linked(["text_generation"], tmp_path_factory.mktemp("repository")), model_control="explicit",
                         ports=ServerPorts(http, grpc, metrics), log=lambda m: None)
    server.start()
    yield server
    server.stop()


def _generate(url, prompt, max_tokens=4) -> Generation:
    with GenerationClient(url, timeout_s=300) as c:   # a client per call: an open stream pins the version it used
        return c.generate(prompt, max_tokens=max_tokens)


def test_reloads_keep_the_server_and_one_series_per_metric(explicit):
    """A reload (new config, then the old one back) loads a second copy before unloading the first: the
    two loads' custom metrics must not share series (Triton frees a shared one with the old load)."""
    from hotpath.perf.compare.generation import no_prefix_cache
    from hotpath.perf.measure.reconfigure import reconfigured

    def series():
        with urllib.request.urlopen(explicit.metrics_url) as r:
            return [line for line in r.read().decode().splitlines()
                    if line.startswith("hotpath_generation_kv_capacity_tokens{")]

    assert _generate(explicit.grpc_url, PROMPTS[4]).completion_tokens >= 1
    with reconfigured(explicit.grpc_url, {"text_generation": no_prefix_cache}):
        assert _generate(explicit.grpc_url, PROMPTS[4]).completion_tokens >= 1
    assert _generate(explicit.grpc_url, PROMPTS[4]).completion_tokens >= 1
    for _ in range(100):   # old versions unload in the background
        if len(series()) == 1:
            break
        time.sleep(0.1)
    assert explicit.process.poll() is None
    assert len(series()) == 1, series()   # the unloaded copies' series left with them
    assert _generate(explicit.grpc_url, PROMPTS[4]).completion_tokens >= 1


def _tight_kv(config):
    """512 KV positions for 8 streams: 8 fit at 64 positions each, 2 at 256."""
    config.parameters["kv_tokens"].string_value = "512"
    return config


def test_streams_beyond_the_kv_budget_wait_or_are_preempted_and_keep_their_tokens(explicit):
    from hotpath.perf.measure.reconfigure import reconfigured

    jobs = PROMPTS * 2   # 12 streams growing to ~140 positions: at most 2 fit at once
    alone = {p: _generate(explicit.grpc_url, p, 100).token_ids for p in PROMPTS}
    with reconfigured(explicit.grpc_url, {"text_generation": _tight_kv}):
        before = _metric(explicit, "hotpath_generation_preemptions_total", model="text_generation")
        results, errors = {}, []

        def run(i, prompt):
            try:
                results[i] = _generate(explicit.grpc_url, prompt, 100)
            except Exception as exc:  # surfaced below with the prompt
                errors.append((prompt, exc))

        threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(jobs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        preempted = _published(explicit, "hotpath_generation_preemptions_total", before, model="text_generation")
    assert not errors, errors
    for i, prompt in enumerate(jobs):
        assert results[i].token_ids == alone[prompt], prompt
    assert preempted > before


# ---- issue 25: errors keep their class, refusals only when really full, nothing outlives the model --------

def _small_queue(config, slots=4, queue=2):
    config.parameters["max_batch"].string_value = str(slots)
    config.parameters["max_queue"].string_value = str(queue)
    return config


def _post(http_url, route, body: bytes, timeout=120):
    request = urllib.request.Request(f"http://{http_url}/v2/models/text_generation/{route}", data=body,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


class _RawStream:
    """tritonclient's own stream (no hotpath client): what any gRPC client of the endpoint sees."""

    def __init__(self, url, headers=None):
        import queue

        import tritonclient.grpc as grpcclient

        self.responses = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result=None, error=None: self.responses.put((result, error)),
                                 headers=headers)

    def send(self, inputs, request_id=""):
        self.client.async_stream_infer("text_generation", inputs, request_id=request_id)

    def errors(self, count, timeout=120):
        """Errors and final responses of `count` requests, as (request id, error or None)."""
        out = []
        while len(out) < count:
            result, error = self.responses.get(timeout=timeout)
            if error is not None:
                out.append((None, error))
            elif result.as_numpy("FINISH_REASON") is not None:
                out.append((result.get_response().id, None))
        return out

    def close(self):
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def _inputs_without(name, **params):
    from hotpath.client import generation_inputs

    return [i for i in generation_inputs("Say hi.", **params) if i.name() != name]


def test_missing_prompt_is_invalid_argument_naming_it_without_a_traceback(explicit):
    """Issue 25: a request without PROMPT got INTERNAL with a Python traceback and server paths."""
    status, body = _post(explicit.http_url, "generate", json.dumps({"MAX_TOKENS": 2}).encode())
    assert status == 400 and "PROMPT is required" in body, (status, body)
    assert "Traceback" not in body and "/work" not in body and ".py" not in body
    stream = _RawStream(explicit.grpc_url)
    try:
        stream.send(_inputs_without("PROMPT", max_tokens=2))
        (_, error), = stream.errors(1)
    finally:
        stream.close()
    assert error.message().startswith("text_generation: [INVALID_ARGUMENT] PROMPT is required"), error.message()
    assert "Traceback" not in error.message()


def test_max_tokens_past_32_bits_is_refused_not_wrapped(explicit):
    """Issue 25: MAX_TOKENS 2^32+4 over HTTP wrapped to 4 (200 OK, 4 tokens): Triton's JSON parser casts
    into an INT32 input; MAX_TOKENS is INT64 now and checked whole."""
    from hotpath.client import InvalidInputError

    status, body = _post(explicit.http_url, "generate", json.dumps({"PROMPT": "Say hi.", "MAX_TOKENS": 2**32 + 4}).encode())
    assert status == 400 and "MAX_TOKENS" in body and str(2**32 + 4) in body, (status, body)
    with GenerationClient(explicit.grpc_url, timeout_s=60) as client:
        with pytest.raises(InvalidInputError, match=f"MAX_TOKENS must be within 1..512, got {2**32 + 4}"):
            client.generate("Say hi.", max_tokens=2**32 + 4)


def test_stream_errors_keep_their_status_for_the_client_and_the_cli(explicit):
    """Issue 25: invalid input and a full admission queue reached hotpath.client as a plain ClientError
    (CLI exit 1); now InvalidInputError (65) and ServerUnavailableError (69, retried first)."""
    from hotpath.client import InvalidInputError, RetryPolicy, ServerUnavailableError

    with GenerationClient(explicit.grpc_url, timeout_s=60) as client:
        with pytest.raises(InvalidInputError, match="TEMPERATURE"):
            client.generate("Say hi.", temperature=-1.0)
    cli = [sys.executable, "-m", "hotpath", "generate", "--url", explicit.grpc_url]
    out = subprocess.run(cli + ["--max-tokens", "0", "Say hi."], capture_output=True, text=True, timeout=120)
    assert out.returncode == 65 and "MAX_TOKENS" in out.stderr and "Traceback" not in out.stderr, out.stderr
    # Without hotpath's client (no status header): the class is still in the message.
    raw = _RawStream(explicit.grpc_url)
    try:
        raw.send(_inputs_without("", max_tokens=0))
        (_, error), = raw.errors(1)
    finally:
        raw.close()
    assert error.message().startswith("text_generation: [INVALID_ARGUMENT] MAX_TOKENS"), error.message()

    class Counted(RetryPolicy):
        def wait_or_raise(self, error, attempt):
            attempts.append(type(error).__name__)
            super().wait_or_raise(error, attempt)

    attempts = []
    with reconfigured_small(explicit, slots=1, queue=1):
        holders = [GenerationClient(explicit.grpc_url, timeout_s=120, retry=RetryPolicy(attempts=1)) for _ in range(2)]
        streams = [h.stream(f"Tell a very long story about ship number {i}.", max_tokens=400)
                   for i, h in enumerate(holders)]

        def wait_in_queue():
            try:
                next(streams[1], None)
            except ClientError:   # cancelled when the test closes it
                pass

        try:
            assert isinstance(next(streams[0]), TokenDelta)   # the one slot generates...
            threading.Thread(target=wait_in_queue, daemon=True).start()   # ...the second waits in the queue of 1
            time.sleep(1.0)
            with GenerationClient(explicit.grpc_url, timeout_s=60,
                                  retry=Counted(attempts=3, initial_backoff_s=0.01)) as third:
                with pytest.raises(ServerUnavailableError, match=r"\[UNAVAILABLE\] admission queue full"):
                    third.generate("Say hi.", max_tokens=2)
            assert attempts == ["ServerUnavailableError"] * 3, attempts   # retried, then raised
            out = subprocess.run(cli + ["--max-tokens", "2", "Say hi."], capture_output=True, text=True, timeout=120)
            assert out.returncode == 69 and "admission queue full" in out.stderr, out.stderr
        finally:
            streams[0].close()   # the other generator runs in its thread: closing its client ends it
            for h in holders:
                h.close()


@contextlib.contextmanager
def reconfigured_small(server, slots, queue):
    from hotpath.perf.measure.reconfigure import reconfigured

    with reconfigured(server.grpc_url, {"text_generation": lambda c: _small_queue(c, slots, queue)}):
        yield


def test_requests_are_refused_only_when_the_admission_queue_is_really_full(explicit):
    """Issue 25: 60 concurrent streams got 27 refusals with 1 sequence generating. Requests that arrive
    together while slots are free take the slots, only those beyond slots + max_queue are refused."""
    from hotpath.client import generation_inputs

    with reconfigured_small(explicit, slots=4, queue=2):
        stream = _RawStream(explicit.grpc_url)
        try:
            for i in range(6):   # back to back on one stream: all arrive within one loop step
                stream.send(generation_inputs(f"Count to {i + 3}.", max_tokens=8), request_id=str(i))
            outcomes = stream.errors(6)
            refused = [e.message() for _, e in outcomes if e is not None]
            assert not refused, refused
            stream.send(generation_inputs("Tell a very long story.", max_tokens=300), request_id="long")
            for i in range(5):   # 1 generating: 3 free slots + 2 waiting
                stream.send(generation_inputs(f"Count to {i + 3}.", max_tokens=8), request_id=f"b{i}")
            later = [e.message() for _, e in stream.errors(5) if e is not None]
            assert not later, later
        finally:
            stream.close()


def _stubs(server):
    from hotpath.server.stubs import stub_pids

    return stub_pids(server.process.pid, "text_generation")


def _until(condition, limit_s):
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def _long_streams(url, count):
    """Threads streaming long generations; each records how its stream ended."""
    ended = []

    def run(i):
        try:
            with GenerationClient(url, timeout_s=120) as c:
                ended.append(c.generate(f"Tell a very long story about ship number {i}.", max_tokens=500).finish_reason)
        except Exception as exc:  # recorded: the test checks each stream got its end
            ended.append(type(exc).__name__)

    threads = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(count)]
    for t in threads:
        t.start()
    return threads, ended


def test_unload_and_reload_leave_no_stub_behind_even_with_streams_and_open_clients(explicit):
    """Issue 25: text_generation never unloaded (the old 1.4 GB stub stayed after a reload or unload):
    Triton finalizes a decoupled Python model only once every response sender closed, and 2.51 holds
    the model of a gRPC stream's first request until that stream ends."""
    import tritonclient.grpc as grpcclient

    from hotpath.server.admin import admin_headers

    idle = GenerationClient(explicit.grpc_url, timeout_s=60)   # a client kept open between requests
    assert idle.generate("Hi", max_tokens=2).completion_tokens >= 1
    assert _until(lambda: len(_stubs(explicit)) == 1, 10), _stubs(explicit)   # earlier tests' reloads
    (first,) = _stubs(explicit)
    with reconfigured_small(explicit, slots=16, queue=8):   # a reload: a second copy, then the old one goes
        assert _until(lambda: first not in _stubs(explicit), 10), "the replaced stub is still alive after 10 s"
        assert idle.generate("Hi", max_tokens=2).completion_tokens >= 1
        threads, ended = _long_streams(explicit.grpc_url, 3)
        assert _until(lambda: len(_metric_running(explicit)) and _metric_running(explicit)[0] >= 1, 30)
        control = grpcclient.InferenceServerClient(explicit.grpc_url)
        started = time.monotonic()
        control.unload_model("text_generation", headers=admin_headers())
        assert _until(lambda: not _stubs(explicit), 10), "the stub outlived its unload by 10 s"
        for t in threads:
            t.join(30)
        assert sorted(ended) == ["ServerUnavailableError"] * 3, ended   # each stream got its final (an error)
        assert time.monotonic() - started < 10
    # reconfigured() loaded the original config back
    assert idle.generate("Hi", max_tokens=2).completion_tokens >= 1
    idle.close()


def _metric_running(server):
    with urllib.request.urlopen(server.metrics_url) as r:
        return [float(line.rsplit(" ", 1)[1]) for line in r.read().decode().splitlines()
                if line.startswith("hotpath_generation_running{")]


def test_shutdown_with_live_streams_ends_them_and_exits_well_within_the_exit_timeout(tmp_path):
    """Issue 25: a clean SIGINT waited out the 30 s exit timeout ("Found 2 live models") while streams ran."""
    import signal

    from hotpath.server.ports import ServerPorts, free_ports
    from hotpath.server.process import LocalTriton
    from hotpath.server.subset import linked

    http, grpc, metrics = free_ports(3)
    (tmp_path / "repository").mkdir()
    server = LocalTriton(linked(["text_generation"], tmp_path / "repository"), ports=ServerPorts(http, grpc, metrics),
                         log=lambda m: None)
    server.start()
    try:
        idle = GenerationClient(server.grpc_url)
        assert idle.generate("Hi", max_tokens=2).completion_tokens >= 1
        stubs = _stubs(server)
        threads, ended = _long_streams(server.grpc_url, 4)
        assert _until(lambda: _metric_running(server) and _metric_running(server)[0] >= 2, 30)
        started = time.monotonic()
        server.process.send_signal(signal.SIGINT)
        server.process.wait(60)
        took = time.monotonic() - started
        for t in threads:
            t.join(30)
        idle.close()
        assert took < 15, f"exit took {took:.1f}s of the 30 s exit timeout:\n{server.log_tail()}"
        assert "live models" not in server.log_tail(5) or took < 15
        assert len(ended) == 4 and all(e in ("ServerUnavailableError", "length", "stop") for e in ended), ended
        import psutil

        assert _until(lambda: not [p for p in stubs if psutil.pid_exists(p)
                                   and psutil.Process(p).status() != psutil.STATUS_ZOMBIE], 10)
    finally:
        server.stop()


def test_http_generate_answers_one_response_with_its_status_when_stream_is_false(explicit):
    """Issue 25: /generate answered 200 with an error body after generating. Triton 2.51's /generate takes
    exactly one response and sets the HTTP status from the first one (src/http_server.cc,
    GenerateRequestClass): a token stream there can only end 200 + "generate expects model to produce
    exactly 1 response". With "stream": false the model sends one response: 200 with the whole text, or
    the error's own status; bad input fails first (400) either way."""
    with GenerationClient(explicit.grpc_url, timeout_s=60) as client:
        want = client.generate("Say hi.", max_tokens=6)
    status, body = _post(explicit.http_url, "generate",
                         json.dumps({"PROMPT": "Say hi.", "MAX_TOKENS": 6, "stream": False}).encode())
    assert status == 200, body
    answer = json.loads(body)
    assert answer["TEXT_DELTA"] == want.text and answer["FINISH_REASON"] == want.finish_reason
    assert answer["COMPLETION_TOKENS"] == want.completion_tokens
    status, body = _post(explicit.http_url, "generate", json.dumps({"PROMPT": "", "stream": False}).encode())
    assert status == 400 and "PROMPT is empty" in body
    status, body = _post(explicit.http_url, "generate", json.dumps({"PROMPT": "hi", "stream": "no"}).encode())
    assert status == 400 and "parameter stream" in body
    # What Triton does with a token stream on /generate (documented in README): 200, then an error body.
    status, body = _post(explicit.http_url, "generate", json.dumps({"PROMPT": "Say hi.", "MAX_TOKENS": 2}).encode())
    assert status == 200 and "exactly 1 response" in body, (status, body)
    status, body = _post(explicit.http_url, "generate_stream", json.dumps({"PROMPT": "Say hi.", "MAX_TOKENS": 2}).encode())
    assert status == 200 and body.count("data: ") >= 2 and "FINISH_REASON" in body
