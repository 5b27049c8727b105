"""Generation runtime without Triton: a tiny random Llama exported through the real export path, driven
step by step, against transformers' greedy generation (the model-free parts: tests/unit/test_generation_parts.py)."""

import collections
import threading

import numpy as np
import pytest

from hotpath.runtime.generation.chat import encode_prompt, shared_prefix
from hotpath.runtime.generation.decoder import Decoder, ModelInfo
from hotpath.runtime.generation.engine import Engine, EngineSettings, QueueFull
from hotpath.runtime.generation.params import InputError, Limits, parse_params
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


