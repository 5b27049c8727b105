"""Generation runtime without Triton: a tiny random Llama exported through the real export path,
driven step by step, against transformers' greedy generation."""

import collections
import threading

import numpy as np
import pytest

from hotpath.runtime.generation.chat import encode_prompt, render_chat, shared_prefix
from hotpath.runtime.generation.decoder import Decoder, ModelInfo
from hotpath.runtime.generation.engine import Engine, EngineSettings, QueueFull
from hotpath.runtime.generation.params import InputError, Limits, decode_prompt, parse_params, request_params
from hotpath.runtime.generation.sampling import choose, make_rng
from hotpath.runtime.generation.text_stream import TextStream
from tests import tinyllm

PROMPTS = ["hi", "The capital of France is", "ok", "Низкая задержка", "a much longer prompt " * 6, "🚀!"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tinyllm.build(tmp_path_factory.mktemp("tinyllm"))


@pytest.fixture(scope="module")
def decoder(tiny):
    return Decoder(tiny.model_path, ModelInfo.load(tiny.info_path), intra_op_threads=1)


class Collect:
    def __init__(self, cancel_after: int | None = None):
        self.tokens, self.texts, self.final, self.error, self.unavailable = [], [], None, None, None
        self.cancel_after = cancel_after

    def token(self, token_id, text):
        self.tokens.append(token_id)
        self.texts.append(text)

    def finish(self, text, reason, prompt_tokens, completion_tokens):
        assert self.final is None, "finished twice"
        self.final = (text, reason, prompt_tokens, completion_tokens)

    def fail(self, message, unavailable=False):
        assert self.final is None and self.error is None, "ended twice"
        self.error, self.unavailable = message, unavailable

    def is_cancelled(self):
        return self.cancel_after is not None and len(self.tokens) >= self.cancel_after

    @property
    def text(self):
        return "".join(self.texts) + (self.final[0] if self.final else "")


def ids_of(tiny, prompt):
    return encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, prompt)


def run_all(engine, sinks, max_steps=2000):
    for _ in range(max_steps):
        if all(s.final or s.error for s in sinks):
            return
        engine.step()
    raise AssertionError("engine did not finish")


def greedy(max_tokens=24):
    return parse_params(Limits(), max_tokens=max_tokens)


@pytest.mark.parametrize("max_batch,prefill_chunk", [(1, 512), (4, 8), (8, 3), (8, 64)],
                         ids=["one-at-a-time", "batch4-chunk8", "batch8-chunk3", "batch8-chunk64-grouped-prefill"])
def test_greedy_equals_transformers_alone_and_batched(tiny, decoder, max_batch, prefill_chunk):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=max_batch, context=256,
                                                            prefill_chunk=prefill_chunk))
    sinks = []
    for prompt in PROMPTS:
        sinks.append(Collect())
        engine.submit(ids_of(tiny, prompt), greedy(), sinks[-1])
    run_all(engine, sinks)
    for prompt, sink in zip(PROMPTS, sinks):
        want = tinyllm.greedy_reference(tiny, ids_of(tiny, prompt), 24)
        assert sink.tokens == want, prompt
        reason = "length" if len(want) == 24 else "stop"
        assert sink.final[1:] == (reason, len(ids_of(tiny, prompt)), len(want))
        assert sink.text == tiny.tokenizer.decode(want, skip_special_tokens=True)
    if max_batch > 1:
        assert engine.stats.max_decode_batch > 1, "requests never shared a decode step"
    if prefill_chunk >= 16 and max_batch > 1:  # prompts arriving together share prefill calls
        assert engine.stats.max_prefill_rows == len(PROMPTS)


@pytest.mark.parametrize("prefill_chunk", [512, 4])
def test_shared_prefix_is_reused_without_changing_greedy_results(tiny, decoder, prefill_chunk):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=256, prefill_chunk=prefill_chunk))
    prefix = shared_prefix(tiny.tokenizer, tinyllm.CHAT_TEMPLATE)
    assert prefix and all(ids_of(tiny, p)[:len(prefix)] == prefix for p in PROMPTS)
    engine.set_prefix(prefix)
    sinks = [Collect() for _ in PROMPTS]
    for prompt, sink in zip(PROMPTS, sinks):
        engine.submit(ids_of(tiny, prompt), greedy(), sink)
    run_all(engine, sinks)
    for prompt, sink in zip(PROMPTS, sinks):
        assert sink.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, prompt), 24), prompt
    assert engine.stats.prefix_hits == len(PROMPTS)
    total = sum(len(ids_of(tiny, p)) for p in PROMPTS)
    assert engine.stats.prefill_tokens == total - len(PROMPTS) * len(prefix)


def test_requests_join_a_running_batch_and_keep_greedy_results(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=128, prefill_chunk=16))
    first = Collect()
    engine.submit(ids_of(tiny, PROMPTS[1]), greedy(30), first)
    for _ in range(5):
        engine.step()
    late = Collect()
    engine.submit(ids_of(tiny, PROMPTS[3]), greedy(30), late)
    run_all(engine, [first, late])
    assert 0 < len(first.tokens) and first.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, PROMPTS[1]), 30)
    assert late.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, PROMPTS[3]), 30)
    assert engine.stats.batch_sizes[2] > 0


def test_long_prompt_prefill_does_not_stall_running_streams(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=256, prefill_chunk=4))
    running = Collect()
    engine.submit(ids_of(tiny, "hi"), greedy(60), running)
    while not running.tokens:
        engine.step()
    long = Collect()
    long_ids = ids_of(tiny, "x" * 100)
    engine.submit(long_ids, greedy(4), long)
    before = len(running.tokens)
    steps = 0
    while not long.tokens:
        engine.step()
        steps += 1
    assert steps >= len(long_ids) // 4  # the prompt was spread over many steps ...
    assert len(running.tokens) - before >= steps - 1  # ... and the running stream got a token in each


def test_cancellation_frees_the_slot_for_a_waiting_request(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=1, context=128, max_queue=4))
    cancelled, waiting = Collect(cancel_after=3), Collect()
    engine.submit(ids_of(tiny, "hi"), greedy(100), cancelled)
    engine.submit(ids_of(tiny, "ok"), greedy(5), waiting)
    run_all(engine, [cancelled, waiting], max_steps=40)
    assert cancelled.final[1] == "cancelled" and len(cancelled.tokens) == 3
    assert waiting.final is not None and waiting.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, "ok"), 5)
    assert engine.load == (0, 0) and engine.stats.cancelled == 1


def test_full_queue_refuses_clearly(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=1, context=64, max_queue=2))
    for _ in range(3):   # one for the free slot, two waiting
        engine.submit(ids_of(tiny, "hi"), greedy(2), Collect())
    with pytest.raises(QueueFull, match="queue full"):
        engine.submit(ids_of(tiny, "hi"), greedy(2), Collect())


def test_requests_for_free_slots_are_not_counted_as_waiting(tiny, decoder):
    """Issue 25: 60 streams arriving during one loop step got 27 refusals while 1 sequence generated.
    Requests that reach the queue between steps take the free slots at the next step: only those beyond
    the free slots wait, and only those beyond max_queue of them are refused."""
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=128, max_queue=2))
    sinks = [Collect() for _ in range(6)]
    for sink in sinks:   # the loop has not stepped: 4 free slots + 2 waiting
        engine.submit(ids_of(tiny, "hi"), greedy(30), sink)
    assert engine.waiting == 2
    with pytest.raises(QueueFull, match="2 waiting for a slot, 0 generating"):
        engine.submit(ids_of(tiny, "hi"), greedy(2), Collect())
    engine.step()   # 4 admitted, 2 still queued: the queue is full now, with every slot taken
    assert engine.load == (4, 2)
    with pytest.raises(QueueFull):
        engine.submit(ids_of(tiny, "hi"), greedy(2), Collect())
    assert engine.stats.refused == 2
    run_all(engine, sinks)
    assert all(s.final for s in sinks)


def _long_running(tiny, decoder, streams=3, **settings):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=256, max_queue=8, **settings))
    sinks = [Collect() for _ in range(streams)]   # 2 generating, the rest queued
    for sink in sinks:
        engine.submit(ids_of(tiny, "hi"), parse_params(Limits(max_tokens=250), max_tokens=250), sink)
    return engine, sinks


def _wait(condition, limit_s=30.0):
    deadline = threading.Event()
    for _ in range(int(limit_s / 0.02)):
        if condition():
            return True
        deadline.wait(0.02)
    return condition()


def test_drain_ends_running_and_queued_requests_with_unavailable_and_refuses_new_ones(tiny, decoder):
    engine, sinks = _long_running(tiny, decoder)
    engine.start()
    try:
        assert _wait(lambda: sinks[0].tokens), "the loop never started generating"
        engine.drain("the model is being unloaded")
        assert _wait(lambda: all(s.error for s in sinks))
        assert all(s.unavailable and s.final is None for s in sinks)
        assert all(len(s.tokens) < 250 for s in sinks)
        with pytest.raises(QueueFull, match="unloaded"):
            engine.submit(ids_of(tiny, "hi"), greedy(2), Collect())
        assert engine.load == (0, 0)
    finally:
        engine.stop()
    assert not engine._thread.is_alive()


def test_stop_gives_every_request_its_final_call_and_ends_the_threads(tiny, decoder):
    engine, sinks = _long_running(tiny, decoder)
    engine.start()
    engine.watch(lambda: True, interval_s=0.01)
    assert _wait(lambda: sinks[0].tokens)
    engine.stop()
    assert all(s.error and s.unavailable for s in sinks), [(s.error, s.final) for s in sinks]
    assert not engine._thread.is_alive() and not engine._watcher.is_alive()


@pytest.mark.parametrize("answer", [False, RuntimeError("Failed to check model readiness: Server not ready")],
                         ids=["unloading", "server-exiting"])
def test_the_watcher_drains_once_the_model_is_no_longer_ready(tiny, decoder, answer):
    """Triton finalizes a decoupled Python model only after its response senders closed: the engine
    must notice the unload (pb_utils.is_model_ready False, or "Server not ready" while it shuts down)."""
    engine, sinks = _long_running(tiny, decoder, streams=2)
    served = {"ready": True}

    def is_ready():
        if served["ready"] is True:
            return True
        if isinstance(served["ready"], Exception):
            raise served["ready"]
        return served["ready"]

    engine.start()
    engine.watch(is_ready, interval_s=0.02)
    try:
        assert _wait(lambda: sinks[0].tokens)
        assert not any(s.error for s in sinks)
        served["ready"] = answer
        assert _wait(lambda: all(s.error for s in sinks))
        assert all(s.unavailable for s in sinks)
        assert _wait(lambda: not engine._watcher.is_alive())
    finally:
        engine.stop()


def test_the_watcher_keeps_streams_when_its_own_check_fails_otherwise(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=128))
    sink = Collect()
    engine.submit(ids_of(tiny, "hi"), greedy(40), sink)

    def broken():
        raise RuntimeError("is_model_ready is not available here")

    engine.start()
    engine.watch(broken, interval_s=0.01)
    try:
        assert _wait(lambda: sink.final or sink.error)
        assert sink.final is not None and sink.error is None
    finally:
        engine.stop()


def test_the_watcher_makes_no_calls_while_idle(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=128))
    calls = []
    engine.start()
    engine.watch(lambda: calls.append(1) or True, interval_s=0.01)
    threading.Event().wait(0.2)
    assert not calls
    sink = Collect()
    engine.submit(ids_of(tiny, "hi"), greedy(40), sink)   # wakes the loop and the watcher alike
    assert _wait(lambda: sink.final)
    engine.stop()
    assert calls


def test_prompt_longer_than_the_context_is_an_input_error(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=1, context=32))
    with pytest.raises(InputError, match="tokens after the chat template"):
        engine.submit(ids_of(tiny, "y" * 40), greedy(2), Collect())


def test_context_end_finishes_with_length(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=1, context=40))
    prompt = ids_of(tiny, "hello there")
    sink = Collect()
    engine.submit(prompt, greedy(200), sink)
    run_all(engine, [sink])
    # 40 cached positions: the token sampled from the last one is sent but never needs caching.
    room = 40 - len(prompt) + 1
    want = tinyllm.greedy_reference(tiny, prompt, room)
    assert sink.tokens == want
    assert sink.final[1] == ("length" if len(want) == room else "stop")


def test_stop_string_ends_the_stream_and_is_not_sent(tiny, decoder):
    prompt = ids_of(tiny, PROMPTS[1])
    full = tiny.tokenizer.decode(tinyllm.greedy_reference(tiny, prompt, 24), skip_special_tokens=True)
    stop = full[5:8]
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=128))
    sink = Collect()
    engine.submit(prompt, parse_params(Limits(), max_tokens=24, stop=[stop.encode()]), sink)
    run_all(engine, [sink])
    assert sink.final[1] == "stop"
    assert sink.text == full[:full.find(stop)]


def test_seeded_sampling_is_reproducible_and_tiny_top_p_is_greedy(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=128))
    prompt = ids_of(tiny, "hi")
    sinks = [Collect() for _ in range(4)]
    for sink, seed in zip(sinks, [7, 7, 8]):
        engine.submit(prompt, parse_params(Limits(), max_tokens=20, temperature=1.5, seed=seed), sink)
    engine.submit(prompt, parse_params(Limits(), max_tokens=20, temperature=1.0, top_p=1e-6), sinks[3])
    run_all(engine, sinks)
    assert sinks[0].tokens == sinks[1].tokens
    assert sinks[0].tokens != sinks[2].tokens
    assert sinks[3].tokens == tinyllm.greedy_reference(tiny, prompt, 20)


def test_loop_thread_serves_concurrent_submitters(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=256, prefill_chunk=8))
    engine.start()
    sinks = [Collect() for _ in PROMPTS]
    threads = [threading.Thread(target=engine.submit, args=(ids_of(tiny, p), greedy(), s))
               for p, s in zip(PROMPTS, sinks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    deadline = 600
    while deadline and not all(s.final for s in sinks):
        threading.Event().wait(0.05)
        deadline -= 1
    engine.stop()
    for prompt, sink in zip(PROMPTS, sinks):
        assert sink.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, prompt), 24)


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


def test_decode_reads_a_view_sized_to_the_sequence_and_rebinds_only_on_change(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=256, prefill_chunk=64))
    prompt = ids_of(tiny, PROMPTS[4])   # ~140 tokens: grows the view past 64 and 128
    sink = Collect()
    engine.submit(prompt, greedy(24), sink)
    views, logits_buffers = set(), set()
    rebinds = decoder.rebinds
    while not sink.final:
        engine.step()
        views.add(engine.pool.view)
    assert sink.tokens == tinyllm.greedy_reference(tiny, prompt, 24)
    assert max(views) == 256 and engine.stats.relayouts >= 1
    # ~24 decode steps against the pool: a binding per (layout, batch shape), not per step.
    assert decoder.rebinds - rebinds <= 6
    for _ in range(2):
        logits, new = decoder.run(np.zeros((1, 1), np.int64), np.array([3]), engine.pool, 0)
        logits_buffers.add(logits.__array_interface__["data"][0])
    assert len(logits_buffers) == 1   # outputs land in the decoder's own buffer: nothing allocated per step


# ---- prefix cache, KV budget and preemption --------------------------------------------------------

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


def _conversation(tiny, engine, turns, max_tokens=16):
    """Run a chat turn by turn, each turn's history being the turns and replies before it."""
    history, replies = [], []
    for prompt in turns:
        sink = Collect()
        engine.submit(encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, prompt, history=history),
                      greedy(max_tokens), sink)
        run_all(engine, [sink])
        replies.append(sink.tokens)
        history += [prompt, sink.text]
    return replies, history


def test_follow_up_turn_prefills_only_its_new_suffix_with_the_same_tokens(tiny, decoder):
    turns = ["The capital of France is", "and of Italy?", "thanks"]
    cached = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=256, prefill_chunk=16,
                                                            prefix_cache_tokens=1024))
    replies, history = _conversation(tiny, cached, turns)
    plain = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=256, prefill_chunk=16))
    assert _conversation(tiny, plain, turns) == (replies, history)
    for i, reply in enumerate(replies):
        ids = encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, turns[i], history=history[:2 * i])
        assert reply == tinyllm.greedy_reference(tiny, ids, 16)
    last = encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, turns[2], history=history[:4])
    assert cached.stats.prefix_hits == 2 and cached.stats.prefix_misses == 1
    # The third turn's prompt starts with the second turn's prompt + reply, all cached in whole blocks.
    assert cached.stats.prefill_tokens < plain.stats.prefill_tokens - len(last) // 2
    assert cached.stats.prefix_tokens >= len(last) - 16 - 24


def test_follow_up_turns_under_concurrent_streams_keep_greedy_tokens(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=256, prefill_chunk=8,
                                                            prefix_cache_tokens=2048))
    first = [Collect() for _ in PROMPTS[:4]]
    for prompt, sink in zip(PROMPTS, first):
        engine.submit(ids_of(tiny, prompt), greedy(12), sink)
    run_all(engine, first)
    follow = [encode_prompt(tiny.tokenizer, tinyllm.CHAT_TEMPLATE, "more", history=[p, s.text])
              for p, s in zip(PROMPTS, first)]
    sinks = [Collect() for _ in follow + PROMPTS[4:]]
    for ids, sink in zip(follow + [ids_of(tiny, p) for p in PROMPTS[4:]], sinks):
        engine.submit(ids, greedy(12), sink)
    hits = engine.stats.prefix_hits
    run_all(engine, sinks)
    assert engine.stats.prefix_hits - hits >= len(follow)
    for ids, sink in zip(follow + [ids_of(tiny, p) for p in PROMPTS[4:]], sinks):
        assert sink.tokens == tinyllm.greedy_reference(tiny, ids, 12)


@pytest.mark.parametrize("cache_tokens", [0, 2048], ids=["recompute", "recompute-via-prefix-cache"])
def test_more_streams_than_the_kv_budget_all_complete_with_the_same_tokens(tiny, decoder, cache_tokens):
    # 256 positions for 6 streams of ~40-150 tokens: at a 64-position view 4 rows fit, at 128 two,
    # at 256 one. Admission waits and running streams are preempted as they grow; none fails.
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=6, context=256, prefill_chunk=16,
                                                            kv_tokens=256, prefix_cache_tokens=cache_tokens))
    engine.warmup()   # a decode of every row the budget has room for (4 at the smallest view, not 6)
    sinks = [Collect() for _ in PROMPTS]
    for prompt, sink in zip(PROMPTS, sinks):
        engine.submit(ids_of(tiny, prompt), greedy(40), sink)
    most = 0
    for _ in range(3000):
        if all(s.final or s.error for s in sinks):
            break
        engine.step()
        most = max(most, engine.load[0])
        assert engine.kv_used <= engine.pool.budget
    for prompt, sink in zip(PROMPTS, sinks):
        assert sink.error is None and sink.final is not None, prompt
        assert sink.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, prompt), 40), prompt
    assert engine.stats.preemptions > 0 and 1 < most <= 4
    if cache_tokens:
        assert engine.stats.prefix_tokens > 0


def test_long_prompts_beyond_the_budget_wait_for_memory(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=4, context=200, kv_tokens=200))
    prompts = ["x" * 120, "y" * 130, "z" * 110]      # each alone fills the budget's 256-wide view
    sinks = [Collect() for _ in prompts]
    for prompt, sink in zip(prompts, sinks):
        engine.submit(ids_of(tiny, prompt), greedy(8), sink)
    engine.step()
    assert engine.load == (1, 2)                        # one admitted, two waiting (not refused)
    run_all(engine, sinks)
    for prompt, sink in zip(prompts, sinks):
        assert sink.tokens == tinyllm.greedy_reference(tiny, ids_of(tiny, prompt), 8)
    assert engine.stats.refused == 0


def test_latency_samples_one_ttft_per_stream_then_itl(tiny, decoder):
    engine = Engine(decoder, tiny.tokenizer, EngineSettings(max_batch=2, context=128))
    sinks = [Collect(), Collect()]
    for sink in sinks:
        engine.submit(ids_of(tiny, "hi"), greedy(5), sink)
    run_all(engine, sinks)
    kinds = collections.Counter(kind for kind, _ in engine.latencies)
    assert kinds == {"ttft": 2, "itl": sum(len(s.tokens) for s in sinks) - 2}
    assert all(seconds >= 0 for _, seconds in engine.latencies)


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
