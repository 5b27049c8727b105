"""Chat and text completions mapped onto text_generation's tensors (the vLLM backend's conventions), and
Triton's responses mapped back onto OpenAI's completion objects and stream chunks.

Request tensors (all [1]): `messages` (chat: JSON list of {"role", "content"}, rendered with the model's
own chat template inside the model) or `text_input` (completions: the raw prompt), `stream`,
`exclude_input_in_output` (always true: the answer alone), `return_finish_reason`,
`return_num_input_tokens`, `return_num_output_tokens` (true: usage and finish_reason come from the
engine), `sampling_parameters` (JSON: max_tokens, temperature, top_p, seed, stop, and
structured_outputs for a response_format other than text, as JSON text the way Triton's vLLM backend
takes it; only fields the request set). Responses: `text_output` (a delta per response when streaming, the whole text otherwise),
`finish_reason` (stop | length | cancelled), `num_input_tokens`, `num_output_tokens`.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

import numpy as np
import tritonclient.grpc as grpcclient

from hotpath.openai_api.schemas import ChatCompletionRequest, CompletionRequest

# The tokens a generation produced, as the engine counted them, told to the tenant gateway in-band so that it
# gives back the unused part of the max_tokens it charged (hotpath/gateway/usage.lua, which strips both
# before the client sees them): a header on a whole answer, a last SSE comment after `data: [DONE]` on a
# stream. Sent only behind the gateway (the API without a key of its own).
OUTPUT_TOKENS_HEADER = "x-hotpath-output-tokens"
OUTPUT_TOKENS_COMMENT = b": hotpath-output-tokens="


def output_tokens_comment(tokens: int) -> bytes:
    return OUTPUT_TOKENS_COMMENT + str(int(tokens)).encode() + b"\n\n"


FLAGS = ("exclude_input_in_output", "return_finish_reason", "return_num_input_tokens", "return_num_output_tokens")
FINISH_REASONS = ("stop", "length")


def _bytes(name: str, value: bytes) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, [1], "BYTES")
    t.set_data_from_numpy(np.array([value], dtype=np.object_))
    return t


def _bool(name: str, value: bool) -> grpcclient.InferInput:
    t = grpcclient.InferInput(name, [1], "BOOL")
    t.set_data_from_numpy(np.array([value], dtype=np.bool_))
    return t


def sampling_parameters(request: ChatCompletionRequest | CompletionRequest) -> dict:
    """The engine's sampling_parameters: only what the request set (the engine's defaults otherwise)."""
    params = {"max_tokens": request.token_limit, "temperature": request.temperature, "top_p": request.top_p,
              "seed": request.seed}
    params = {k: v for k, v in params.items() if v is not None}
    if request.stops:
        params["stop"] = request.stops
    structured = request.response_format and request.response_format.structured_outputs()
    if structured:
        params["structured_outputs"] = json.dumps(structured, ensure_ascii=False)
    return params


def messages_json(request: ChatCompletionRequest) -> str:
    """The conversation as the model's `messages` input ("developer" is OpenAI's newer name for system)."""
    return json.dumps([{"role": "system" if m.role == "developer" else m.role, "content": m.text}
                       for m in request.messages], ensure_ascii=False)


def request_inputs(request: ChatCompletionRequest | CompletionRequest) -> list[grpcclient.InferInput]:
    """text_generation's input tensors for a chat or text completion request."""
    if isinstance(request, ChatCompletionRequest):
        inputs = [_bytes("messages", messages_json(request).encode("utf-8"))]
    else:
        inputs = [_bytes("text_input", request.text.encode("utf-8"))]
    inputs.append(_bool("stream", request.stream))
    inputs += [_bool(flag, True) for flag in FLAGS]
    inputs.append(_bytes("sampling_parameters", json.dumps(sampling_parameters(request)).encode("utf-8")))
    return inputs


OUTPUTS = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens")


@dataclass
class Step:
    """One response of the model: a text delta, and on the last one why it ended and the token counts."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    final: bool = False


def _first(result, name: str):
    array = result.as_numpy(name)
    if array is None or array.size == 0:
        return None
    value = array.reshape(-1)[0]
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else value


def parse_step(result) -> Step:
    """A tritonclient InferResult of text_generation as a Step (an empty final response has no outputs)."""
    params = result.get_response().parameters
    final = "triton_final_response" in params and params["triton_final_response"].bool_param
    reason = _first(result, "finish_reason")
    n_in, n_out = _first(result, "num_input_tokens"), _first(result, "num_output_tokens")
    return Step(_first(result, "text_output") or "", reason if reason in (*FINISH_REASONS, "cancelled") else None,
                None if n_in is None else int(n_in), None if n_out is None else int(n_out), final)


@dataclass
class Totals:
    """What a whole generation came to."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def add(self, step: Step) -> None:
        self.text += step.text
        self.finish_reason = step.finish_reason or self.finish_reason
        if step.prompt_tokens is not None:
            self.prompt_tokens = step.prompt_tokens
        if step.completion_tokens is not None:   # the engine counts since the start (or per delta: max wins)
            self.completion_tokens = max(self.completion_tokens, step.completion_tokens)

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


class Completion:
    """OpenAI's objects for one request: the whole answer, or the chunks of its stream."""

    def __init__(self, request: ChatCompletionRequest | CompletionRequest):
        self.chat = isinstance(request, ChatCompletionRequest)
        self.model = request.model
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.include_usage = request.include_usage
        self._object = "chat.completion" if self.chat else "text_completion"

    def _choice(self, text: str | None, finish_reason: str | None, first: bool = False, whole: bool = False) -> dict:
        if not self.chat:
            return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish_reason}
        if whole:
            return {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                    "finish_reason": finish_reason}
        delta = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}

    def whole(self, totals: Totals) -> dict:
        return {"id": self.id, "object": self._object, "created": self.created, "model": self.model,
                "choices": [self._choice(totals.text, totals.finish_reason, whole=True)], "usage": totals.usage()}

    def chunk(self, text: str | None, finish_reason: str | None = None, first: bool = False) -> dict:
        out = {"id": self.id, "object": self._object + (".chunk" if self.chat else ""), "created": self.created,
               "model": self.model, "choices": [self._choice(text, finish_reason, first)]}
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, totals: Totals) -> dict:
        return {"id": self.id, "object": self._object + (".chunk" if self.chat else ""), "created": self.created,
                "model": self.model, "choices": [], "usage": totals.usage()}
