"""Text generation on vLLM (decoupled), with Triton's vLLM-backend tensors.

Inputs: text_input or hotpath's `messages` (chat turns, rendered with the model's chat template),
sampling_parameters (JSON), stream, exclude_input_in_output, return_finish_reason,
return_num_input_tokens, return_num_output_tokens, return_logprobs (hotpath.runtime.llm.request). Outputs:
text_output (a delta per response when streaming, else the whole text in one response), finish_reason (stop
| length | cancelled), num_input_tokens, num_output_tokens (UINT32), logprobs (JSON), each when asked for;
text_output, finish_reason and logprobs hold one element per choice (sampling_parameters.n, as Triton's
vLLM backend), num_output_tokens the tokens of every choice together.

The engine is vLLM's AsyncLLM in a child process started from the vLLM environment
(hotpath.runtime.llm.engine_process): this stub keeps numpy 1.26, which Triton 2.51's stub needs for
string tensors. One engine request per Triton request; `execute()` checks and forwards each request and
returns at once; a reader thread turns the engine's replies into responses. Every request gets its final
flag, errors included. Errors: input faults INVALID_ARGUMENT (before anything is queued), a full admission
queue or a shutdown UNAVAILABLE, faults INTERNAL; every message starts with "text_generation: [STATUS] "
(hotpath.client reads the class there: a gRPC stream response carries the message only).

Usage: when a request ends (finished, cancelled or stopped), its prompt tokens and the tokens generated, as
vLLM counted them (the prompt's token ids and every generated token id: the engine's input_tokens and
output_tokens, the same numbers num_input_tokens and num_output_tokens return), are counted once for its
tenant (hotpath_usage_input_tokens_total, hotpath_usage_output_tokens_total: hotpath.runtime.usage).

Cancellation: a client that cancels its stream gets its sequence aborted in vLLM (KV freed). Unload and
shutdown: Triton finalizes a decoupled model only once its response senders are closed, so while requests
are in flight a watcher polls `pb_utils.is_model_ready` and, once an unload or shutdown began, ends them
(UNAVAILABLE). The engine process exits when this stub's pipe to it closes: finalize, unload, or the stub
killed (hotpath.runtime.lifetime ends the stub with its server).
"""

import json
import os
import threading
import uuid

import numpy as np
import triton_python_backend_utils as pb_utils

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.lifetime import exit_with_server
from hotpath.runtime.llm.engine_client import EngineClient, EngineGone, engine_device, engine_environment
from hotpath.runtime.llm.metrics import EngineMetrics
from hotpath.runtime.llm.request import INPUTS, InputError, parse_request
from hotpath.runtime.llm.settings import engine_python, from_parameters
from hotpath.runtime.usage import TENANCY_REFUSED, Usage, tenants_of

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
WATCH_S = 0.5            # unload watcher and cancellation poll period
READY_CHECK_TIMEOUT_S = 3.0   # a readiness check unanswered this long is a strike
READY_CHECK_STRIKES = 4       # consecutive strikes: the server is going away (a busy host answers late, not never)
IDLE_CHECK_ROUNDS = 4         # idle, the watcher asks whether the model is still served every 4th round (2 s)
ROOT = __import__("pathlib").Path(__import__("hotpath").__file__).resolve().parent.parent


def _error(message, code):
    """A TritonError whose message carries its status ("text_generation: [UNAVAILABLE] ...")."""
    status = {pb_utils.TritonError.INVALID_ARG: "INVALID_ARGUMENT", pb_utils.TritonError.UNAVAILABLE: "UNAVAILABLE"}
    return pb_utils.TritonError(f"text_generation: [{status.get(code, 'INTERNAL')}] {message}", code)


def _code(status):
    return {"INVALID_ARGUMENT": pb_utils.TritonError.INVALID_ARG,
            "UNAVAILABLE": pb_utils.TritonError.UNAVAILABLE}.get(status, pb_utils.TritonError.INTERNAL)


def _strings(values):
    return np.array([v.encode("utf-8") for v in values], dtype=np.object_)


class Stream:
    """One request: turns the engine's replies into Triton responses through its response sender.

    Each response holds one element per choice (sampling_parameters.n, Triton's vLLM backend's shape):
    text_output [n] (deltas when streaming, else each choice's whole text) and, with return_logprobs,
    logprobs [n] (JSON per choice: the engine's values for the same tokens, engine_process.token_logprobs);
    on the last one finish_reason [n], num_input_tokens [1] and num_output_tokens [1] (every choice's
    tokens together: the tokens the request cost)."""

    def __init__(self, sender, request, tenant="local", usage=None):
        self.sender, self.request = sender, request
        self.n = request.n
        self.texts = [[] for _ in range(self.n)]       # whole answers (not streamed): each choice's deltas
        self.logprobs = [[] for _ in range(self.n)]
        self.prompt = ""
        self.tenant, self.usage = tenant, usage
        self.lock = threading.Lock()

    def _count(self, message):
        """The request's tokens, once, on its last reply (whoever is listening)."""
        usage, self.usage = self.usage, None
        if usage is not None:
            usage.add("input_tokens", self.tenant, int(message.get("input_tokens") or 0))
            usage.add("output_tokens", self.tenant, int(message.get("output_tokens") or 0))

    def _choices(self, message):
        """(text deltas, logprob deltas), one per choice, and whether any moved."""
        texts, logprobs, moved = [""] * self.n, [[] for _ in range(self.n)], False
        choices = message.get("choices")
        if choices is None:   # a reply without choices (cancelled): choice 0's text, if any
            choices = [{"index": 0, "text": message.get("text") or ""}]
        for choice in choices:
            i = choice["index"]
            if not 0 <= i < self.n:
                continue
            texts[i] += choice.get("text") or ""
            logprobs[i].extend(choice.get("logprobs") or ())
            moved = moved or bool(choice.get("text") or choice.get("logprobs"))
        return texts, logprobs, moved

    def reply(self, message):
        with self.lock:
            if self.sender is None:
                return
            if "error" in message:
                self._close(pb_utils.InferenceResponse(error=_error(message["error"], _code(message.get("status")))))
                return
            req, finish = self.request, message.get("finish")
            if finish is not None:
                self._count(message)
            if finish == "cancelled" and self.sender.is_cancelled():
                self._close()   # nobody is listening
                return
            texts, logprobs, moved = self._choices(message)
            if req.stream:
                if moved or finish is not None:
                    response = self._response(texts, logprobs, message, finish)
                    if finish is None:
                        self.sender.send(response)
                    else:
                        self._close(response)
                return
            if "prompt" in message:
                self.prompt = message["prompt"]
            for i in range(self.n):
                self.texts[i].append(texts[i])
                self.logprobs[i].extend(logprobs[i])
            if finish is not None:
                self._close(self._response([self.prompt + "".join(t) for t in self.texts], self.logprobs, message,
                                           finish))

    def _response(self, texts, logprobs, message, finish):
        req = self.request
        tensors = [pb_utils.Tensor("text_output", _strings(texts))]
        if req.want_logprobs:
            tensors.append(pb_utils.Tensor("logprobs", _strings([json.dumps(lp, ensure_ascii=False)
                                                                 for lp in logprobs])))
        if finish is not None:
            if req.want_finish_reason:
                reasons = message.get("finishes") or [finish] * self.n
                tensors.append(pb_utils.Tensor("finish_reason", _strings(reasons)))
            if req.want_input_tokens:
                tensors.append(pb_utils.Tensor("num_input_tokens", np.array([message["input_tokens"]], np.uint32)))
            if req.want_output_tokens:
                tensors.append(pb_utils.Tensor("num_output_tokens", np.array([message["output_tokens"]], np.uint32)))
        return pb_utils.InferenceResponse(tensors)

    def fail(self, message, code):
        with self.lock:
            self._close(pb_utils.InferenceResponse(error=_error(message, code)))

    def _close(self, response=None):
        # Drop the sender with the final flag: Triton keeps the model loaded while a sender lives.
        sender, self.sender = self.sender, None
        if sender is None:
            return
        if response is None:
            sender.send(flags=FINAL)
        else:
            sender.send(response, flags=FINAL)

    def cancelled(self):
        # Under the lock: once _close sent the final flag Triton frees the request's response factory, and
        # is_cancelled() on its sender then reads freed memory in tritonserver (SIGSEGV in
        # TRITONBACKEND_ResponseFactoryIsCancelled, seen with the watcher racing a stream's last reply).
        with self.lock:
            if self.sender is None:
                return False
            try:
                return self.sender.is_cancelled()
            except Exception:  # noqa: BLE001 - a sender Triton already closed: nothing left to cancel
                return False


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        try:
            self.settings = from_parameters(parameters(args))
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"text_generation: {exc}") from None
        s = self.settings
        device = engine_device()
        dtype, why = s.resolved_dtype(device)
        pb_utils.Logger.log_info(f"text_generation: vLLM on {device}, dtype {dtype} ({why}), "
                                 f"max_model_len {s.max_model_len}, "
                                 f"max_num_seqs {s.max_num_seqs}, KV {s.kv_cache_mib} MiB, prefix caching "
                                 f"{s.enable_prefix_caching}, CPUs {s.cpu_list()}")
        engine_settings = {**s.as_dict(), "dtype": dtype, "model": str(version_dir(args) / "export")}
        self.streams = {}
        self.lock = threading.Lock()
        self.metrics = None
        self.usage = Usage(pb_utils, args["model_name"], ("input_tokens", "output_tokens"))
        self.engine = EngineClient(engine_python(s, ROOT), engine_settings, engine_environment(s.cpu_list(), device),
                                   on_stats=self._stats, log=pb_utils.Logger.log_warn)
        try:
            ready = self.engine.wait_ready(s.ready_timeout_s)
        except EngineGone as exc:
            raise pb_utils.TritonModelException(f"text_generation: {exc}") from None
        self.max_model_len = ready["max_model_len"]
        # `load` (this stub's pid) keeps each load's metrics apart: Triton shares one prometheus child
        # between same-named families with equal labels, and an old version's unload during a reload
        # would free the new one's (a heap corruption of tritonserver, seen with hotpath.sweeps.measure.reconfigure).
        self.metrics = EngineMetrics(pb_utils, {"model": args["model_name"], "version": str(args["model_version"]),
                                                "load": str(os.getpid())}, ready["kv_capacity_tokens"])
        self.stopping = threading.Event()
        self.strikes, self.idle_rounds, self.seen_served = 0, 0, False
        name, version = args["model_name"], str(args["model_version"])
        self.watcher = threading.Thread(target=self._watch, args=(lambda: pb_utils.is_model_ready(name, version),),
                                        name="text-generation-watch", daemon=True)
        self.watcher.start()
        pb_utils.Logger.log_info(f"text_generation: engine ready ({ready})")

    def _stats(self, stats):
        if self.metrics is not None:
            self.metrics.publish(stats)

    def execute(self, requests):
        self.seen_served = True   # Triton sends requests only to a READY model
        for request, tenant in zip(requests, tenants_of(requests)):
            sender = request.get_response_sender()
            try:
                if tenant is None:
                    raise InputError(TENANCY_REFUSED)
                parsed = parse_request(self._inputs(request), self.settings.max_tokens_limit,
                                       self.settings.max_input_bytes)
                stream = Stream(sender, parsed, tenant, self.usage)
                rid = uuid.uuid4().hex
                with self.lock:
                    limit = self.settings.max_num_seqs + self.settings.max_queue
                    if len(self.streams) >= limit:
                        stream.fail(f"admission queue full ({len(self.streams)} requests in flight, limit {limit}); "
                                    "retry later", pb_utils.TritonError.UNAVAILABLE)
                        continue
                    self.streams[rid] = stream
                self.engine.submit(parsed.engine_message(rid), self._replier(rid, stream))
            except InputError as exc:
                sender.send(pb_utils.InferenceResponse(error=_error(str(exc), pb_utils.TritonError.INVALID_ARG)),
                            flags=FINAL)
            except EngineGone as exc:
                self._forget(rid)
                stream.fail(str(exc), pb_utils.TritonError.UNAVAILABLE)
            except Exception as exc:  # a bug: a short INTERNAL error (no traceback to the client), final flag sent
                pb_utils.Logger.log_error(f"text_generation: request failed: {exc!r}")
                sender.send(pb_utils.InferenceResponse(
                    error=_error(f"request failed ({type(exc).__name__})", pb_utils.TritonError.INTERNAL)), flags=FINAL)
            del sender
        return None

    def _replier(self, rid, stream):
        def reply(message):
            if message.get("finish") is not None or "error" in message:
                self._forget(rid)
            stream.reply(message)
        return reply

    def _forget(self, rid):
        with self.lock:
            self.streams.pop(rid, None)

    @staticmethod
    def _inputs(request):
        """The request's tensors by name, as sent (None: not sent)."""
        arrays = {}
        for name in INPUTS:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            arrays[name] = None if tensor is None else tensor.as_numpy()
        return arrays

    def _watch(self, is_ready):
        """While requests are in flight: abort those whose client cancelled, and end all of them
        (UNAVAILABLE) once an unload or a shutdown began. Idle: every IDLE_CHECK_ROUNDS-th round, whether
        an unload began that never reached finalize (_idle_round)."""
        while not self.stopping.wait(WATCH_S):
            try:
                if self._watch_once(is_ready):
                    return
            except Exception as exc:  # noqa: BLE001 - a dead watcher would leave streams holding a shutdown
                pb_utils.Logger.log_warn(f"text_generation: watcher round failed: {exc!r}")

    def _watch_once(self, is_ready):
        """One round; True once the model is going away: its streams ended, its engine closed."""
        with self.lock:
            streams = list(self.streams.items())
        if not streams:
            return self._idle_round(is_ready)
        for rid, stream in streams:
            if stream.cancelled():
                self.engine.abort(rid)
        if self._still_served(is_ready):
            return False
        self._drain("the model is being unloaded (server shutdown or model unload); retry later")
        self.engine.close()   # not left to finalize, which Triton may never call (_idle_round)
        return True

    def _idle_round(self, is_ready):
        """Idle, Triton finalizes an unloading model at once, unless something outside this stub still holds
        it: seen with tritonserver 2.51 after cancelled gRPC streams, where the model stayed UNLOADING with
        0 requests in flight and finalize never came until the server's exit timeout. The engine (GBs of
        RSS, two busy processes) then stops here, so it never outlives its model's unload; a request that
        still arrives is answered UNAVAILABLE. Not before the model was once seen served: READY comes only
        after initialize returns."""
        self.idle_rounds += 1
        if self.idle_rounds % IDLE_CHECK_ROUNDS:
            return False
        if self._still_served(is_ready) or not self.seen_served:
            return False
        pb_utils.Logger.log_warn("text_generation: the model is no longer served (unload or shutdown) and no "
                                 "request is in flight: stopping the engine before finalize")
        self.engine.close()
        return True

    def _still_served(self, is_ready):
        box, done = [], threading.Event()

        def check():
            try:
                box.append(bool(is_ready()))
            except Exception as exc:  # noqa: BLE001 - Triton 2.51 answers "Server not ready" once its shutdown began
                box.append("not ready" not in str(exc).lower())
            finally:
                done.set()

        threading.Thread(target=check, name="text-generation-ready-check", daemon=True).start()
        if done.wait(READY_CHECK_TIMEOUT_S):
            self.strikes = 0
            self.seen_served = self.seen_served or box[0]
            return box[0]
        # Unanswered: late on a busy host (ending every stream then would be a false alarm), or a server going
        # away without saying so (live streams would wait out its exit timeout): only repeated silence ends them.
        self.strikes += 1
        pb_utils.Logger.log_warn(f"text_generation: readiness check unanswered for {READY_CHECK_TIMEOUT_S:.0f}s "
                                 f"({self.strikes} of {READY_CHECK_STRIKES})")
        return self.strikes < READY_CHECK_STRIKES

    def _drain(self, message):
        with self.lock:
            streams, self.streams = dict(self.streams), {}
        if streams:
            pb_utils.Logger.log_warn(f"text_generation: ending {len(streams)} request(s): {message}")
        for rid, stream in streams.items():
            self.engine.abort(rid)
            try:
                stream.fail(message, pb_utils.TritonError.UNAVAILABLE)
            except Exception as exc:  # noqa: BLE001 - one closed sender must not keep the others open
                pb_utils.Logger.log_warn(f"text_generation: ending request {rid} failed: {exc!r}")

    def finalize(self):
        self.stopping.set()
        pb_utils.Logger.log_info(f"text_generation: stopping the engine ({len(self.streams)} requests in flight)")
        self._drain("the model is being unloaded; retry later")
        self.engine.close()
        if self.metrics is not None:
            metrics, self.metrics = self.metrics, None
            metrics.stop()
        self.usage.close()
