"""Text generation (decoupled): PROMPT in, one response per generated token, then a final response.

A thin adapter over hotpath.runtime.generation: `execute()` validates and queues each request and
returns at once; the instance's generation loop (a thread) batches every running sequence into
one decoder call per step and streams tokens back through each request's response sender.
Input faults get INVALID_ARGUMENT; a full admission queue or a shutdown gets UNAVAILABLE.
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
from hotpath.runtime.generation.params import InputError, Limits, parse_history, request_params
from hotpath.runtime.lifetime import exit_with_server

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
OPTIONAL = ("MAX_TOKENS", "TEMPERATURE", "TOP_P", "SEED")


def _bytes(value):
    return np.array([value.encode("utf-8")], dtype=np.object_)


class TritonSink:
    """Sends one sequence's tokens and final response through its request's response sender."""

    def __init__(self, sender):
        self.sender = sender

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
        self.sender.send(pb_utils.InferenceResponse([
            pb_utils.Tensor("TEXT_DELTA", _bytes(text)),
            pb_utils.Tensor("TOKEN_ID", np.array([token_id], np.int32))]))

    def finish(self, text, reason, prompt_tokens, completion_tokens):
        if reason == "cancelled":  # nobody is listening: just close the request
            self._close()
            return
        self._close(pb_utils.InferenceResponse([
            pb_utils.Tensor("TEXT_DELTA", _bytes(text)),
            pb_utils.Tensor("FINISH_REASON", _bytes(reason)),
            pb_utils.Tensor("PROMPT_TOKENS", np.array([prompt_tokens], np.int32)),
            pb_utils.Tensor("COMPLETION_TOKENS", np.array([completion_tokens], np.int32))]))

    def fail(self, message, unavailable=False):
        code = pb_utils.TritonError.UNAVAILABLE if unavailable else pb_utils.TritonError.INTERNAL
        self._close(pb_utils.InferenceResponse(error=pb_utils.TritonError(f"text_generation: {message}", code)))

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
        self.metrics.start()

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            try:
                *values, history = self._inputs(request)
                prompt, params = request_params(self.limits, *values)
                ids = encode_prompt(self.tokenizer, self.info.chat_template, prompt, self.info.bos_token,
                                    self.info.eos_token, parse_history(self.limits, history))
                self.engine.submit(ids, params, TritonSink(sender))
            except InputError as exc:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"text_generation: {exc}", pb_utils.TritonError.INVALID_ARG)), flags=FINAL)
            except QueueFull as exc:
                sender.send(pb_utils.InferenceResponse(error=pb_utils.TritonError(
                    f"text_generation: {exc}", pb_utils.TritonError.UNAVAILABLE)), flags=FINAL)
        return None

    @staticmethod
    def _inputs(request):
        prompt = pb_utils.get_input_tensor_by_name(request, "PROMPT").as_numpy().reshape(-1)[0]
        values = []
        for name in OPTIONAL:
            tensor = pb_utils.get_input_tensor_by_name(request, name)
            values.append(None if tensor is None else tensor.as_numpy().reshape(-1)[0].item())
        lists = [pb_utils.get_input_tensor_by_name(request, name) for name in ("STOP", "HISTORY")]
        return (prompt, *values, *(None if t is None else list(t.as_numpy().reshape(-1)) for t in lists))

    def finalize(self):
        generating, queued = self.engine.load
        pb_utils.Logger.log_info(f"text_generation: stopping the generation loop ({generating} generating, "
                                 f"{queued} queued); {self.engine.stats.breakdown()}; stats {self.engine.stats}")
        self.metrics.stop()
        self.engine.stop()
