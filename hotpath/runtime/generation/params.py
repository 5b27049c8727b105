"""Per-request generation parameters, validated (input faults raise InputError -> INVALID_ARGUMENT)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np


class InputError(ValueError):
    """The request is malformed; the message names the input at fault."""


@dataclass(frozen=True)
class Limits:
    """Server-side bounds a request must fit."""

    default_max_tokens: int = 128
    max_tokens: int = 1024        # largest MAX_TOKENS accepted
    context: int = 512            # prompt + generated tokens per sequence (the KV slot size)
    max_stop_strings: int = 8
    max_stop_length: int = 64
    max_prompt_bytes: int = 64 * 1024
    max_history_turns: int = 64   # earlier chat turns (user and assistant messages) per request


@dataclass(frozen=True)
class GenerationParams:
    max_tokens: int
    temperature: float = 0.0      # 0: greedy
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = field(default_factory=tuple)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def decode_prompt(raw: bytes | str, limits: Limits) -> str:
    """PROMPT bytes -> text; empty, oversized or non-UTF-8 prompts are refused."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if len(raw) > limits.max_prompt_bytes:
        raise InputError(f"PROMPT is {len(raw)} bytes; the limit is {limits.max_prompt_bytes}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"PROMPT is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    if not text.strip():
        raise InputError("PROMPT is empty")
    return text


def parse_params(limits: Limits, max_tokens: int | None = None, temperature: float | None = None,
                 top_p: float | None = None, seed: int | None = None,
                 stop: list[bytes | str] | None = None) -> GenerationParams:
    """Validate the optional inputs; None means 'not sent' (the default applies)."""
    if max_tokens is None:
        max_tokens = limits.default_max_tokens
    max_tokens = _integer("MAX_TOKENS", max_tokens)
    if not 1 <= max_tokens <= limits.max_tokens:
        raise InputError(f"MAX_TOKENS must be within 1..{limits.max_tokens}, got {max_tokens}")
    temperature = 0.0 if temperature is None else float(temperature)
    if not math.isfinite(temperature) or temperature < 0:
        raise InputError(f"TEMPERATURE must be >= 0 (0 is greedy), got {temperature}")
    top_p = 1.0 if top_p is None else float(top_p)
    if not (math.isfinite(top_p) and 0 < top_p <= 1):
        raise InputError(f"TOP_P must be within (0, 1], got {top_p}")
    seed = None if seed is None else _integer("SEED", seed)
    if seed is not None and seed < 0:
        raise InputError(f"SEED must be >= 0, got {seed}")
    stops = []
    for i, s in enumerate(stop or []):
        try:
            text = s if isinstance(s, str) else bytes(s).decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"STOP[{i}] is not valid UTF-8") from None
        if not text or len(text) > limits.max_stop_length:
            raise InputError(f"STOP[{i}] must be 1..{limits.max_stop_length} characters")
        stops.append(text)
    if len(stops) > limits.max_stop_strings:
        raise InputError(f"at most {limits.max_stop_strings} STOP strings, got {len(stops)}")
    return GenerationParams(max_tokens=max_tokens, temperature=temperature, top_p=top_p,
                            seed=seed, stop=tuple(stops))


def request_params(limits: Limits, prompt: bytes | str, max_tokens=None, temperature=None, top_p=None,
                   seed=None, stop=None) -> tuple[str, GenerationParams]:
    """All inputs of one request (None: not sent) -> (prompt text, parameters); raises InputError."""
    return decode_prompt(prompt, limits), parse_params(limits, max_tokens, temperature, top_p, seed, stop)


def parse_history(limits: Limits, history: list[bytes | str] | None) -> tuple[str, ...]:
    """HISTORY (earlier turns: user, assistant, ...) -> texts; odd counts, non-UTF-8 or oversized refused."""
    turns = []
    for i, raw in enumerate(history or []):
        try:
            turns.append(raw if isinstance(raw, str) else bytes(raw).decode("utf-8"))
        except UnicodeDecodeError:
            raise InputError(f"HISTORY[{i}] is not valid UTF-8") from None
    if len(turns) % 2:
        raise InputError(f"HISTORY must alternate user and assistant turns (an even count), got {len(turns)}")
    if len(turns) > limits.max_history_turns:
        raise InputError(f"at most {limits.max_history_turns} HISTORY turns, got {len(turns)}")
    size = sum(len(t.encode("utf-8")) for t in turns)
    if size > limits.max_prompt_bytes:
        raise InputError(f"HISTORY is {size} bytes; the limit is {limits.max_prompt_bytes}")
    return tuple(turns)


# The request's tensors: name -> whether it is a list (STOP, HISTORY) or one value, and its kind.
SCALARS = {"MAX_TOKENS": "integer", "TEMPERATURE": "number", "TOP_P": "number", "SEED": "integer"}
LISTS = ("STOP", "HISTORY")
INPUTS = ("PROMPT", *SCALARS, *LISTS)


def _integer(name: str, value) -> int:
    """An integer input as a Python int, refused (not truncated) when it is not a whole number."""
    if isinstance(value, (bool, np.bool_)):
        raise InputError(f"{name} must be an integer, got {value!r}")
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)) and math.isfinite(value) and float(value).is_integer():
        return int(value)
    raise InputError(f"{name} must be an integer, got {value!r}")


def _one(name: str, array: np.ndarray) -> Any:
    if array.size != 1:
        raise InputError(f"{name} must hold exactly one value, got shape {list(array.shape)}")
    return array.reshape(-1)[0]


def request_inputs(arrays: Mapping[str, np.ndarray | None]) -> dict[str, Any]:
    """One request's tensors (name -> numpy array, None or absent when not sent) -> the keyword arguments
    of `request_params` plus `history`; a missing PROMPT, a tensor of the wrong size or kind is an
    InputError naming it. Values are read at the width they arrived in (no narrowing: an INT64 MAX_TOKENS
    of 2**32 + 4 stays 2**32 + 4 and is refused by the range check)."""
    prompt = arrays.get("PROMPT")
    if prompt is None:
        raise InputError("PROMPT is required (BYTES, one UTF-8 text)")
    raw = _one("PROMPT", prompt)
    if not isinstance(raw, (bytes, str, np.bytes_, np.str_)):
        raise InputError(f"PROMPT must be BYTES (UTF-8 text), got {prompt.dtype}")
    out: dict[str, Any] = {"prompt": bytes(raw) if isinstance(raw, (bytes, np.bytes_)) else str(raw)}
    for name, kind in SCALARS.items():
        array = arrays.get(name)
        if array is None:
            out[name.lower()] = None
            continue
        value = _one(name, array)
        if kind == "integer":
            if not np.issubdtype(array.dtype, np.integer):
                raise InputError(f"{name} must be an integer tensor, got {array.dtype}")
            out[name.lower()] = int(value)
        else:
            if not (np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)):
                raise InputError(f"{name} must be a number, got {array.dtype}")
            out[name.lower()] = float(value)
    for name in LISTS:
        array = arrays.get(name)
        if array is not None and array.dtype != np.object_ and array.dtype.kind not in "SU":
            raise InputError(f"{name} must be BYTES (UTF-8 texts), got {array.dtype}")
        out[name.lower()] = None if array is None else list(array.reshape(-1))
    return out


def wants_stream(parameters: str | dict | None) -> bool:
    """The request parameter "stream" (default true: one response per token). False: one response with
    the whole text, for Triton's HTTP `/generate`, which takes exactly one response and fixes its HTTP
    status from the first one (a token stream there ends 200 with an error body; `/generate_stream` and
    gRPC streams take one response per token). A key of a `/generate` body that names no input arrives
    as a request parameter: `{"PROMPT": "...", "stream": false}`."""
    if isinstance(parameters, str):
        try:
            parameters = json.loads(parameters or "{}")
        except ValueError:
            parameters = {}
    value = (parameters or {}).get("stream", True)
    if not isinstance(value, bool):
        raise InputError(f"parameter stream must be true or false, got {value!r}")
    return value
