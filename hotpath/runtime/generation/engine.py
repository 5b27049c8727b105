"""The continuous-batching generation loop: one thread per model instance.

Each loop step (iteration-level scheduling, as vLLM/TGI do):
1. drops sequences whose client cancelled or went away (their slot is free for this step);
2. admits queued requests into free KV slots (the queue is bounded: `submit` refuses when full);
3. prefills prompts, at most `prefill_chunk` prompt tokens per step in total, so a long prompt is
   spread over several steps and the running streams keep getting tokens in between;
4. runs one batched decode step for every sequence that has a token to feed, and streams each new
   token to its sink; finished sequences leave at once and the last KV row moves into the hole.

KV memory (hotpath.runtime.generation.kv_pool) is a budget of positions shared by the rows in use.
Admission is first come, first served: the queue's head is admitted when it fits beside the
running sequences with its whole prompt (otherwise it, and everyone behind it, waits). When running
sequences grow past the budget, the newest is preempted: its KV entries go to the prefix cache,
it returns to the head of the queue with its tokens so far, and on readmission recomputes only
what the cache lost (vLLM's recompute policy). A preempted sequence's stream just pauses: its
tokens are the same as if it had run alone.

The prefix cache (hotpath.runtime.generation.prefix_cache) keeps blocks of KV entries of prompts
and of finished sequences (prompt + reply), so a follow-up chat turn prefills only its new suffix.
"""

from __future__ import annotations

import collections
import itertools
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from hotpath.runtime.generation.decoder import Decoder
from hotpath.runtime.generation.params import GenerationParams, InputError
from hotpath.runtime.generation.sampling import choose, make_rng
from hotpath.runtime.generation.text_stream import TextStream

log = logging.getLogger(__name__)
MIN_PREFILL_STEP = 8  # a prefill group is at most prefill_chunk // 8 prompts, so each advances >= 8 tokens


class QueueFull(Exception):
    """The admission queue is full: the request is refused (the caller may retry later)."""


class Sink(Protocol):
    """Where a sequence's output goes (the Triton adapter sends responses; tests collect them)."""

    def token(self, token_id: int, text: str) -> None: ...

    def finish(self, text: str, reason: str, prompt_tokens: int, completion_tokens: int) -> None: ...

    def fail(self, message: str, unavailable: bool = False) -> None: ...

    def is_cancelled(self) -> bool: ...


@dataclass(frozen=True)
class EngineSettings:
    max_batch: int = 8        # KV slots: sequences in flight
    context: int = 512        # tokens per slot (prompt + generated)
    max_queue: int = 32       # requests waiting for a slot
    prefill_chunk: int = 64   # prompt tokens prefilled per loop step
    kv_tokens: int = 0        # KV positions shared by the sequences in flight (0: max_batch x context)
    prefix_block: int = 16    # tokens per prefix-cache block
    prefix_cache_tokens: int = 0   # prefix-cache size in tokens (0: off)

    @classmethod
    def from_parameters(cls, p: dict[str, str]) -> "EngineSettings":
        """From the model config's [parameters] (build/text_generation.toml), as plain strings."""
        return cls(max_batch=int(p.get("max_batch", 8)), context=int(p.get("max_context", 512)),
                   max_queue=int(p.get("max_queue", 32)), prefill_chunk=int(p.get("prefill_chunk", 64)),
                   kv_tokens=int(p.get("kv_tokens", 0)), prefix_block=int(p.get("prefix_block", 16)),
                   prefix_cache_tokens=int(p.get("prefix_cache_tokens", 0)))


@dataclass(eq=False)
class Sequence:
    prompt: list[int]
    params: GenerationParams
    sink: Sink
    stream: TextStream
    order: int
    rng: np.random.Generator | None = None
    slot: int = -1
    length: int = 0                 # positions in the KV cache
    next_token: int | None = None   # sampled, fed at the next decode step
    generated: int = 0
    done: bool = False
    tokens: list[int] = field(default_factory=list)   # prompt + tokens fed: what the KV slot must hold
    submitted: float = 0.0          # perf_counter() at submit, for TTFT
    last_token: float = 0.0         # perf_counter() at the last token sent, for ITL

    @property
    def prefilling(self) -> bool:
        return not self.done and self.length < len(self.tokens)

    @property
    def decoding(self) -> bool:
        return self.next_token is not None and not self.done and self.length == len(self.tokens)

    @property
    def needed(self) -> int:
        """KV positions this sequence needs at its next step (its whole prompt while prefilling)."""
        return len(self.tokens) + 1


@dataclass
class EngineStats:
    """Counters for tests and perf: how often the loop ran and how wide its decode batches were."""

    steps: int = 0
    decode_rows: int = 0
    max_decode_batch: int = 0
    prefill_tokens: int = 0
    prefill_calls: int = 0
    max_prefill_rows: int = 0
    cancelled: int = 0
    refused: int = 0
    prefix_hits: int = 0          # admissions that reused cached KV entries (system turn or blocks)
    prefix_misses: int = 0        # admissions that reused nothing
    prefix_tokens: int = 0        # prompt positions copied from a cache instead of prefilled
    preemptions: int = 0
    relayouts: int = 0        # KV pool view changes (hotpath.runtime.generation.kv_pool.KVPool.fit)
    batch_sizes: collections.Counter = field(default_factory=collections.Counter)
    # Where the loop's time goes (seconds, summed over steps): the whole step, the decoder's ONNX
    # Runtime calls (prefill and decode), and the sinks (the Triton adapter's response sends).
    step_s: float = 0.0
    decoder_s: float = 0.0
    sink_s: float = 0.0

    def breakdown(self) -> str:
        """One line: per-step mean of each part; `loop` is the step minus the decoder and the sinks."""
        if not self.steps:
            return "no steps"
        n = self.steps / 1000.0
        loop = self.step_s - self.decoder_s - self.sink_s
        return (f"{self.steps} steps, per step: {self.step_s / n:.2f} ms = ORT {self.decoder_s / n:.2f} + "
                f"loop {loop / n:.2f} + sinks {self.sink_s / n:.2f} ms")


class Engine:
    def __init__(self, decoder: Decoder, tokenizer, settings: EngineSettings):
        self.decoder, self.tokenizer, self.settings = decoder, tokenizer, settings
        self.eos = set(decoder.info.eos_token_ids)
        self.pool = decoder.new_pool(settings.max_batch, settings.context, settings.kv_tokens or None)
        self.cache = (decoder.new_prefix_cache(settings.prefix_block, settings.prefix_cache_tokens)
                      if settings.prefix_cache_tokens >= settings.prefix_block else None)
        # (kind, seconds) of each token sent: "ttft" for a stream's first, "itl" for the others. Bounded:
        # the Triton adapter drains it into histograms; without a reader the oldest samples drop.
        self.latencies: collections.deque[tuple[str, float]] = collections.deque(maxlen=65536)
        self.stats = EngineStats()
        self._queue: collections.deque[Sequence] = collections.deque()
        self._active: list[Sequence] = []  # index == KV slot
        self._cond = threading.Condition()
        self._order = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._draining = ""        # why the model stops serving (set by drain()); new requests are refused
        self._watcher: threading.Thread | None = None
        self._halt = threading.Event()   # set by stop() and drain(): the watcher's pause ends
        self._prefix: list[int] = []
        self._prefix_kv: list[np.ndarray] = []

    # ---- called from request threads -------------------------------------------------------------
    def submit(self, prompt_ids: list[int], params: GenerationParams, sink: Sink) -> None:
        """Queue a request; raises InputError (prompt too long) or QueueFull."""
        room = self.settings.context - 1
        if not prompt_ids:
            raise InputError("PROMPT encodes to no tokens")
        if len(prompt_ids) > room:
            raise InputError(f"PROMPT is {len(prompt_ids)} tokens after the chat template; "
                             f"at most {room} fit the {self.settings.context}-token context")
        seq = Sequence(list(prompt_ids), params, sink, TextStream(self.tokenizer, params.stop),
                       next(self._order), make_rng(params), tokens=list(prompt_ids), submitted=time.perf_counter())
        with self._cond:
            if self._stopping or self._draining:
                raise QueueFull(self._draining or "the model is shutting down")
            if self.waiting >= self.settings.max_queue:
                self.stats.refused += 1
                raise QueueFull(f"admission queue full ({self.waiting} waiting for a slot, "
                                f"{len(self._active)} generating); retry later")
            self._queue.append(seq)
            self._cond.notify_all()   # the loop, and the unload watcher when one waits

    @property
    def waiting(self) -> int:
        """Queued requests that no free slot awaits: the ones `max_queue` bounds. Requests reach the queue
        between loop steps; those a free slot will take at the next step are not waiting for one (60
        streams arriving during one step were refused at 32 queued while 16 slots stood free)."""
        free = max(0, self.settings.max_batch - len(self._active))
        return max(0, len(self._queue) - free)

    def set_prefix(self, prefix_ids: list[int]) -> None:
        """Prefill a prompt prefix every request shares (the chat template's system turn) once.

        Admitted requests whose tokens start with it get its KV entries copied into their slot
        instead of recomputed: for SmolLM2 that is ~30 of the ~40 tokens of a short chat prompt,
        the bulk of the prefill work under concurrent arrivals. Call before `start()`.
        """
        self._prefix, self._prefix_kv = [], []
        if not prefix_ids or len(prefix_ids) >= self.settings.context - 1:
            return
        _, new = self.decoder.run(np.array([prefix_ids], np.int64), np.zeros(1), self.pool, 0)
        self._prefix, self._prefix_kv = list(prefix_ids), [a[0].copy() for a in new]

    def warmup(self) -> None:
        """One prefill and one decode call on slot 0, so the first request does not pay ORT's
        first-run allocations; the pool is left as it was (nothing is written back)."""
        self.decoder.run(np.zeros((1, min(16, self.settings.prefill_chunk)), np.int64), np.zeros(1), self.pool, 0)
        rows = self.pool.room(self.pool.view)   # max_batch, or fewer when the KV budget is tight
        self.decoder.run(np.zeros((rows, 1), np.int64), np.zeros(rows), self.pool, 0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="generation-loop", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop and the watcher; queued and running requests end with an UNAVAILABLE error (every
        sink gets its final call), so nothing outlives the model."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._halt.set()
        for thread in (self._thread, self._watcher):
            if thread and thread is not threading.current_thread():
                thread.join(timeout)
        if self._thread and self._thread.is_alive():
            log.error("generation loop still running %.0fs after stop; failing its requests anyway", timeout)
        self._fail_all("the model is shutting down")

    def drain(self, reason: str) -> None:
        """Stop serving without stopping the loop: every queued and running request ends now with an
        UNAVAILABLE error (its final response), later ones are refused. For a model being unloaded:
        Triton calls finalize() only once every response sender is closed, so running streams must end
        first, or an unload or a server shutdown waits for the longest generation (or its exit timeout)."""
        with self._cond:
            if self._draining or self._stopping:
                return
            self._draining = reason
            self._cond.notify_all()
        self._halt.set()
        log.warning("draining: %s", reason)

    def watch(self, is_ready, interval_s: float = 0.5) -> None:
        """Poll `is_ready()` (is this model still served?) every `interval_s` while there is work, and
        drain when it answers False or raises "... not ready": an unload or a server shutdown has begun.
        Idle, it makes no call (Triton unloads an idle model at once)."""
        def run():
            while True:
                with self._cond:
                    while not (self._stopping or self._draining or self._queue or self._active):
                        self._cond.wait()
                    if self._stopping or self._draining:
                        return
                try:
                    ready = _within(is_ready, READY_TIMEOUT_S)
                except TimeoutError:
                    # The check itself hung (seen once the server's shutdown had begun: the streams then
                    # waited out the exit timeout): a server that cannot answer it is going away.
                    log.warning("readiness check unanswered for %.0f s: draining", READY_TIMEOUT_S)
                    ready = False
                except Exception as exc:
                    # Triton 2.51 answers "Server not ready" once its shutdown began; any other failure is
                    # the check's own: stop watching rather than end streams on a guess.
                    if "not ready" not in str(exc).lower():
                        log.error("readiness check failed (%s); no longer watching for an unload", exc)
                        return
                    ready = False
                if not ready:
                    self.drain("the model is being unloaded (server shutdown or model unload)")
                    return
                self._halt.wait(interval_s)

        self._watcher = threading.Thread(target=run, name="generation-unload-watch", daemon=True)
        self._watcher.start()

    def _fail_all(self, message: str) -> None:
        """End every queued and running request with UNAVAILABLE (called with the loop not stepping)."""
        with self._cond:
            pending, self._queue = list(self._queue), collections.deque()
        active, self._active = self._active, []
        for seq in pending + active:
            if not seq.done:
                seq.done = True
                _safe(seq.sink.fail, message, True)

    @property
    def load(self) -> tuple[int, int]:
        """(sequences generating, requests queued)."""
        return len(self._active), len(self._queue)

    @property
    def kv_used(self) -> int:
        """KV positions holding entries of the sequences in flight (of `pool.budget`)."""
        return sum(s.length for s in list(self._active))

    # ---- the loop thread -------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._queue or self._active):
                    self._cond.wait()
                if self._stopping:
                    return
                draining = self._draining
            if draining:
                self._fail_all(draining)
                continue
            try:
                self.step()
            except Exception as exc:  # a failed step must not kill the loop: fail its sequences
                log.exception("generation step failed")
                for seq in self._active:
                    if not seq.done:
                        seq.done = True
                        _safe(seq.sink.fail, f"generation failed: {exc}")
                self._active = []

    def step(self) -> None:
        """One iteration: cancellations, admissions, a prefill budget, one batched decode step."""
        self.stats.steps += 1
        start = time.perf_counter()
        self._drop_cancelled()
        self._make_room()
        self._admit()
        self._prefill()
        self._decode()
        self._remove_done()
        self.stats.step_s += time.perf_counter() - start

    def _drop_cancelled(self) -> None:
        for seq in self._active:
            if not seq.done and _cancelled(seq.sink):
                self._end(seq, "cancelled")
                self.stats.cancelled += 1
        self._remove_done()

    def _needed(self) -> int:
        return max((s.needed for s in self._active), default=1)

    def _make_room(self) -> None:
        """Preempt the newest sequences until the rest fit the KV budget at their next step."""
        while len(self._active) > 1 and not self.pool.fits(len(self._active), self._needed()):
            seq = max(self._active, key=lambda s: s.order)
            if self.cache is not None:
                self.cache.store(seq.tokens, self.pool, seq.slot, seq.length)
            seq.done = True          # leaves the pool like a finished sequence...
            self._remove_done()
            seq.done, seq.slot, seq.length = False, -1, 0   # ...and waits at the queue's head to resume
            self.stats.preemptions += 1
            with self._cond:
                self._queue.appendleft(seq)

    def _admit(self) -> None:
        with self._cond:
            while self._queue and len(self._active) < self.settings.max_batch:
                seq = self._queue[0]
                if _cancelled(seq.sink):
                    self._queue.popleft()
                    self.stats.cancelled += 1
                    _safe(seq.sink.finish, "", "cancelled", len(seq.prompt), seq.generated)
                    continue
                if not self.pool.fits(len(self._active) + 1, max(self._needed(), seq.needed)):
                    return   # head-of-line: it waits for memory, and so does everyone behind it
                self._queue.popleft()
                seq.slot = len(self._active)
                self._active.append(seq)
                self._reuse_prefix(seq)

    def _fit_pool(self, needed: int) -> None:
        """Size the pool's view (positions the graph reads per row) for `needed` positions."""
        used = max((s.length for s in self._active), default=0)
        if self.pool.fit(max(needed, used + 1), len(self._active), used):
            self.stats.relayouts += 1

    def _reuse_prefix(self, seq: Sequence) -> None:
        """Start the slot from cached KV entries: the longest cached block chain, or the system turn.
        At least one token is left to prefill (its logits give the next token)."""
        limit = len(seq.tokens) - 1
        blocks = self.cache.match(seq.tokens, limit) if self.cache is not None else []
        n = len(self._prefix)
        system = n and n <= limit and seq.tokens[:n] == self._prefix
        if blocks and len(blocks) * self.cache.block >= (n if system else 0):
            self._fit_pool(len(blocks) * self.cache.block)
            seq.length = self.cache.load(blocks, self.pool, seq.slot)
        elif system:
            self._fit_pool(n)
            self.pool.write(seq.slot, 0, [a[None] for a in self._prefix_kv])
            seq.length = n
        if seq.length:
            self.stats.prefix_hits += 1
            self.stats.prefix_tokens += seq.length
        else:
            self.stats.prefix_misses += 1

    def _prefill(self) -> None:
        """Prompt tokens for up to `prefill_chunk` per step, several prompts per decoder call.

        A group of waiting prompts (oldest first) advances by the same number of tokens, so one
        call carries them all without padding; a prompt that needs more continues next step. Their
        cache rows are gathered up to the longest cached length (small while prefilling).
        """
        budget = self.settings.prefill_chunk
        while budget > 0:
            waiting = sorted((s for s in self._active if s.prefilling), key=lambda s: s.order)
            if not waiting:
                return
            group = waiting[:max(1, budget // MIN_PREFILL_STEP)]
            steps = min(min(len(s.tokens) - s.length for s in group), budget // len(group))
            ids = np.array([s.tokens[s.length:s.length + steps] for s in group], np.int64)
            lengths = np.array([s.length for s in group], np.int64)
            self._fit_pool(int(lengths.max()) + steps)
            cache = self.pool.gather([s.slot for s in group], max(1, int(lengths.max())))
            t0 = time.perf_counter()
            logits, new = self.decoder.run_cache(ids, lengths, cache)
            self.stats.decoder_s += time.perf_counter() - t0
            for row, seq in enumerate(group):
                self.pool.write(seq.slot, seq.length, new, source_row=row)
                seq.length += steps
            budget -= steps * len(group)
            self.stats.prefill_tokens += steps * len(group)
            self.stats.prefill_calls += 1
            self.stats.max_prefill_rows = max(self.stats.max_prefill_rows, len(group))
            for row, seq in enumerate(group):
                if seq.length < len(seq.tokens):
                    continue
                if self.cache is not None:   # concurrent requests with this prompt find it at once
                    self.cache.store(seq.tokens, self.pool, seq.slot, seq.length)
                if seq.next_token is None:   # a resumed (preempted) sequence already has its next token
                    self._emit(seq, choose(logits[row], seq.params, seq.rng))

    def _decode(self) -> None:
        rows = 1 + max((s.slot for s in self._active if s.decoding), default=-1)
        if rows == 0:
            return
        batch = self._active[:rows]
        active = np.array([s.decoding for s in batch])
        # Rows still prefilling ride along with a dummy token; their outputs are discarded.
        ids = np.array([[s.next_token if s.decoding else 0] for s in batch], np.int64)
        lengths = np.array([s.length for s in batch], np.int64)
        self._fit_pool(int(lengths.max()) + 1)
        t0 = time.perf_counter()
        logits, new = self.decoder.run(ids, lengths, self.pool, 0)
        self.stats.decoder_s += time.perf_counter() - t0
        self.pool.write_rows(rows, lengths, new, active)
        n = int(active.sum())
        self.stats.decode_rows += n
        self.stats.max_decode_batch = max(self.stats.max_decode_batch, n)
        self.stats.batch_sizes[n] += 1
        for row, seq in enumerate(batch):
            if active[row]:
                seq.length += 1
                seq.tokens.append(seq.next_token)
                self._emit(seq, choose(logits[row], seq.params, seq.rng))

    def _emit(self, seq: Sequence, token: int) -> None:
        if token in self.eos:
            self._end(seq, "stop")
            return
        seq.generated += 1
        seq.next_token = token
        text, stopped = seq.stream.push(token)
        t0 = time.perf_counter()
        self.latencies.append(("itl", t0 - seq.last_token) if seq.last_token else ("ttft", t0 - seq.submitted))
        seq.last_token = t0
        sent = _safe(seq.sink.token, token, text)
        self.stats.sink_s += time.perf_counter() - t0
        if not sent:
            self._end(seq, "cancelled")  # the client is gone
        elif stopped:
            self._end(seq, "stop")
        elif seq.generated >= seq.params.max_tokens or seq.length >= self.settings.context:
            self._end(seq, "length")

    def _end(self, seq: Sequence, reason: str) -> None:
        if self.cache is not None and seq.slot >= 0:   # prompt + reply: the next chat turn starts with them
            self.cache.store(seq.tokens, self.pool, seq.slot, seq.length)
        seq.done = True
        text = seq.stream.flush() if reason != "cancelled" else ""
        t0 = time.perf_counter()
        _safe(seq.sink.finish, text, reason, len(seq.prompt), seq.generated)
        self.stats.sink_s += time.perf_counter() - t0

    def _remove_done(self) -> None:
        for seq in [s for s in self._active if s.done]:
            last = self._active[-1]
            if last is not seq:
                self.pool.move(last.slot, seq.slot, last.length)
                last.slot = seq.slot
                self._active[seq.slot] = last
            self._active.pop()


def _cancelled(sink: Sink) -> bool:
    try:
        return bool(sink.is_cancelled())
    except Exception:
        return True


def _safe(call, *args) -> bool:
    """Call into a sink; a sink that raises (client gone) must not take the loop down."""
    try:
        call(*args)
        return True
    except Exception:
        log.warning("response sink failed", exc_info=True)
        return False


READY_TIMEOUT_S = 3.0   # an unanswered readiness check counts as "going away" after this long


def _within(fn, timeout_s: float):
    """fn() on a daemon thread; its result, or TimeoutError when it has not returned in `timeout_s`
    (the thread is left to finish on its own)."""
    box: list = []
    done = threading.Event()

    def run():
        try:
            box.append((True, fn()))
        except BaseException as exc:   # handed to the caller
            box.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="generation-ready-check", daemon=True).start()
    if not done.wait(timeout_s):
        raise TimeoutError
    ok, value = box[0]
    if not ok:
        raise value
    return value
