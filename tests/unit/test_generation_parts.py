"""The generation runtime's parts that need no model: request parameters and inputs, prompts, the text
stream, the chat template, sampling, the KV pool view, the prefix cache, prompt-lookup drafts. The engine
itself, on a tiny Llama exported through the real export path, is tests/tools/test_generation.py."""

import numpy as np
import pytest

from hotpath.runtime.generation.chat import render_chat
from hotpath.runtime.generation.params import InputError, Limits, decode_prompt, parse_params, request_params
from hotpath.runtime.generation.sampling import choose, make_rng
from hotpath.runtime.generation.text_stream import TextStream
from tests import tinyllm


def test_text_stream_waits_for_whole_characters_and_holds_stop_prefixes():
    tok = tinyllm.byte_tokenizer()
    stream = TextStream(tok)
    pieces = [stream.push(i)[0] for i in tok.encode("é🚀").ids]  # 2 + 4 byte tokens
    assert pieces == ["", "é", "", "", "", "🚀"]
    stream = TextStream(tok, stop=("END",))
    out = [stream.push(i) for i in tok.encode("abEN").ids]
    assert "".join(t for t, _ in out) == "ab" and not any(s for _, s in out)  # "EN" held back
    assert stream.push(tok.encode("x").ids[0]) == ("ENx", False)  # ruled out: released
    text, stopped = stream.push(tok.encode("E").ids[0])[0], False
    for i in tok.encode("ND tail").ids:
        piece, stopped = stream.push(i)
        text += piece
        if stopped:
            break
    assert stopped and text == ""


def test_chat_template_renders_like_transformers():
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tinyllm.byte_tokenizer(), chat_template=tinyllm.CHAT_TEMPLATE)
    messages = [{"role": "user", "content": "Низкая задержка 🚀"}]
    want = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert render_chat(tinyllm.CHAT_TEMPLATE, "Низкая задержка 🚀") == want


@pytest.mark.parametrize("kwargs,message", [
    ({"max_tokens": 0}, "MAX_TOKENS"), ({"max_tokens": -5}, "MAX_TOKENS"), ({"max_tokens": 10**9}, "MAX_TOKENS"),
    ({"temperature": -0.1}, "TEMPERATURE"), ({"temperature": float("nan")}, "TEMPERATURE"),
    ({"top_p": 0.0}, "TOP_P"), ({"top_p": 1.5}, "TOP_P"), ({"seed": -1}, "SEED"),
    ({"stop": [b"\xff"]}, "STOP"), ({"stop": [b""]}, "STOP"),
])
def test_bad_parameters_name_the_input(kwargs, message):
    with pytest.raises(InputError, match=message):
        parse_params(Limits(), **kwargs)


@pytest.mark.parametrize("raw,message", [(b"", "empty"), (b"  \n", "empty"), (b"\xc3\x28", "UTF-8"),
                                         (b"x" * 70000, "bytes")])
def test_bad_prompts_are_refused(raw, message):
    with pytest.raises(InputError, match=message):
        decode_prompt(raw, Limits())


def test_sampling_choices():
    logits = np.array([0.0, 5.0, 1.0])
    params = parse_params(Limits(), temperature=0.0)
    assert choose(logits, params, make_rng(params)) == 1
    hot = parse_params(Limits(), temperature=100.0, seed=1)
    rng = make_rng(hot)
    assert {choose(logits, hot, rng) for _ in range(200)} == {0, 1, 2}


def test_pool_view_follows_the_longest_sequence_and_keeps_rows_in_use():
    from hotpath.runtime.generation.kv_pool import KVPool

    pool = KVPool(layers=2, kv_heads=2, head_dim=4, slots=3, capacity=300, min_view=64)
    assert pool.view == 64 and pool.keys[0].shape == (3, 2, 4, 64) and pool.values[1].shape == (3, 2, 64, 4)
    rng = np.random.default_rng(0)
    entries = [rng.standard_normal(a[:2, ..., :50].shape if i % 2 == 0 else a[:2, :, :50].shape).astype(np.float32)
               for i, a in enumerate(pool.rows(0, 3))]
    for i, (k, v) in enumerate(zip(pool.keys, pool.values)):
        k[:2, :, :, :50], v[:2, :, :50] = entries[2 * i], entries[2 * i + 1]
    assert pool.fit(130, rows=2, used=50) and pool.view == 256
    assert all(a.flags.c_contiguous for a in pool.rows(0, 2))
    for i, (k, v) in enumerate(zip(pool.keys, pool.values)):  # the valid part moved with the layout
        assert np.array_equal(k[:2, :, :, :50], entries[2 * i]) and np.array_equal(v[:2, :, :50], entries[2 * i + 1])
    assert not pool.fit(200, rows=2, used=50)           # fits: no change
    assert pool.fit(290, rows=2, used=50) and pool.view == 300   # capped at the capacity
    assert pool.fit(40, rows=2, used=39) and pool.view == 128    # a quarter would do: narrowed, with headroom
    for i, k in enumerate(pool.keys):
        assert np.array_equal(k[:2, :, :, :39], entries[2 * i][..., :39])
    with pytest.raises(ValueError, match="do not fit"):
        pool.fit(301, rows=1, used=0)


def test_prefix_cache_matches_whole_blocks_of_a_chain_and_evicts_lru_leaves():
    from hotpath.runtime.generation.kv_pool import KVPool
    from hotpath.runtime.generation.prefix_cache import PrefixCache

    pool = KVPool(layers=1, kv_heads=1, head_dim=2, slots=2, capacity=64, min_view=64)
    pool.keys[0][0] = np.arange(128, dtype=np.float32).reshape(1, 2, 64)
    pool.values[0][0] = -np.arange(128, dtype=np.float32).reshape(1, 64, 2)
    cache = PrefixCache(layers=1, kv_heads=1, head_dim=2, block=4, blocks=3)
    a = list(range(10))                                    # blocks [0..3], [4..7]; 8, 9 not a whole block
    assert cache.store(a, pool, row=0, length=10) == 2 and cache.used == 2
    assert cache.match(a + [99], limit=11) == cache.match(a, limit=8) and len(cache.match(a, 8)) == 2
    assert len(cache.match(a, limit=7)) == 1               # only whole blocks within the limit
    assert cache.match([0, 1, 2, 9] + a[4:], limit=8) == []  # the first block differs: nothing matches
    assert cache.load(cache.match(a, 8), pool, row=1) == 8
    assert np.array_equal(pool.keys[0][1, :, :, :8], pool.keys[0][0, :, :, :8])
    assert np.array_equal(pool.values[0][1, :, :8], pool.values[0][0, :, :8])
    b = [0, 1, 2, 3, 50, 51, 52, 53]                     # shares block 0 with a
    assert cache.store(b, pool, row=0, length=8) == 1 and cache.used == 3
    cache.match(a, 8)                                      # a's leaf is now more recent than b's
    assert cache.store([7, 7, 7, 7], pool, row=0, length=4) == 1   # full: b's leaf (LRU leaf) gives way
    assert len(cache.match(a, 8)) == 2 and len(cache.match(b, 8)) == 1 and cache.evictions == 1


def test_prompt_lookup_draft_and_its_pass_count():
    from hotpath.perf.compare.generation import draft_steps, lookup_draft

    assert lookup_draft([1, 2, 3, 9, 1, 2, 3], k=4) == [9, 1, 2, 3]     # the latest earlier 3-gram's successors
    assert lookup_draft([4, 1, 2, 5, 2], k=2) == [5, 2]                 # falls back to the last token alone
    assert lookup_draft([5, 6, 7], k=2) == []
    # 7 tokens: a pass with no draft, a pass accepting 4 copied tokens (+1 own), a pass whose draft fails.
    assert draft_steps([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6, 7], k=4) == 3
    assert draft_steps([9], [1, 2, 3], k=4) == 3                        # nothing to copy: one token per pass


def _arrays(**tensors):
    return {name: np.asarray(value) if not isinstance(value, np.ndarray) else value
            for name, value in tensors.items()}


def test_request_inputs_refuse_a_missing_prompt_by_name():
    """Issue 25: a request without PROMPT got INTERNAL with a Python traceback and server paths."""
    from hotpath.runtime.generation.params import request_inputs

    with pytest.raises(InputError, match="PROMPT is required"):
        request_inputs(_arrays(MAX_TOKENS=np.array([4], np.int64)))
    with pytest.raises(InputError, match="PROMPT must hold exactly one value"):
        request_inputs(_arrays(PROMPT=np.array([b"a", b"b"], dtype=object)))
    with pytest.raises(InputError, match="PROMPT must be BYTES"):
        request_inputs(_arrays(PROMPT=np.array([1.5], np.float32)))


def test_request_inputs_are_checked_at_their_full_width():
    """MAX_TOKENS 2**32 + 4 must be refused, not wrapped to 4 (INT64 on the wire; no int32 cast on the way)."""
    from hotpath.runtime.generation.params import request_inputs

    values = request_inputs(_arrays(PROMPT=np.array([b"hi"], dtype=object), MAX_TOKENS=np.array([2**32 + 4], np.int64),
                                    SEED=np.array([2**40], np.int64), STOP=np.array([b"x"], dtype=object)))
    assert values["max_tokens"] == 2**32 + 4 and values["seed"] == 2**40 and values["stop"] == [b"x"]
    history = values.pop("history")
    assert history is None
    with pytest.raises(InputError, match=r"MAX_TOKENS must be within 1\.\.512, got 4294967300"):
        request_params(Limits(max_tokens=512), **values)
    with pytest.raises(InputError, match="MAX_TOKENS must be an integer tensor"):
        request_inputs(_arrays(PROMPT=np.array([b"hi"], dtype=object), MAX_TOKENS=np.array([4.5], np.float32)))
    with pytest.raises(InputError, match="MAX_TOKENS must be an integer"):
        parse_params(Limits(), max_tokens=4.5)
    with pytest.raises(InputError, match="TOP_P must hold exactly one value"):
        request_inputs(_arrays(PROMPT=np.array([b"hi"], dtype=object), TOP_P=np.array([0.5, 0.5], np.float32)))
    with pytest.raises(InputError, match="HISTORY must be BYTES"):
        request_inputs(_arrays(PROMPT=np.array([b"hi"], dtype=object), HISTORY=np.array([1, 2], np.int64)))


def test_stream_parameter_defaults_to_streaming_and_must_be_a_bool():
    from hotpath.runtime.generation.params import wants_stream

    assert wants_stream(None) and wants_stream("") and wants_stream("{}") and wants_stream('{"x": 1}')
    assert wants_stream('{"stream": true}') and not wants_stream('{"stream": false}')
    assert not wants_stream({"stream": False})
    with pytest.raises(InputError, match="parameter stream must be true or false"):
        wants_stream('{"stream": "no"}')
