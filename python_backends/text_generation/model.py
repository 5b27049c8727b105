"""Text generation (decoupled): PROMPT in, one response per generated token, then a final response.

A thin adapter over hotpath.runtime.generation: `execute()` validates and queues each request and
returns at once; the instance's generation loop (a thread) batches every running sequence into
one decoder call per step and streams tokens back through each request's response sender.
Input faults get INVALID_ARGUMENT; a full admission queue or a shutdown gets UNAVAILABLE. Every error
message starts with "text_generation: [STATUS] ": a gRPC stream response carries the message only
(Triton 2.51 sends the status code only to a stream opened with the `triton_grpc_error` header, which then
closes), so hotpath.client reads the class from there. Every request gets its final flag, errors included.

Unload and shutdown: Triton finalizes a decoupled Python model only once all its response senders are
closed, so a watcher polls `pb_utils.is_model_ready` while requests are in flight and, once an unload
or a server shutdown began, ends them (UNAVAILABLE); finalize() then stops the loop.
"""

import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

from hotpath.runtime.backend_args import parameters, version_dir
from hotpath.runtime.generation.chat import encode_prompt, shared_prefix
from hotpath.runtime.generation.decoder import Decoder, ModelInfo
from hotpath.runtime.generation.engine import Engine, EngineSettings, QueueFull
from hotpath.runtime.generation.metrics import EngineMetrics
from hotpath.runtime.generation.params import (
    INPUTS,
    InputError,
    Limits,
    parse_history,
    request_inputs,
    request_params,
    wants_stream,
)
from hotpath.runtime.lifetime import exit_with_server

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def _error(message, code):
    """A TritonError whose message carries its status ("text_generation: [UNAVAILABLE] ...")."""
    # pb_utils.TritonError exists only once the stub has started (not at import time).
    status = {pb_utils.TritonError.INVALID_ARG: "INVALID_ARGUMENT", pb_utils.TritonError.UNAVAILABLE: "UNAVAILABLE"}
    return pb_utils.TritonError(f"text_generation: [{status.get(code, 'INTERNAL')}] {message}", code)


def _bytes(value):
    return np.array([value.encode("utf-8")], dtype=np.object_)


def _refuse(sender, message, code):
    """The request's only response: an error with its code, and the final flag."""
    sender.send(pb_utils.InferenceResponse(error=_error(message, code)), flags=FINAL)


class TritonSink:
    """Sends one sequence's tokens and final response through its request's response sender; with
    `stream` False (request parameter "stream": false) only one response, the whole text in the final."""

    def __init__(self, sender, stream=True):
        self.sender, self.stream, self.text = sender, stream, []

    def _close(self, response=None):
        # Drop the sender with the final flag: Triton keeps the model loaded while a sender lives.
        sender, self.sender = self.sender, None
        if sender is None:
            return
        if response is None:
            sender.send(flags=FINAL)
        else:
            sender.send(response, flags=FINAL)

    def token(self, token_id, text):
        if not self.stream:
            self.text.append(text)
            return
        self.sender.send(pb_utils.InferenceResponse([
            pb_utils.Tensor("TEXT_DELTA", _bytes(text)),
            pb_utils.Tensor("TOKEN_ID", np.array([token_id], np.int32))]))

    def finish(self, text, reason, prompt_tokens, completion_tokens):
        if reason == "cancelled":  # nobody is listening: just close the request
            self._close()
            return
        self._close(pb_utils.InferenceResponse([
            pb_utils.Tensor("TEXT_DELTA", _bytes("".join(self.text) + text)),
            pb_utils.Tensor("FINISH_REASON", _bytes(reason)),
            pb_utils.Tensor("PROMPT_TOKENS", np.array([prompt_tokens], np.int32)),
            pb_utils.Tensor("COMPLETION_TOKENS", np.array([completion_tokens], np.int32))]))

    def fail(self, message, unavailable=False):
        code = pb_utils.TritonError.UNAVAILABLE if unavailable else pb_utils.TritonError.INTERNAL
        self._close(pb_utils.InferenceResponse(error=_error(message, code)))

    def is_cancelled(self):
        return self.sender is None or self.sender.is_cancelled()


class TritonPythonModel:
    def initialize(self, args):
        exit_with_server()   # a crashed tritonserver leaves no orphan stub (hotpath.runtime.lifetime)
        p = parameters(args)
        folder = version_dir(args) / "export"
        info = ModelInfo.load(folder / "generation.json")
        settings = EngineSettings.from_parameters(p)
        self.limits = Limits(default_max_tokens=int(p.get("default_max_tokens", 128)),
                             max_tokens=int(p.get("max_tokens_limit", settings.context)), context=settings.context)
        self.info = info
        self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        decoder = Decoder(folder / "model.onnx", info, intra_op_threads=int(p.get("intra_op_thread_count", 0)),
                          allow_spinning=p.get("allow_spinning", "false").lower() in ("1", "true"))
        self.engine = Engine(decoder, self.tokenizer, settings)
        self.engine.warmup()
        if p.get("reuse_prefix", "true").lower() in ("1", "true"):
            self.engine.set_prefix(shared_prefix(self.tokenizer, info.chat_template, info.bos_token, info.eos_token))
        # `load` (this stub's pid) keeps each load's metrics apart: Triton shares one prometheus child
        # between same-named families with equal labels, and an old version's unload during a reload
        # would free the new one's (a heap corruption of tritonserver, seen with hotpath.perf.measure.reconfigure).
        self.metrics = EngineMetrics(pb_utils, self.engine, {"model": args["model_name"],
                                                             "version": str(args["model_version"]),
                                                             "load": str(os.getpid())})
        self.engine.start()
        name, version = args["model_name"], str(args["model_version"])
        self.engine.watch(lambda: pb_utils.is_model_ready(name, version))
        self.metrics.start()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                values = request_inputs(self._inputs(request))
                history = values.pop("history")
                prompt, params = request_params(self.limits, **values)
                ids = encode_prompt(self.tokenizer, self.info.chat_template, prompt, self.info.bos_token,
                                    self.info.eos_token, parse_history(self.limits, history))
                self.engine.submit(ids, params, TritonSink(sender, wants_stream(request.parameters())))
            except InputError as exc:
                _refuse(sender, str(exc), pb_utils.TritonError.INVALID_ARG)
            except QueueFull as exc:
                _refuse(sender, str(exc), pb_utils.TritonError.UNAVAILABLE)
            except Exception as exc:  # a bug: a short INTERNAL error (no traceback to the client), final flag sent
                pb_utils.Logger.log_error(f"text_generation: request failed: {exc!r}")
                _refuse(sender, f"request failed ({type(exc).__name__})", pb_utils.TritonError.INTERNAL)
            del sender
        return None

    @staticmethod
    def _inputs(request):
        """The request's tensors by name, as sent (None: not sent)."""
        arrays = {}
        for name in INPUTS:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            arrays[name] = None if tensor is None else tensor.as_numpy()
        return arrays

    def finalize(self):
        generating, queued = self.engine.load
        pb_utils.Logger.log_info(f"text_generation: stopping the generation loop ({generating} generating, "
                                 f"{queued} queued); {self.engine.stats.breakdown()}; stats {self.engine.stats}")
        self.metrics.stop()
        self.engine.stop()
