"""Chat and text completions mapped onto text_generation's tensors (the vLLM backend's conventions), and
Triton's responses mapped back onto OpenAI's completion objects and stream chunks.

Request tensors (all [1]): `messages` (chat: JSON list of {"role", "content"}, rendered with the model's
own chat template inside the model) or `text_input` (completions: the raw prompt), `stream`,
`exclude_input_in_output` (always true: the answer alone), `return_finish_reason`,
`return_num_input_tokens`, `return_num_output_tokens` (true: usage and finish_reason come from the
engine), `return_logprobs` (when the request asks for log-probabilities), `sampling_parameters` (JSON:
max_tokens, temperature, top_p, seed, stop, n, logprobs (top log-probabilities per token), and
structured_outputs for a response_format other than text, or for tool_choice required / a named function
(hotpath.openai_api.tool_calling), as JSON text the way Triton's vLLM backend takes it; only fields the request
set). A chat's tools and tool turns reach `messages` as plain turns (hotpath.openai_api.tool_prompt); its output
is read back as tool calls, whole here, streamed in tool_stream. Responses: `text_output` (a delta per response
when streaming, the whole text otherwise),
`finish_reason` (stop | length | cancelled), `logprobs` (JSON: the engine's values for the same tokens), one
element per choice each; `num_input_tokens`, `num_output_tokens` (every choice's tokens together).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import tritonclient.grpc as grpcclient

from hotpath.openai_api.schemas import ChatCompletionRequest, CompletionRequest
from hotpath.openai_api.tool_calling import ToolPlan
from hotpath.openai_api.tool_prompt import engine_messages

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
              "seed": request.seed, "n": request.n, "min_tokens": request.min_tokens, "logprobs": request.top_logprobs_wanted}
    params = {k: v for k, v in params.items() if v is not None}
    if request.stops:
        params["stop"] = request.stops
    structured = request.response_format and request.response_format.structured_outputs()
    if isinstance(request, ChatCompletionRequest):
        structured = ToolPlan.of(request).constraint() or structured   # tool_fault refuses both at once
    if structured:
        params["structured_outputs"] = json.dumps(structured, ensure_ascii=False)
    return params


def messages_json(request: ChatCompletionRequest) -> str:
    """The conversation as the model's `messages` input, with the tools when it may call them."""
    tools = request.tools if ToolPlan.of(request).active else None
    return json.dumps(engine_messages(request.messages, tools), ensure_ascii=False)


def request_inputs(request: ChatCompletionRequest | CompletionRequest) -> list[grpcclient.InferInput]:
    """text_generation's input tensors for a chat or text completion request."""
    if isinstance(request, ChatCompletionRequest):
        inputs = [_bytes("messages", messages_json(request).encode("utf-8"))]
    else:
        inputs = [_bytes("text_input", request.text.encode("utf-8"))]
    inputs.append(_bool("stream", request.stream))
    inputs += [_bool(flag, True) for flag in FLAGS]
    if request.top_logprobs_wanted is not None:
        inputs.append(_bool("return_logprobs", True))
    inputs.append(_bytes("sampling_parameters", json.dumps(sampling_parameters(request)).encode("utf-8")))
    return inputs


OUTPUTS = ("text_output", "finish_reason", "num_input_tokens", "num_output_tokens")
LOGPROBS_OUTPUT = "logprobs"


def request_outputs(request: ChatCompletionRequest | CompletionRequest) -> tuple[str, ...]:
    """The outputs to ask text_generation for (its `logprobs` only when the request wants them)."""
    return OUTPUTS + ((LOGPROBS_OUTPUT,) if request.top_logprobs_wanted is not None else ())


@dataclass
class Step:
    """One response of the model: a text delta per choice, the engine's log-probabilities of its tokens when
    asked, and on the last one why each choice ended and the token counts (every choice's together)."""

    text: str = ""                    # choice 0's delta
    finish_reason: str | None = None  # choice 0's
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    final: bool = False
    texts: list[str] = field(default_factory=list)                  # every choice's delta, by index
    finish_reasons: list[str | None] = field(default_factory=list)  # by index, on the last response
    logprobs: list[list] = field(default_factory=list)              # by index: token entries of this delta

    def text_of(self, index: int) -> str:
        return self.texts[index] if index < len(self.texts) else (self.text if index == 0 else "")

    def logprobs_of(self, index: int) -> list:
        return self.logprobs[index] if index < len(self.logprobs) else []


def _strings(result, name: str) -> list:
    array = result.as_numpy(name)
    if array is None:
        return []
    return [v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in array.reshape(-1)]


def _first(result, name: str):
    values = _strings(result, name)
    return values[0] if values else None


def _reason(value) -> str | None:
    return value if value in (*FINISH_REASONS, "cancelled") else None


def parse_step(result) -> Step:
    """A tritonclient InferResult of text_generation as a Step (an empty final response has no outputs)."""
    params = result.get_response().parameters
    final = "triton_final_response" in params and params["triton_final_response"].bool_param
    texts = _strings(result, "text_output")
    reasons = [_reason(r) for r in _strings(result, "finish_reason")]
    logprobs = [json.loads(text) for text in _strings(result, LOGPROBS_OUTPUT)] \
        if _has_output(result, LOGPROBS_OUTPUT) else []
    n_in, n_out = _first(result, "num_input_tokens"), _first(result, "num_output_tokens")
    return Step(texts[0] if texts else "", reasons[0] if reasons else None,
                None if n_in is None else int(n_in), None if n_out is None else int(n_out), final,
                texts, reasons, [lp if isinstance(lp, list) else [] for lp in logprobs])


def _has_output(result, name: str) -> bool:
    return any(o.name == name for o in result.get_response().outputs)


@dataclass
class Choice:
    """What one choice came to."""

    text: str = ""
    finish_reason: str | None = None
    logprobs: list = field(default_factory=list)   # the engine's token entries, in order


@dataclass
class Totals:
    """What a whole generation came to (text and finish_reason: choice 0's; `choices`: every choice's)."""

    text: str = ""
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    choices: list[Choice] = field(default_factory=list)

    def choice(self, index: int) -> Choice:
        while len(self.choices) <= index:
            self.choices.append(Choice())
        return self.choices[index]

    def add(self, step: Step) -> None:
        self.text += step.text
        self.finish_reason = step.finish_reason or self.finish_reason
        for i, text in enumerate(step.texts or [step.text]):
            self.choice(i).text += text
        for i, reason in enumerate(step.finish_reasons or [step.finish_reason]):
            if reason:
                self.choice(i).finish_reason = reason
        for i, entries in enumerate(step.logprobs):
            self.choice(i).logprobs.extend(entries)
        if step.prompt_tokens is not None:
            self.prompt_tokens = step.prompt_tokens
        if step.completion_tokens is not None:   # the engine counts since the start (or per delta: max wins)
            self.completion_tokens = max(self.completion_tokens, step.completion_tokens)

    def of(self, index: int) -> Choice:
        """Choice `index` (choice 0 of a cached answer: its text and finish reason)."""
        if index < len(self.choices):
            return self.choices[index]
        return Choice(self.text, self.finish_reason) if index == 0 else Choice()

    def answer(self) -> dict:
        """What the answer cache keeps (a single choice without log-probabilities: all it replays)."""
        return {"text": self.text, "finish_reason": self.finish_reason, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens}

    def usage(self) -> dict:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
                "total_tokens": self.prompt_tokens + self.completion_tokens}


LOGPROB_FLOOR = -9999.0   # vLLM's floor for a -inf log-probability (JSON has no infinity)


def _logprob(value) -> float:
    if value is None or value != value:
        return LOGPROB_FLOOR
    return max(float(value), LOGPROB_FLOOR)


def _token(text) -> str:
    return text if isinstance(text, str) else ""


def chat_logprobs(entries: list, top: int) -> dict:
    """OpenAI's chat `logprobs` from the engine's token entries ([id, token, logprob, [[id, token, logprob,
    rank], ...]]): content[] of {token, logprob, bytes, top_logprobs[: top]} (the top by the engine's rank)."""
    content = []
    for _id, token, logprob, ranked in entries:
        token = _token(token)
        best = [r for r in ranked if r[3] is not None and r[3] <= top][:top]
        content.append({"token": token, "logprob": _logprob(logprob), "bytes": list(token.encode("utf-8")),
                        "top_logprobs": [{"token": _token(t), "logprob": _logprob(lp),
                                          "bytes": list(_token(t).encode("utf-8"))} for _i, t, lp, _r in best]})
    return {"content": content}


def completion_logprobs(entries: list, offset: int = 0) -> tuple[dict, int]:
    """OpenAI's legacy completions `logprobs` (tokens, token_logprobs, top_logprobs, text_offset) from the
    engine's token entries, the first token at character `offset` of the choice's text; and the offset after
    them. top_logprobs holds every entry the engine returned: the top `logprobs` and the chosen token."""
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for _id, token, logprob, ranked in entries:
        token = _token(token)
        out["tokens"].append(token)
        out["token_logprobs"].append(_logprob(logprob))
        out["top_logprobs"].append({_token(t): _logprob(lp) for _i, t, lp, _r in ranked})
        out["text_offset"].append(offset)
        offset += len(token)
    return out, offset


class Completion:
    """OpenAI's objects for one request: the whole answer, or the chunks of its stream."""

    def __init__(self, request: ChatCompletionRequest | CompletionRequest):
        self.chat = isinstance(request, ChatCompletionRequest)
        self.model = request.model
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex
        self.created = int(time.time())
        self.include_usage = request.include_usage
        self.n = request.choices
        self.top = request.top_logprobs_wanted   # None: no log-probabilities
        self._offsets = [0] * self.n             # a stream's text_offset per choice (completions)
        self._object = "chat.completion" if self.chat else "text_completion"
        self.tools = ToolPlan.of(request) if self.chat else ToolPlan()

    def _logprobs(self, entries: list | None, index: int):
        if self.top is None:
            return None
        entries = entries or []
        if self.chat:
            return chat_logprobs(entries, self.top)
        rendered, self._offsets[index] = completion_logprobs(entries, self._offsets[index])
        return rendered

    def _choice(self, text: str | None, finish_reason: str | None, first: bool = False, whole: bool = False,
                index: int = 0, logprobs: list | None = None) -> dict:
        rendered = self._logprobs(logprobs, index) if (logprobs or whole) else None
        if not self.chat:
            return {"index": index, "text": text or "", "logprobs": rendered, "finish_reason": finish_reason}
        if whole:
            answer = self.tools.answer(text, finish_reason)
            message = {"role": "assistant", "content": answer.content}
            if answer.tool_calls:
                message["tool_calls"] = answer.tool_calls
            return {"index": index, "message": message, "logprobs": rendered, "finish_reason": answer.finish_reason}
        delta = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
        return {"index": index, "delta": delta, "logprobs": rendered, "finish_reason": finish_reason}

    def whole(self, totals: Totals) -> dict:
        choices = []
        for i in range(self.n):
            choice = totals.of(i)
            choices.append(self._choice(choice.text, choice.finish_reason, whole=True, index=i,
                                        logprobs=choice.logprobs))
        return {"id": self.id, "object": self._object, "created": self.created, "model": self.model,
                "choices": choices, "usage": totals.usage()}

    def chunk(self, text: str | None, finish_reason: str | None = None, first: bool = False, index: int = 0,
              logprobs: list | None = None) -> dict:
        return self._chunk(self._choice(text, finish_reason, first, index=index, logprobs=logprobs))

    def delta_chunk(self, delta: dict, finish_reason: str | None = None, index: int = 0,
                    logprobs: list | None = None) -> dict:
        """A chat chunk carrying `delta` as is (tool_stream's deltas)."""
        rendered = self._logprobs(logprobs, index) if logprobs else None
        return self._chunk({"index": index, "delta": delta, "logprobs": rendered, "finish_reason": finish_reason})

    def _chunk(self, choice: dict) -> dict:
        out = {"id": self.id, "object": self._object + (".chunk" if self.chat else ""), "created": self.created,
               "model": self.model, "choices": [choice]}
        if self.include_usage:
            out["usage"] = None
        return out

    def usage_chunk(self, totals: Totals) -> dict:
        return {"id": self.id, "object": self._object + (".chunk" if self.chat else ""), "created": self.created,
                "model": self.model, "choices": [], "usage": totals.usage()}
