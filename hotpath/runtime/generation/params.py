"""Per-request generation parameters, validated (input faults raise InputError -> INVALID_ARGUMENT)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


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
    max_tokens = int(max_tokens)
    if not 1 <= max_tokens <= limits.max_tokens:
        raise InputError(f"MAX_TOKENS must be within 1..{limits.max_tokens}, got {max_tokens}")
    temperature = 0.0 if temperature is None else float(temperature)
    if not math.isfinite(temperature) or temperature < 0:
        raise InputError(f"TEMPERATURE must be >= 0 (0 is greedy), got {temperature}")
    top_p = 1.0 if top_p is None else float(top_p)
    if not (math.isfinite(top_p) and 0 < top_p <= 1):
        raise InputError(f"TOP_P must be within (0, 1], got {top_p}")
    if seed is not None and int(seed) < 0:
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
                            seed=None if seed is None else int(seed), stop=tuple(stops))


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
