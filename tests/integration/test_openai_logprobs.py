"""n, logprobs / top_logprobs and /tokenize, /detokenize on the OpenAI-compatible API, against the real stack:
tritonserver serving text_generation (vLLM) and the API process, called with the openai SDK and raw HTTP.

Log-probabilities are vLLM's own values carried through the engine process, the Triton stub and the API;
these tests check they are consistent with the text they came with (greedy: the chosen token is the most
likely one; the tokens spell the content), that choices are indexed and counted, that a stream
reassembles to the whole answer, that bad values are 400 naming the field, and that /tokenize and
/detokenize equal the model's own tokenizer.
"""

from __future__ import annotations

import http.client
import itertools
import json
import random
import urllib.request

import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer
from transformers import AutoTokenizer

from hotpath.exporters.parity_corpus import multilingual_corpus
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.openai_door import openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Scopes, Tenant, new_token
from hotpath.server.ports import free_ports

GEN = "text_generation"
PROMPT = [{"role": "system", "content": "You answer in one short sentence."},
          {"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def export(generation_triton):
    return generation_triton.repository / GEN / "1" / "export"


@pytest.fixture(scope="module")
def tokenizer(export):
    return Tokenizer.from_file(str(export / "tokenizer.json"))


def _post(chat_api, path: str, body) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(chat_api.host, chat_api.port, timeout=120)
    try:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        conn.request("POST", path, raw, {"content-type": "application/json"})
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def _check_chat_entry(entry, top: int) -> None:
    assert entry.logprob <= 0 and entry.bytes == list(entry.token.encode("utf-8"))
    assert len(entry.top_logprobs) == top
    values = [t.logprob for t in entry.top_logprobs]
    assert values == sorted(values, reverse=True)
    if top:   # greedy: the chosen token is the most likely one, and it is the first of the top
        assert values[0] >= entry.logprob - 1e-5
        assert entry.top_logprobs[0].token == entry.token
        assert abs(values[0] - entry.logprob) < 1e-5


# -- chat: logprobs / top_logprobs

def test_chat_logprobs_are_consistent_with_the_text(chat_sdk):
    answer = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=16, logprobs=True,
                                         top_logprobs=5)
    choice = answer.choices[0]
    content = choice.logprobs.content
    assert content and "".join(e.token for e in content) == choice.message.content
    # the end-of-sequence token is counted but, as the text leaves it out, has no entry (OpenAI's shape)
    assert choice.finish_reason == "stop" and len(content) == answer.usage.completion_tokens - 1
    for entry in content:
        _check_chat_entry(entry, 5)
    # the top's alternatives are other tokens, with their own bytes
    assert all(len({t.token for t in e.top_logprobs}) >= 4 for e in content)


def test_chat_top_logprobs_zero_and_no_logprobs(chat_sdk):
    chosen = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=6, logprobs=True)
    assert all(e.top_logprobs == [] for e in chosen.choices[0].logprobs.content)
    plain = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=6)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == chosen.choices[0].message.content
    # the chosen token's logprob does not depend on how many alternatives were asked for
    top = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=6, logprobs=True,
                                      top_logprobs=20)
    assert [e.token for e in top.choices[0].logprobs.content] == [e.token for e in chosen.choices[0].logprobs.content]
    for a, b in zip(top.choices[0].logprobs.content, chosen.choices[0].logprobs.content):
        assert abs(a.logprob - b.logprob) < 1e-4 and len(a.top_logprobs) == 20


# -- n choices

def _output_tokens(triton) -> float:
    """hotpath_usage_output_tokens_total of text_generation, every tenant and load together (Triton's metrics)."""
    with urllib.request.urlopen(triton.metrics_url, timeout=10) as r:
        text = r.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "hotpath_usage_output_tokens_total" and sample.labels.get("model") == GEN)


def test_n_choices_are_indexed_and_all_counted(chat_sdk, generation_triton):
    before = _output_tokens(generation_triton)
    answer = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=1.0, seed=7, max_tokens=12, n=3,
                                         logprobs=True)
    assert [c.index for c in answer.choices] == [0, 1, 2]
    lengths = [len(c.logprobs.content) for c in answer.choices]
    assert all(c.message.content for c in answer.choices)
    assert all("".join(e.token for e in c.logprobs.content) == c.message.content for c in answer.choices)
    ends = sum(c.finish_reason == "stop" for c in answer.choices)   # end-of-sequence tokens: counted, no entry
    assert answer.usage.completion_tokens == sum(lengths) + ends
    assert _output_tokens(generation_triton) - before == answer.usage.completion_tokens   # metered: every choice
    assert len({c.message.content for c in answer.choices}) > 1   # sampled: not three copies (seed 7)
    greedy = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=8, n=2)
    assert greedy.choices[0].message.content == greedy.choices[1].message.content
    assert greedy.usage.completion_tokens == 2 * chat_sdk.chat.completions.create(
        model=GEN, messages=PROMPT, temperature=0, max_tokens=8).usage.completion_tokens


def _reassemble_chat(chunks, n: int):
    texts, entries, reasons = [""] * n, [[] for _ in range(n)], [None] * n
    for chunk in chunks:
        for c in chunk.choices:
            texts[c.index] += c.delta.content or ""
            if c.logprobs is not None:
                entries[c.index] += c.logprobs.content
            reasons[c.index] = c.finish_reason or reasons[c.index]
    return texts, entries, reasons


def test_streamed_n2_reassembles_to_the_whole_answer(chat_sdk):
    args = dict(model=GEN, messages=PROMPT, temperature=0, max_tokens=14, n=2, logprobs=True, top_logprobs=2)
    whole = chat_sdk.chat.completions.create(**args)
    chunks = list(chat_sdk.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}))
    texts, entries, reasons = _reassemble_chat(chunks, 2)
    assert {c.index for chunk in chunks for c in chunk.choices} == {0, 1}
    assert texts == [c.message.content for c in whole.choices]
    assert reasons == [c.finish_reason for c in whole.choices]
    for got, want in zip(entries, (c.logprobs.content for c in whole.choices)):
        assert [e.token for e in got] == [e.token for e in want]
        assert max(abs(a.logprob - b.logprob) for a, b in zip(got, want)) < 1e-4
        assert [[t.token for t in e.top_logprobs] for e in got] == [[t.token for t in e.top_logprobs] for e in want]
    ends = reasons.count("stop")
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens == sum(len(e) for e in entries) + ends
    # each choice's first chunk names the role
    firsts = {}
    for chunk in chunks:
        for c in chunk.choices:
            firsts.setdefault(c.index, c.delta.role)
    assert firsts == {0: "assistant", 1: "assistant"}


# -- completions: the legacy logprobs shape

def test_completions_logprobs_legacy_shape(chat_sdk):
    answer = chat_sdk.completions.create(model=GEN, prompt="The capital of France is", temperature=0, max_tokens=10,
                                    logprobs=3)
    choice = answer.choices[0]
    lp = choice.logprobs
    assert "".join(lp.tokens) == choice.text
    assert len(lp.tokens) == answer.usage.completion_tokens - (choice.finish_reason == "stop")
    assert len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == len(lp.tokens)
    offset = 0
    for token, logprob, top, at in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs, lp.text_offset):
        assert at == offset and logprob <= 0
        offset += len(token)
        assert 3 <= len(top) <= 4 and token in top
        assert max(top.values()) == pytest.approx(logprob, abs=1e-5)   # greedy: the chosen token is the best


def test_completions_streamed_n2_equal_whole(chat_sdk):
    args = dict(model=GEN, prompt="Once upon a time", temperature=0, max_tokens=10, n=2, logprobs=2)
    whole = chat_sdk.completions.create(**args)
    texts, tokens, offsets = ["", ""], [[], []], [[], []]
    for chunk in chat_sdk.completions.create(**args, stream=True):
        for c in chunk.choices:
            texts[c.index] += c.text
            if c.logprobs is not None:
                tokens[c.index] += c.logprobs.tokens
                offsets[c.index] += c.logprobs.text_offset
    assert texts == [c.text for c in whole.choices]
    assert tokens == [c.logprobs.tokens for c in whole.choices]
    assert offsets == [c.logprobs.text_offset for c in whole.choices]
    ends = sum(c.finish_reason == "stop" for c in whole.choices)
    assert whole.usage.completion_tokens == sum(len(t) for t in tokens) + ends


# -- bad values: 400 naming the field

CHAT_BAD = [("n", v) for v in (0, 9, -1, 100, "2", 2.5, True, [1])] + \
    [("logprobs", v) for v in ("yes", 1, 0.0, [True])] + \
    [("top_logprobs", v) for v in (21, -1, "3", 1.5, 2 ** 40)]
COMPLETION_BAD = [("n", v) for v in (0, 9, "1")] + [("logprobs", v) for v in (6, -1, True, "2", 2.0, 2 ** 64)] + \
    [("top_logprobs", 2)]


def _corpus(seed: int = 5):
    """Every bad value alone, then random pairs of a bad value with good ones (the bad field is named)."""
    rng = random.Random(seed)
    good = {"n": [1, 2], "logprobs": [True, False], "top_logprobs": [0, 3], "temperature": [0, 0.7],
            "max_tokens": [4]}
    cases = [({field: value}, field) for field, value in CHAT_BAD]
    for field, value in rng.sample(CHAT_BAD, 8):
        others = {k: rng.choice(v) for k, v in good.items() if k != field}
        others["logprobs"] = True if field == "top_logprobs" else others.get("logprobs", True)
        cases.append(({**others, field: value}, field))
    return cases


def test_bad_values_are_400_naming_the_field(chat_api):
    for extra, field in _corpus():
        status, body = _post(chat_api, "/v1/chat/completions", {"model": GEN, "messages": PROMPT, **extra})
        assert status == 400 and body["error"]["param"] == field, (extra, body)
        assert "Traceback" not in body["error"]["message"]
    for field, value in COMPLETION_BAD:
        status, body = _post(chat_api, "/v1/completions", {"model": GEN, "prompt": "Hi", field: value})
        assert status == 400 and body["error"]["param"] == field, (field, value, body)
    # top_logprobs without logprobs: OpenAI's rule
    status, body = _post(chat_api, "/v1/chat/completions", {"model": GEN, "messages": PROMPT, "top_logprobs": 3})
    assert status == 400 and body["error"]["param"] == "top_logprobs"
    # the SDK types them
    with pytest.raises(openai.BadRequestError) as err:
        openai.OpenAI(base_url=chat_api.base_url, api_key="x", max_retries=0).chat.completions.create(
            model=GEN, messages=PROMPT, n=9)
    assert err.value.body["param"] == "n"


# -- /tokenize and /detokenize

ODD = ["", " ", "\x00", "\ufeff", "a\u0301e\u0308", "👩‍👩‍👧‍👦🏳️‍🌈", "مرحبا بالعالم", "漢字かなカナ", "\t\n\r\v\f",
       "<|im_start|>user\nhi<|im_end|>", "ﬁ ﬂ ＡＢＣ", "\u200b\u200d\u2060", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "x" * 5,
       "The quick brown fox jumps over the lazy dog. " * 4000]


def _unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def test_tokenize_detokenize_equal_the_tokenizer(chat_api, tokenizer, generation_triton):
    texts = ODD + [t for t in multilingual_corpus(per_locale=1, random_strings=40, seed=11)[:120] if _unicode(t)]
    for text in texts:
        status, body = _post(chat_api, "/tokenize", {"model": GEN, "prompt": text})
        assert status == 200, body
        want = tokenizer.encode(text).ids
        assert body["tokens"] == want and body["count"] == len(want) and body["max_model_len"] == 1024
        status, back = _post(chat_api, "/detokenize", {"model": GEN, "tokens": want})
        assert status == 200 and back["prompt"] == tokenizer.decode(want, skip_special_tokens=False)
        if tokenizer.decode(want, skip_special_tokens=False) == text:   # byte-level BPE: a round trip
            assert back["prompt"] == text
    assert len(texts[len(ODD) - 1]) > 100_000
    status, body = _post(chat_api, "/tokenize", {"model": GEN, "prompt": "Hi", "return_token_strs": True})
    assert body["token_strs"] == [tokenizer.id_to_token(i) for i in body["tokens"]]
    status, body = _post(chat_api, "/detokenize", {"model": GEN, "tokens": []})
    assert status == 200 and body == {"prompt": ""}


def test_tokenize_chat_equals_the_template_and_the_engine(chat_api, chat_sdk, export):
    hf = AutoTokenizer.from_pretrained(str(export))
    conversations = [PROMPT, [{"role": "user", "content": "Héllo 👋 <b>"}],
                     [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                      {"role": "user", "content": "c"}]]
    for messages in conversations:
        for add in (True, False):
            status, body = _post(chat_api, "/tokenize", {"model": GEN, "messages": messages,
                                                    "add_generation_prompt": add})
            assert status == 200, body
            text = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=add)
            assert body["tokens"] == hf.encode(text, add_special_tokens=False)
    # what the engine counted for the same chat
    status, body = _post(chat_api, "/tokenize", {"model": GEN, "messages": PROMPT})
    used = chat_sdk.chat.completions.create(model=GEN, messages=PROMPT, temperature=0, max_tokens=1)
    assert used.usage.prompt_tokens == body["count"]
    # continue_final_message: the rendered chat cut after the final message
    status, body = _post(chat_api, "/tokenize", {"model": GEN, "add_generation_prompt": False,
                                            "continue_final_message": True,
                                            "messages": [{"role": "user", "content": "Hi"},
                                                         {"role": "assistant", "content": "Hel"}]})
    assert status == 200 and hf.decode(body["tokens"]).endswith("<|im_start|>assistant\nHel")


@pytest.mark.parametrize("body, param", [
    ({"model": GEN, "tokens": [49152]}, "tokens"), ({"model": GEN, "tokens": [1, 2 ** 31]}, "tokens"),
    ({"model": GEN, "tokens": [2 ** 32]}, "tokens[0]"), ({"model": GEN, "tokens": [2 ** 64]}, "tokens[0]"),
    ({"model": GEN, "tokens": [-1]}, "tokens[0]"), ({"model": GEN, "tokens": [1.5]}, "tokens[0]"),
    ({"model": GEN, "tokens": ["1"]}, "tokens[0]"), ({"model": GEN, "tokens": [True]}, "tokens[0]"),
    ({"model": GEN, "tokens": "12"}, "tokens"), ({"model": GEN}, "tokens"), ({"tokens": [1]}, "model"),
])
def test_detokenize_bad_ids_are_400_naming_the_field(chat_api, body, param):
    status, answer = _post(chat_api, "/detokenize", body)
    assert status == 400 and answer["error"]["param"] == param, answer


@pytest.mark.parametrize("body, param", [
    ({"model": GEN, "prompt": 3}, "prompt"), ({"model": GEN, "prompt": ["a"]}, "prompt"),
    ({"model": GEN, "prompt": "a", "add_special_tokens": "yes"}, "add_special_tokens"),
    ({"model": GEN, "messages": PROMPT, "add_generation_prompt": True, "continue_final_message": True},
     "continue_final_message"),
    ({"model": GEN, "messages": []}, "messages"), ({"model": GEN, "messages": PROMPT, "tools": []}, "tools"),
    ({"model": GEN, "prompt": "a", "extra": 1}, "extra"),
])
def test_tokenize_bad_bodies_are_400_naming_the_field(chat_api, body, param):
    status, answer = _post(chat_api, "/tokenize", body)
    assert status == 400 and answer["error"]["param"] == param, answer


def test_lone_surrogates_are_refused_as_json(chat_api):
    """A lone surrogate escape is not Unicode text: the API's JSON parser refuses the body (400)."""
    for body in (b'{"model": "text_generation", "prompt": "a\\ud800"}',
                 b'{"model": "text_generation", "messages": [{"role": "user", "content": "\\udfff"}]}'):
        status, answer = _post(chat_api, "/tokenize", body)
        assert status == 400 and answer["error"]["code"] == "invalid_json", answer


def test_tokenize_unknown_model_is_404(chat_api):
    for path, body in (("/tokenize", {"model": "nope", "prompt": "a"}), ("/detokenize", {"model": "nope", "tokens": []})):
        status, answer = _post(chat_api, path, body)
        assert status == 404 and answer["error"]["code"] == "model_not_found", answer


def test_gateway_tokenize_scopes_and_choices_charged(generation_triton, chat_api):
    granted, other = new_token(), new_token()
    tenants = (Tenant("granted", granted, scopes=Scopes(endpoints=(GEN,)), tokens_per_min=100),
               Tenant("other", other, scopes=Scopes(endpoints=("text_embedding",))))
    grpc_port, http_port, openai_port = free_ports(3)
    settings = TenantGatewaySettings(grpc_port, http_port, (generation_triton.grpc_url,),
                                     (generation_triton.http_url,), tenants, openai_port=openai_port,
                                     openai_upstreams=(f"{chat_api.host}:{chat_api.port}",),
                                     openai=openai_config(generation_triton.repository))
    with TenantGateway(settings):
        for token, want in ((granted, 200), (other, 403)):
            for path, body in (("/tokenize", {"model": GEN, "prompt": "Hello"}),
                               ("/detokenize", {"model": GEN, "tokens": [19556]})):
                conn = http.client.HTTPConnection("127.0.0.1", openai_port, timeout=60)
                try:
                    conn.request("POST", path, json.dumps(body), {"content-type": "application/json",
                                                                  "authorization": f"Bearer {token}"})
                    response = conn.getresponse()
                    answer = json.loads(response.read())
                finally:
                    conn.close()
                assert response.status == want, (path, answer)
                if want == 403:
                    assert answer["error"]["param"] == "model"
                elif path == "/tokenize":
                    assert answer["tokens"] == [19556]
                else:
                    assert answer["prompt"] == "Hello"
        # a generation is charged max_tokens for every choice: 8 x 20 is over a budget of 100 a minute, 20 is not
        with openai.OpenAI(base_url=f"http://127.0.0.1:{openai_port}/v1", api_key=granted, max_retries=0) as client:
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(model=GEN, messages=PROMPT, max_tokens=20, n=8, temperature=0.5)
            assert "160 tokens asked" in err.value.body["message"]
            answer = client.chat.completions.create(model=GEN, messages=PROMPT, max_tokens=20, n=1, temperature=0)
            assert answer.choices[0].message.content


def test_corpus_covers_each_field():
    assert {f for _, f in _corpus()} == {"n", "logprobs", "top_logprobs"}
    assert len(list(itertools.chain(CHAT_BAD, COMPLETION_BAD))) >= 25
