"""One text_generation request's tensors (Triton's vLLM backend conventions) -> a checked request.

Inputs (all [1]): text_input (STRING) or hotpath's `messages` (STRING, a JSON list of {"role": system |
user | assistant, "content": str}, rendered with the model's chat template): exactly one of the two;
stream, exclude_input_in_output, return_finish_reason, return_num_input_tokens, return_num_output_tokens,
return_logprobs (BOOL); sampling_parameters (STRING, a JSON object; `structured_outputs` in it constrains the output as
Triton's vLLM backend does: parse_structured). Every fault is an InputError (INVALID_ARGUMENT), raised before
anything is queued. Limits that need the prompt's tokens (max_tokens within the context)
are checked by the engine process before it queues the request.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

from hotpath.runtime.errors import InputError  # noqa: F401 (the stub imports it from here)

TEXT_INPUTS = ("text_input", "messages", "sampling_parameters")
BOOL_INPUTS = ("stream", "exclude_input_in_output", "return_finish_reason", "return_num_input_tokens",
               "return_num_output_tokens", "return_logprobs")
INPUTS = TEXT_INPUTS + BOOL_INPUTS
ROLES = ("system", "user", "assistant")
MAX_STOPS = 16
MAX_STOP_CHARS = 256
INT32_MAX = 2**31 - 1
MAX_N = 8            # choices per request (sampling_parameters.n)
MAX_LOGPROBS = 20    # top log-probabilities per token (vLLM's default max_logprobs)
# Structured output: sampling_parameters' `structured_outputs` (Triton's vLLM backend >= 25.11, vLLM's
# StructuredOutputsParams; `guided_decoding` is its spelling before), exactly one kind of constraint.
STRUCTURED = "structured_outputs"
STRUCTURED_SPELLINGS = (STRUCTURED, "guided_decoding")
STRUCTURED_KINDS = ("json", "json_object", "regex", "choice")
MAX_STRUCTURED_BYTES = 16 * 1024    # the constraint as compact JSON (a schema, a regex, the choices)
MAX_STRUCTURED_DEPTH = 32           # JSON nesting of the constraint
MAX_CHOICES = 256
# key -> (types accepted, check, what the check means)
SAMPLING = {
    "max_tokens": ((int,), lambda v: v >= 1, "an integer >= 1"),
    "min_tokens": ((int,), lambda v: v >= 0, "an integer >= 0 (end-of-sequence ignored until then)"),
    "temperature": ((int, float), lambda v: 0 <= v <= 100, "a number within 0..100 (0: greedy)"),
    "top_p": ((int, float), lambda v: 0 < v <= 1, "a number within (0, 1]"),
    "top_k": ((int,), lambda v: v == -1 or v >= 1, "an integer >= 1, or -1 (all tokens)"),
    "seed": ((int,), lambda v: 0 <= v <= INT32_MAX, f"an integer within 0..{INT32_MAX}"),
    "stop": ((str, list), lambda v: True, "a string or a list of strings"),
    "n": ((int,), lambda v: 1 <= v <= MAX_N, f"an integer within 1..{MAX_N}"),
    "logprobs": ((int,), lambda v: 0 <= v <= MAX_LOGPROBS,
                 f"an integer within 0..{MAX_LOGPROBS} (top log-probabilities per token)"),
}


@dataclass
class Request:
    text: str | None                      # text_input, or None when messages are given
    messages: list[dict] | None
    sampling: dict = field(default_factory=dict)   # checked sampling_parameters (max_tokens filled in later)
    stream: bool = False
    exclude_input: bool = False
    want_finish_reason: bool = False
    want_input_tokens: bool = False
    want_output_tokens: bool = False
    want_logprobs: bool = False           # return_logprobs: the `logprobs` output (needs sampling_parameters.logprobs)

    @property
    def n(self) -> int:
        return self.sampling.get("n", 1)

    def engine_message(self, request_id: str) -> dict:
        """The JSON line the engine process gets for this request."""
        return {"op": "add", "id": request_id, "text": self.text, "messages": self.messages,
                "sampling": self.sampling, "prompt_text": not self.exclude_input}


def _one_string(name: str, array) -> str:
    if array is None:
        raise InputError(f"{name} is missing")
    if array.size != 1:
        raise InputError(f"{name} must hold exactly one element, got {array.size}")
    value = array.reshape(-1)[0]
    if isinstance(value, str):
        return value
    if not isinstance(value, bytes):
        raise InputError(f"{name} must be a string (TYPE_STRING)")
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{name} is not valid UTF-8 (byte {exc.start})") from None


def _one_bool(name: str, array, default: bool) -> bool:
    if array is None:
        return default
    if array.size != 1:
        raise InputError(f"{name} must hold exactly one element, got {array.size}")
    return bool(array.reshape(-1)[0])


def parse_messages(text: str) -> list[dict]:
    try:
        messages = json.loads(text)
    except ValueError as exc:
        raise InputError(f"messages is not valid JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(messages, list) or not messages:
        raise InputError("messages must be a non-empty JSON list of {\"role\", \"content\"} objects")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise InputError(f"messages[{i}] must be an object with exactly the keys role and content")
        if m["role"] not in ROLES:
            raise InputError(f"messages[{i}].role must be one of {', '.join(ROLES)}, got {m['role']!r}"[:200])
        if not isinstance(m["content"], str):
            raise InputError(f"messages[{i}].content must be a string")
    if messages[-1]["role"] == "assistant":
        raise InputError("messages must not end with an assistant turn (the model writes the next one)")
    return messages


def parse_sampling(text: str | None, max_tokens_limit: int) -> dict:
    """sampling_parameters JSON -> a dict of checked values (only the keys SAMPLING knows)."""
    if text is None or not text.strip():
        return {}
    params = _json(text, "sampling_parameters", "is nested too deeply")
    if not isinstance(params, dict):
        raise InputError("sampling_parameters must be a JSON object")
    out = {}
    spellings = [key for key in params if key in STRUCTURED_SPELLINGS]
    if len(spellings) > 1:
        raise InputError(f"sampling_parameters: send one of {' or '.join(STRUCTURED_SPELLINGS)}, not both")
    for key, value in params.items():
        if key in STRUCTURED_SPELLINGS:
            if value is not None:
                out[STRUCTURED] = parse_structured(value, f"sampling_parameters.{key}")
            continue
        if key not in SAMPLING:
            raise InputError(f"sampling_parameters: unknown key {key!r} (known: {', '.join((*SAMPLING, STRUCTURED))})"
                             [:300])
        types, check, meaning = SAMPLING[key]
        if value is None:
            continue
        if isinstance(value, str) and str not in types:
            value = _number(value, types)   # Triton's vLLM backend takes numbers as strings (genai-perf sends them)
        if isinstance(value, bool) or not isinstance(value, types):
            raise InputError(f"sampling_parameters.{key} must be {meaning}, got {json.dumps(value)[:50]}")
        if isinstance(value, float) and not math.isfinite(value):
            raise InputError(f"sampling_parameters.{key} must be finite")
        if not check(value):
            raise InputError(f"sampling_parameters.{key} must be {meaning}, got {value}")
        out[key] = value
    if "max_tokens" in out and out["max_tokens"] > max_tokens_limit:
        raise InputError(f"sampling_parameters.max_tokens must be within 1..{max_tokens_limit}, got {out['max_tokens']}")
    if out.get("min_tokens", 0) > out.get("max_tokens", max_tokens_limit):
        raise InputError(f"sampling_parameters.min_tokens must be at most max_tokens, got {out['min_tokens']}")
    if "stop" in out:
        stops = [out["stop"]] if isinstance(out["stop"], str) else out["stop"]
        if len(stops) > MAX_STOPS or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops):
            raise InputError(f"sampling_parameters.stop must be up to {MAX_STOPS} non-empty strings of at most "
                             f"{MAX_STOP_CHARS} characters")
        out["stop"] = stops
    return out


def _depth(value, limit: int, level: int = 1) -> int:
    """value's JSON nesting depth (a scalar: 0), counting no further than limit + 1."""
    if level > limit or not isinstance(value, (dict, list)):
        return level - 1 + isinstance(value, (dict, list))
    children = value.values() if isinstance(value, dict) else value
    return max([level, *(_depth(child, limit, level + 1) for child in children)])


def parse_structured(value, name: str = f"sampling_parameters.{STRUCTURED}") -> dict:
    """A structured-output constraint -> {kind: value} for vLLM's StructuredOutputsParams: exactly one of
    json (a JSON schema: an object, or its JSON text), json_object (true: any JSON object), regex (a
    non-empty string), choice (a list of non-empty strings). Triton's vLLM backend sends it as JSON text;
    an object is accepted too. Bounded: MAX_STRUCTURED_BYTES as compact JSON, MAX_STRUCTURED_DEPTH levels,
    MAX_CHOICES choices. Whether the grammar backend can compile it is the engine's check (INVALID_ARGUMENT)."""
    kinds = ", ".join(STRUCTURED_KINDS)
    if isinstance(value, str):
        value = _constraint_json(value, name)
    if not isinstance(value, dict):
        raise InputError(f"{name} must be a JSON object (or its JSON text) with one of the keys {kinds}")
    given = {k: v for k, v in value.items() if v is not None}
    unknown = [k for k in given if k not in STRUCTURED_KINDS]
    if unknown:
        raise InputError(f"{name}: unknown key {unknown[0]!r} (known: {kinds})"[:300])
    if len(given) != 1:
        raise InputError(f"{name} must set exactly one of {kinds}, got {len(given)}")
    (kind, constraint), = given.items()
    return {kind: check_constraint(kind, constraint, f"{name}.{kind}")}


def check_constraint(kind: str, constraint, where: str):
    """One structured-output constraint of `kind` checked and bounded (a json schema's text parsed);
    `where` names it in the InputError."""
    if kind == "json" and isinstance(constraint, str):
        constraint = _constraint_json(constraint, where)
    if kind == "json" and not isinstance(constraint, dict):
        raise InputError(f"{where} must be a JSON schema (an object, or its JSON text)")
    if kind == "json_object" and constraint is not True:
        raise InputError(f"{where} must be true")
    if kind == "regex" and (not isinstance(constraint, str) or not constraint):
        raise InputError(f"{where} must be a non-empty string")
    if kind == "choice":
        if (not isinstance(constraint, list) or not 1 <= len(constraint) <= MAX_CHOICES
                or not all(isinstance(c, str) and c for c in constraint)):
            raise InputError(f"{where} must be a list of 1..{MAX_CHOICES} non-empty strings")
    if _depth(constraint, MAX_STRUCTURED_DEPTH) > MAX_STRUCTURED_DEPTH:
        raise InputError(f"{where} is nested deeper than {MAX_STRUCTURED_DEPTH} levels")
    size = len(json.dumps(constraint, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_STRUCTURED_BYTES:
        raise InputError(f"{where} is {size} bytes as JSON, over the {MAX_STRUCTURED_BYTES}-byte limit")
    return constraint


def _number(text: str, types: tuple):
    """A numeric string as the key's type ("48" -> 48, "0.5" -> 0.5); the string itself when it is not one."""
    for kind in types:
        try:
            number = kind(text.strip())
        except ValueError:
            continue
        return number if not isinstance(number, float) or math.isfinite(number) else text
    return text


def _refuse_constant(name: str):
    raise InputError(f"sampling_parameters: {name} is not a number")


def _json(text: str, where: str, too_deep: str):
    """JSON text a client sent -> its value; an InputError naming `where` when it is not JSON, holds NaN or
    Infinity, or nests past the parser's recursion limit (`too_deep` says so)."""
    try:
        return json.loads(text, parse_constant=_refuse_constant)
    except ValueError as exc:
        raise InputError(f"{where} is not valid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise InputError(f"{where} {too_deep}") from None


def _constraint_json(text: str, where: str):
    """A structured-output constraint sent as JSON text, bounded in bytes before it is parsed."""
    if len(text.encode("utf-8")) > MAX_STRUCTURED_BYTES:
        raise InputError(f"{where} is over {MAX_STRUCTURED_BYTES} bytes")
    return _json(text, where, f"is nested deeper than {MAX_STRUCTURED_DEPTH} levels")


def parse_request(arrays: dict, max_tokens_limit: int, max_input_bytes: int) -> Request:
    """A request's tensors (name -> numpy array, None when not sent) -> Request; raises InputError."""
    text_array, messages_array = arrays.get("text_input"), arrays.get("messages")
    if (text_array is None) == (messages_array is None):
        raise InputError("send exactly one of text_input or messages")
    text = messages = None
    if text_array is not None:
        text = _one_string("text_input", text_array)
        if not text:
            raise InputError("text_input is empty")
        size = len(text.encode("utf-8"))
    else:
        raw = _one_string("messages", messages_array)
        size = len(raw.encode("utf-8"))
        if size <= max_input_bytes:
            messages = parse_messages(raw)
    if size > max_input_bytes:
        raise InputError(f"{'text_input' if text is not None else 'messages'} is {size} bytes, over the "
                         f"{max_input_bytes}-byte limit")
    sampling_array = arrays.get("sampling_parameters")
    sampling = parse_sampling(None if sampling_array is None else _one_string("sampling_parameters", sampling_array),
                              max_tokens_limit)
    request = Request(text, messages, sampling,
                      stream=_one_bool("stream", arrays.get("stream"), False),
                      exclude_input=_one_bool("exclude_input_in_output", arrays.get("exclude_input_in_output"), False),
                      want_finish_reason=_one_bool("return_finish_reason", arrays.get("return_finish_reason"), False),
                      want_input_tokens=_one_bool("return_num_input_tokens", arrays.get("return_num_input_tokens"),
                                                  False),
                      want_output_tokens=_one_bool("return_num_output_tokens", arrays.get("return_num_output_tokens"),
                                                   False),
                      want_logprobs=_one_bool("return_logprobs", arrays.get("return_logprobs"), False))
    if request.stream and not request.exclude_input:
        # As Triton's vLLM backend: a stream sends deltas, so it cannot start with the prompt.
        raise InputError("streaming requires exclude_input_in_output = true")
    if request.want_logprobs and "logprobs" not in request.sampling:
        raise InputError("return_logprobs needs sampling_parameters.logprobs (the number of top log-probabilities "
                         "per token, 0 for the chosen token's alone)")
    return request
