"""text_generation on vLLM, served by a real tritonserver (conftest's `generation_triton`: float32, a small
KV space), against transformers' greedy generation on the same float32 weights."""

import json
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import psutil
import pytest
import tritonclient.grpc as grpcclient

from hotpath.client import Generation, GenerationClient, InvalidInputError, TokenDelta
from hotpath.exporters.smollm2 import load_reference
from hotpath.server.stubs import stub_pids

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about latency.",
    "Translate 'good morning' into Russian and Japanese.",
    "List three prime numbers.",
    "Hi",
    "Explain in one sentence why the sky is blue.",
]
MAX_TOKENS = 24
MODEL = "text_generation"


@pytest.fixture(scope="module")
def hf():
    return load_reference()


def _greedy(hf, messages: list[dict], max_tokens: int = MAX_TOKENS):
    """transformers' greedy continuation of a conversation: (token count without EOS, prompt length, text)."""
    import torch

    model, tokenizer = hf
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False)
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False,
                             pad_token_id=tokenizer.eos_token_id)[0, len(ids):].tolist()
    stopped = tokenizer.eos_token_id in gen
    if stopped:
        gen = gen[:gen.index(tokenizer.eos_token_id) + 1]   # vLLM counts the EOS token it generated
    return len(gen), len(ids), tokenizer.decode(gen, skip_special_tokens=True), stopped


@pytest.fixture(scope="module")
def reference(hf):
    return {prompt: _greedy(hf, [{"role": "user", "content": prompt}]) for prompt in PROMPTS}


@pytest.fixture()
def client(generation_url):
    with GenerationClient(generation_url, timeout_s=300) as c:
        yield c


def _check(result: Generation, want):
    tokens, prompt_tokens, text, stopped = want
    assert result.text == text
    assert result.prompt_tokens == prompt_tokens  # the same chat template and tokenizer
    assert result.completion_tokens == tokens
    assert result.finish_reason == ("stop" if stopped else "length")


def test_greedy_output_equals_transformers_one_at_a_time(client, reference):
    for prompt in PROMPTS:
        _check(client.generate(prompt, max_tokens=MAX_TOKENS), reference[prompt])


def test_greedy_output_unchanged_under_concurrent_streams(generation_url, reference):
    results, errors = {}, []

    def run(i, prompt):
        try:
            with GenerationClient(generation_url, timeout_s=300) as c:
                results[i] = c.generate(prompt, max_tokens=MAX_TOKENS)
        except Exception as exc:  # surfaced below with the prompt
            errors.append((prompt, exc))

    jobs = PROMPTS * 2
    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, prompt in enumerate(jobs):
        _check(results[i], reference[prompt])


def test_stream_deltas_add_up_to_the_final_text(client, reference):
    prompt = PROMPTS[2]  # Cyrillic/Japanese output: multi-byte characters across tokens
    events = list(client.stream(prompt, max_tokens=MAX_TOKENS))
    final = events[-1]
    assert isinstance(final, Generation) and all(isinstance(e, TokenDelta) for e in events[:-1])
    assert "".join(e.text for e in events[:-1]) == final.text == reference[prompt][2]
    times = [e.at_s for e in events[:-1]]
    assert times == sorted(times) and final.total_s >= times[-1]
    assert 1 < len(times) <= final.completion_tokens


def test_the_client_returns_every_choice_and_the_engines_logprobs(client, reference):
    prompt = PROMPTS[0]
    greedy = client.generate(prompt, max_tokens=MAX_TOKENS, logprobs=2)
    assert greedy.text == reference[prompt][2] and greedy.choices == [greedy.text]
    assert greedy.finish_reasons == [greedy.finish_reason]
    (entries,) = greedy.logprobs
    # every token but an end-of-sequence one, which the text leaves out too (as OpenAI's)
    assert len(entries) == greedy.completion_tokens - (greedy.finish_reason == "stop")
    for token_id, _, logprob, top in entries:   # greedy: the token sampled is the top-ranked one
        assert 2 <= len(top) <= 3 and top[0][0] == token_id and top[0][2] == logprob and top[0][3] == 1, top
    assert client.generate(prompt, max_tokens=4).logprobs is None   # not asked for
    events = list(client.stream(prompt, max_tokens=8, n=3, temperature=1.0, seed=7))
    final = events[-1]
    assert len(final.choices) == len(final.finish_reasons) == 3 and final.text == final.choices[0]
    for i in range(3):
        assert "".join(e.text for e in events[:-1] if e.choice == i) == final.choices[i] != ""
    assert 3 <= final.completion_tokens <= 3 * 8   # every choice's tokens


def test_stop_string_seed_and_raw_text_input(client, reference):
    prompt = PROMPTS[0]
    full = reference[prompt][2]
    stop = full.split()[3]
    result = client.generate(prompt, max_tokens=MAX_TOKENS, stop=[stop])
    assert result.finish_reason == "stop" and result.text == full[:full.find(stop)]
    a = client.generate(prompt, max_tokens=12, temperature=0.9, top_p=0.9, top_k=40, seed=123)
    b = client.generate(prompt, max_tokens=12, temperature=0.9, top_p=0.9, top_k=40, seed=123)
    assert a.text == b.text and a.completion_tokens > 0
    raw = client.generate("The capital of France is", raw=True, max_tokens=4)
    assert raw.prompt_tokens == 5 and raw.completion_tokens == 4 and raw.finish_reason == "length"


def _post(http_url, route, body: dict, timeout=300):
    request = urllib.request.Request(f"http://{http_url}/v2/models/{MODEL}/{route}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_http_generate_answers_the_prompt_and_the_text_as_the_vllm_backend_does(generation_triton, client):
    want = client.generate("The capital of France is", raw=True, max_tokens=6)
    status, body = _post(generation_triton.http_url, "generate",
                         {"text_input": "The capital of France is", "sampling_parameters": json.dumps({"max_tokens": 6}),
                          "return_finish_reason": True, "return_num_output_tokens": True})
    assert status == 200, body
    answer = json.loads(body)
    # exclude_input_in_output defaults to false: the prompt, then the generated text.
    assert answer["text_output"] == "The capital of France is" + want.text
    assert answer["finish_reason"] == "length" and answer["num_output_tokens"] == 6
    status, body = _post(generation_triton.http_url, "generate",
                         {"text_input": "Hi", "exclude_input_in_output": True, "sampling_parameters": '{"max_tokens": 2}'})
    assert status == 200 and set(json.loads(body)) == {"model_name", "model_version", "text_output"}, body


# Each is INVALID_ARGUMENT before anything is queued, names its fault, and leaves the server serving.
BAD_REQUESTS = {
    "no text": ({}, "exactly one of text_input or messages"),
    "both": ({"text_input": "hi", "messages": '[{"role": "user", "content": "hi"}]'}, "exactly one of"),
    "empty text": ({"text_input": ""}, "text_input is empty"),
    "messages not json": ({"messages": "[{"}, "messages is not valid JSON"),
    "messages empty": ({"messages": "[]"}, "non-empty JSON list"),
    "bad role": ({"messages": '[{"role": "tool", "content": "x"}]'}, "role must be one of"),
    "extra key": ({"messages": '[{"role": "user", "content": "x", "name": "a"}]'}, "exactly the keys"),
    "content not text": ({"messages": '[{"role": "user", "content": 3}]'}, "content must be a string"),
    "ends with assistant": ({"messages": '[{"role": "assistant", "content": "x"}]'}, "must not end with an assistant"),
    "sampling not json": ({"text_input": "hi", "sampling_parameters": "{"}, "not valid JSON"),
    "sampling a list": ({"text_input": "hi", "sampling_parameters": "[1]"}, "must be a JSON object"),
    "unknown key": ({"text_input": "hi", "sampling_parameters": '{"beam_width": 2}'}, "unknown key 'beam_width'"),
    "max_tokens 0": ({"text_input": "hi", "sampling_parameters": '{"max_tokens": 0}'}, "max_tokens must be"),
    "max_tokens text": ({"text_input": "hi", "sampling_parameters": '{"max_tokens": "eight"}'}, "max_tokens"),
    "max_tokens float": ({"text_input": "hi", "sampling_parameters": '{"max_tokens": 2.5}'}, "max_tokens must be"),
    "max_tokens bool": ({"text_input": "hi", "sampling_parameters": '{"max_tokens": true}'}, "max_tokens must be"),
    "max_tokens 2^32+4": ({"text_input": "hi", "sampling_parameters": '{"max_tokens": 4294967300}'},
                          "max_tokens must be within 1..512, got 4294967300"),
    "temperature negative": ({"text_input": "hi", "sampling_parameters": '{"temperature": -1}'}, "temperature"),
    "temperature NaN": ({"text_input": "hi", "sampling_parameters": '{"temperature": NaN}'}, "NaN is not a number"),
    "temperature huge": ({"text_input": "hi", "sampling_parameters": '{"temperature": 1e400}'}, "temperature"),
    "top_p 0": ({"text_input": "hi", "sampling_parameters": '{"top_p": 0}'}, "top_p must be"),
    "top_k 0": ({"text_input": "hi", "sampling_parameters": '{"top_k": 0}'}, "top_k must be"),
    "seed negative": ({"text_input": "hi", "sampling_parameters": '{"seed": -1}'}, "seed must be"),
    "stop empty": ({"text_input": "hi", "sampling_parameters": '{"stop": [""]}'}, "stop must be"),
    "stop not text": ({"text_input": "hi", "sampling_parameters": '{"stop": [1]}'}, "stop must be"),
    "stream with input": ({"text_input": "hi", "stream": True, "exclude_input_in_output": False},
                          "exclude_input_in_output = true"),
    "prompt past the context": ({"text_input": "word " * 1100}, "the context holds 1024"),
    "max_tokens past the context": ({"text_input": "word " * 800, "sampling_parameters": '{"max_tokens": 400}'},
                                    "exceed the context of 1024"),
    "text too large": ({"text_input": "x" * 70000}, "over the 65536-byte limit"),
}


def _raw_inputs(fields: dict) -> list:
    inputs = []
    for name, value in fields.items():
        if isinstance(value, bool):
            t = grpcclient.InferInput(name, [1], "BOOL")
            t.set_data_from_numpy(np.array([value], dtype=bool))
        else:
            t = grpcclient.InferInput(name, [1], "BYTES")
            t.set_data_from_numpy(np.array([value.encode("utf-8")], dtype=np.object_))
        inputs.append(t)
    return inputs


class _RawStream:
    """tritonclient's own stream (no hotpath client): what any gRPC client of the endpoint sees."""

    def __init__(self, url):
        self.responses = queue.Queue()
        self.client = grpcclient.InferenceServerClient(url)
        self.client.start_stream(callback=lambda result=None, error=None: self.responses.put((result, error)))

    def send(self, inputs, request_id=""):
        self.client.async_stream_infer(MODEL, inputs, request_id=request_id, enable_empty_final_response=True)

    def finals(self, count, timeout=300):
        """The final response or error of `count` requests: [(request id, error message or None)]."""
        out = []
        while len(out) < count:
            result, error = self.responses.get(timeout=timeout)
            if error is not None:
                out.append((None, error.message()))
            elif result.get_response().parameters["triton_final_response"].bool_param:
                out.append((result.get_response().id, None))
        return out

    def close(self):
        self.client.stop_stream(cancel_requests=True)
        self.client.close()


def test_bad_requests_are_invalid_argument_with_their_reason_and_the_server_keeps_serving(generation_triton, client):
    for name, (fields, reason) in BAD_REQUESTS.items():
        stream = _RawStream(generation_triton.grpc_url)   # a stream each: nothing of one case reaches the next
        try:
            stream.send(_raw_inputs({"exclude_input_in_output": True, **fields}), request_id=name)
            (_, error), = stream.finals(1)
        finally:
            stream.close()
        assert error is not None and error.startswith("text_generation: [INVALID_ARGUMENT] "), (name, error)
        assert reason in error, (name, error)
        assert "Traceback" not in error and ".py" not in error, (name, error)
    # Over HTTP the same refusals are 400s (Triton maps INVALID_ARG).
    status, body = _post(generation_triton.http_url, "generate",
                         {"text_input": "hi", "sampling_parameters": '{"max_tokens": -3}'})
    assert status == 400 and "max_tokens must be" in body, (status, body)
    with pytest.raises(InvalidInputError, match="max_tokens must be within 1..512"):
        client.generate("Say hi.", max_tokens=100_000)
    assert client.generate("Hi", max_tokens=2).completion_tokens >= 1   # still serving


PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}


def _constrained(http_url, content: str, structured: dict, max_tokens: int = 48) -> tuple[int, dict | str]:
    """A greedy chat request with sampling_parameters.structured_outputs in Triton's vLLM-backend shape (the
    StructuredOutputsParams fields as JSON text): (status, answer or error body)."""
    sampling = {"max_tokens": max_tokens, "temperature": 0, "structured_outputs": json.dumps(structured)}
    status, body = _post(http_url, "generate", {
        "messages": json.dumps([{"role": "user", "content": content}]), "exclude_input_in_output": True,
        "return_finish_reason": True, "sampling_parameters": json.dumps(sampling)})
    return status, json.loads(body) if status == 200 else body


def test_structured_outputs_hold_greedy_output_to_a_json_schema_and_a_choice(generation_triton):
    status, answer = _constrained(generation_triton.http_url, "Describe a person named Alice who is 30 years old.",
                                  {"json": PERSON})
    assert status == 200, answer
    person = json.loads(answer["text_output"])   # whole JSON: the grammar also decided where it ends
    assert answer["finish_reason"] == "stop", answer
    assert set(person) >= {"name", "age"} and isinstance(person["name"], str), person
    assert isinstance(person["age"], int) and not isinstance(person["age"], bool), person
    choices = ["Positive", "Negative"]
    status, answer = _constrained(generation_triton.http_url, "Is the review 'I love this movie' positive or negative?",
                                  {"choice": choices}, max_tokens=8)
    assert status == 200 and answer["text_output"] in choices, answer


def test_a_schema_the_grammar_backend_refuses_is_invalid_argument_and_the_server_keeps_serving(generation_triton,
                                                                                               client):
    # Well-formed for hotpath's checks (an object within the bounds), refused by vLLM's grammar backend.
    status, body = _constrained(generation_triton.http_url, "Hi", {"json": {"type": "frobnicate"}}, max_tokens=4)
    assert status == 400 and "vLLM refused the request" in body, (status, body)
    assert "Traceback" not in body and ".py" not in body, body
    status, body = _constrained(generation_triton.http_url, "Hi", {"regex": "("}, max_tokens=4)
    assert status == 400 and "vLLM refused the request" in body and "not closed" in body, (status, body)
    # Under vLLM's "auto" backend this one passed the front-end check (guidance) and then failed to compile in an
    # xgrammar engine core, or was answered by a guidance one: the engine names xgrammar, which refuses it up front.
    impossible = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 1}}}
    status, body = _constrained(generation_triton.http_url, "Hi", {"json": impossible}, max_tokens=4)
    assert status == 400 and "minimum greater than maximum" in body, (status, body)
    # Refused by hotpath before anything is queued, naming the key.
    status, body = _constrained(generation_triton.http_url, "Hi", {"json": PERSON, "regex": "a"}, max_tokens=4)
    assert status == 400 and "structured_outputs must set exactly one of" in body, (status, body)
    assert client.generate("Hi", max_tokens=2).completion_tokens >= 1   # still serving


def test_cli_streams_to_the_terminal(generation_url, reference):
    out = subprocess.run([sys.executable, "-m", "hotpath", "generate", "--url", generation_url,
                          "--max-tokens", str(MAX_TOKENS), PROMPTS[0]], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == reference[PROMPTS[0]][2].strip()
    assert "first token" in out.stderr and "completion" in out.stderr
    bad = subprocess.run([sys.executable, "-m", "hotpath", "generate", "--url", generation_url, "--max-tokens", "0",
                          "hi"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 65 and "max_tokens" in bad.stderr and "Traceback" not in bad.stderr, bad.stderr


def _metric(server, name: str, **labels) -> float:
    """Sum of a metric's samples on the server's metrics port whose labels include `labels`."""
    with urllib.request.urlopen(server.metrics_url) as r:
        text = r.read().decode()
    want = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name + "{") and all(w in line for w in want))


def _published(server, name: str, above: float, **labels) -> float:
    """The metric once the engine's stats (about every second) have pushed it past `above`."""
    value = _metric(server, name, **labels)
    for _ in range(100):
        if value > above:
            return value
        time.sleep(0.1)
        value = _metric(server, name, **labels)
    return value


def test_follow_up_turns_reuse_the_conversation_and_keep_greedy_output(generation_triton, generation_url, hf,
                                                                       reference):
    """Turn 2 of two chats (history = turn 1 and its reply): the same text as transformers on the whole
    conversation, with the earlier turns' KV blocks taken from vLLM's prefix cache."""
    hits = _metric(generation_triton, "hotpath_generation_prefix_cache_lookups_total", model=MODEL, result="hit")
    reused = _metric(generation_triton, "hotpath_generation_prefix_cache_tokens_total", model=MODEL)
    follow = "Now say it again in fewer words."
    with GenerationClient(generation_url, timeout_s=300) as c:
        for prompt in PROMPTS[:2]:
            first = c.generate(prompt, max_tokens=MAX_TOKENS)
            _check(first, reference[prompt])
            second = c.generate(follow, max_tokens=16, history=[prompt, first.text])
            tokens, prompt_tokens, text, _ = _greedy(hf, [{"role": "user", "content": prompt},
                                                          {"role": "assistant", "content": first.text},
                                                          {"role": "user", "content": follow}], 16)
            assert (second.text, second.prompt_tokens, second.completion_tokens) == (text, prompt_tokens, tokens)
    assert _published(generation_triton, "hotpath_generation_prefix_cache_lookups_total", hits + 1,
                      model=MODEL, result="hit") >= hits + 2
    # Each follow-up reused at least its first turn's prompt (whole 32-token blocks).
    least = sum(reference[p][1] - 32 for p in PROMPTS[:2])
    assert _published(generation_triton, "hotpath_generation_prefix_cache_tokens_total", reused + least - 1,
                      model=MODEL) >= reused + least


def test_generation_metrics_are_published(generation_triton, client):
    capacity = _metric(generation_triton, "hotpath_generation_kv_capacity_tokens", model=MODEL)
    assert capacity >= 1024   # the KV space holds at least one max_model_len sequence (vLLM's own check)
    ttft = _metric(generation_triton, "hotpath_generation_ttft_seconds_count", model=MODEL)
    itl = _metric(generation_triton, "hotpath_generation_itl_seconds_count", model=MODEL)
    result = client.generate(PROMPTS[3], max_tokens=8)
    assert _published(generation_triton, "hotpath_generation_ttft_seconds_count", ttft, model=MODEL) == ttft + 1
    assert _published(generation_triton, "hotpath_generation_itl_seconds_count", itl + result.completion_tokens - 2,
                      model=MODEL) == itl + result.completion_tokens - 1
    assert _metric(generation_triton, "hotpath_generation_ttft_seconds_bucket", model=MODEL, le="+Inf") >= ttft + 1
    for name in ("kv_used_tokens", "running", "waiting", "preemptions_total"):
        assert _metric(generation_triton, f"hotpath_generation_{name}", model=MODEL) >= 0
    assert _metric(generation_triton, "hotpath_generation_kv_used_tokens", model=MODEL) <= capacity


def test_streams_beyond_the_kv_space_are_preempted_and_keep_their_output(generation_triton, generation_url):
    """12 streams of ~215 tokens in a KV space of ~1,400: vLLM preempts (and later recomputes) some; every
    stream still ends with the text it gets alone."""
    prompts = [f"Tell a very long story about ship number {i}." for i in range(4)]
    with GenerationClient(generation_url, timeout_s=600) as c:
        alone = {p: c.generate(p, max_tokens=200).text for p in prompts}
    before = _metric(generation_triton, "hotpath_generation_preemptions_total", model=MODEL)
    results, errors = {}, []

    def run(i, prompt):
        try:
            with GenerationClient(generation_url, timeout_s=600) as c:
                results[i] = c.generate(prompt, max_tokens=200)
        except Exception as exc:  # surfaced below with the prompt
            errors.append((prompt, exc))

    jobs = prompts * 3
    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i, prompt in enumerate(jobs):
        assert results[i].text == alone[prompt], prompt
    assert _published(generation_triton, "hotpath_generation_preemptions_total", before, model=MODEL) > before


def _long(i):
    # A chat turn: as raw text a request ending in "." may get the end-of-turn token first.
    chat = json.dumps([{"role": "user", "content": f"Tell a very long story about ship number {i}."}])
    return _raw_inputs({"messages": chat, "stream": True, "exclude_input_in_output": True,
                        "sampling_parameters": '{"max_tokens": 500, "min_tokens": 500}'})   # never ends early


SMALL = {"max_num_seqs": 2, "max_queue": 2}   # an admission limit of 4: cheap to fill on 2 cores


@pytest.fixture(scope="module")
def small_generation(built_repository, tmp_path_factory):
    """text_generation alone with an admission limit of 4, under explicit model control (the lifetime test
    unloads, reloads and finally kills this server: it runs last)."""
    from conftest import GENERATION_TEST_PARAMETERS, _serve, generation_repository

    server = _serve(generation_repository(tmp_path_factory.mktemp("small"), built_repository,
                                          **GENERATION_TEST_PARAMETERS, **SMALL),
                    model_control="explicit", log=lambda m: None)
    server.start(timeout=600)
    yield server
    server.stop()


def _in_engine(server) -> float:
    return _metric(server, "hotpath_generation_running") + _metric(server, "hotpath_generation_waiting")


def _errors(streams) -> list:
    """Error messages the streams received so far (leaves their other responses queued)."""
    out = []
    for s in streams:
        pending = []
        while not s.responses.empty():
            pending.append(s.responses.get())
        out.append([e.message()[:160] for _, e in pending if e is not None])
        for item in pending:
            s.responses.put(item)
    return out


def _idle(server, limit_s: float = 120) -> bool:
    """The engine runs and queues nothing (its stats, published about every second, say so)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if _in_engine(server) == 0:
            return True
        time.sleep(0.5)
    return False


def test_a_full_admission_queue_refuses_at_once_and_cancelled_streams_free_their_sequences(small_generation):
    """max_num_seqs + max_queue requests in flight: the next is UNAVAILABLE at once (never a hang);
    cancelling the streams aborts their sequences in vLLM (the engine goes idle long before 4 x 500 tokens
    could have been generated), and as many requests as the limit are then accepted again."""
    limit = SMALL["max_num_seqs"] + SMALL["max_queue"]
    holders = [_RawStream(small_generation.grpc_url) for _ in range(limit)]
    try:
        for i, h in enumerate(holders):
            h.send(_long(i), request_id=str(i))
        # Every holder in the engine before the extra is sent: max_num_seqs of them generating (whichever the
        # engine took first: not necessarily the first sent), the others queued.
        deadline = time.monotonic() + 300
        while (_in_engine(small_generation) < limit or sum(not h.responses.empty() for h in holders) <
               SMALL["max_num_seqs"]) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _in_engine(small_generation) == limit, (_in_engine(small_generation), _errors(holders))
        assert not any(_errors(holders)), _errors(holders)
        extra = _RawStream(small_generation.grpc_url)
        try:
            extra.send(_long("extra"))
            (_, error), = extra.finals(1, timeout=120)
        finally:
            extra.close()
        assert error is not None and error.startswith("text_generation: [UNAVAILABLE] admission queue full"), \
            (error, _in_engine(small_generation), _errors(holders))
    finally:
        for h in holders:
            h.close()   # cancels each request: its sequence is aborted
    assert _idle(small_generation), "cancelled streams kept their sequences running or queued in vLLM"
    # Had the cancelled requests stayed counted in flight, these would be refused as queue full for good
    # (the stub lets go of each once the engine's last reply for it arrived: a moment after the engine idles).
    deadline = time.monotonic() + 60
    while True:
        again = [_RawStream(small_generation.grpc_url) for _ in range(limit)]
        try:
            for i, h in enumerate(again):
                h.send(_short(i), request_id=f"again-{i}")
            outcomes = [h.finals(1, timeout=300)[0] for h in again]
        finally:
            for h in again:
                h.close()
        if all(error is None for _, error in outcomes) or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    assert all(error is None for _, error in outcomes), outcomes


def _short(i):
    return _raw_inputs({"messages": json.dumps([{"role": "user", "content": f"Say OK {i}."}]), "stream": True,
                        "exclude_input_in_output": True, "sampling_parameters": '{"max_tokens": 4}'})


# ---- the engine never outlives its model ----------------------------------------------------------------

def _engine_processes(stub_pid):
    """The engine process of a stub and its descendants (vLLM's EngineCore and worker)."""
    try:
        return [p for p in psutil.Process(stub_pid).children(recursive=True) if "hotpath-stub-watcher" not in
                " ".join(p.cmdline())]
    except psutil.NoSuchProcess:
        return []


def _gone(procs, limit_s):
    deadline = time.monotonic() + limit_s
    alive = procs
    while time.monotonic() < deadline:
        alive = [p for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.2)
    return [f"{p.pid} {' '.join(p.cmdline())[:80]}" for p in alive]


def test_a_hung_engine_shutdown_still_ends_the_engine_and_its_children_within_its_grace():
    """engine_process.guard_exit, in the vLLM environment's Python: a shutdown that never returns (here a
    sleep) and a child that never exits (vLLM's EngineCore stand-in) are both gone after the grace."""
    from hotpath.paths import ROOT
    from hotpath.runtime.llm.engine_client import ENGINE_SCRIPT
    from hotpath.runtime.llm.settings import EngineSettings, engine_python

    python = engine_python(EngineSettings(), ROOT)
    script = (f"import sys, subprocess, time; sys.path.insert(0, {str(ENGINE_SCRIPT.parent)!r}); "
              "import engine_process as e; child = subprocess.Popen(['sleep', '600']); "
              "print(child.pid, file=sys.stderr, flush=True); e.guard_exit(1.0); time.sleep(600)")
    proc = subprocess.Popen([str(python), "-c", script], stderr=subprocess.PIPE, text=True)
    child = psutil.Process(int(proc.stderr.readline()))
    try:
        assert proc.wait(60) == 1
        assert not _gone([child], 10), "the engine's child outlived the exit guard"
    finally:
        for leftover in (proc, child):
            try:
                leftover.kill()
            except (OSError, psutil.Error):
                pass


def test_engine_processes_go_with_an_unload_a_killed_stub_and_a_killed_server(small_generation):
    from hotpath.server.admin import admin_headers
    from hotpath.server.watchdog import Watchdog

    server = small_generation
    try:
        control = grpcclient.InferenceServerClient(server.grpc_url)

        def engine():
            deadline = time.monotonic() + 600   # a load: the stub, then vLLM's processes
            while time.monotonic() < deadline:
                stubs = stub_pids(server.process.pid, MODEL)
                procs = _engine_processes(stubs[0]) if len(stubs) == 1 else []
                if len(procs) >= 2:   # the engine process and vLLM's EngineCore (and worker)
                    return stubs[0], procs
                time.sleep(0.5)
            raise AssertionError(f"no text_generation stub with its engine: {stub_pids(server.process.pid, MODEL)}")

        # 1. Unload: finalize closes the engine's pipe.
        _, procs = engine()
        control.unload_model(MODEL, headers=admin_headers())
        assert not _gone(procs, 60), f"engine processes outlived the unload; the server's log:\n{server.log_tail(60)}"
        # 2. The stub SIGKILLed: its pipe closes with it, and the watchdog brings the model back. Killed idle: a
        # stub killed in the middle of a response send can abort tritonserver 2.51 itself (boost::interprocess::
        # lock_exception in libtriton_python, seen here; triton-inference-server/server#8882), which the
        # container's supervisor restarts.
        control.load_model(MODEL, headers=admin_headers())
        stub, procs = engine()
        with GenerationClient(server.grpc_url, timeout_s=300) as c:
            assert c.generate("Say OK.", max_tokens=4).finish_reason in ("length", "stop")
        guard = Watchdog(server, census_s=0.2, probe_s=2.0, restart_server=False, log=lambda m: None).start()
        try:
            psutil.Process(stub).kill()
            assert not _gone(procs, 60), "engine processes outlived their SIGKILLed stub"
            deadline = time.monotonic() + 600   # a reload of vLLM
            while not (guard.recoveries and guard.recoveries[-1].recovered_at) and time.monotonic() < deadline:
                time.sleep(0.5)
        finally:
            guard.stop()
        assert [r.models for r in guard.recoveries] == [[MODEL]] and guard.recoveries[0].recovered_at, \
            guard.recoveries
        stub, procs = engine()
        with GenerationClient(server.grpc_url, timeout_s=300) as c:
            assert c.generate("Say OK.", max_tokens=4).finish_reason in ("length", "stop")
        # 3. tritonserver SIGKILLed: the stub's watcher kills the stub, the engine follows.
        server.process.send_signal(signal.SIGKILL)
        server.process.wait(30)
        assert not _gone([psutil.Process(stub), *procs], 60), "the stub or its engine outlived tritonserver"
    finally:
        server.stop()
