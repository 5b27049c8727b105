"""Token ids -> UTF-8-safe text deltas, with stop strings held back until they are ruled out."""

from __future__ import annotations

from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream


class TextStream:
    """Per-sequence incremental detokenizer.

    `push(token)` returns (text released now, stopped). Text is released only as whole characters
    (tokenizers' DecodeStream waits for the rest of a multi-byte character), and text that could be
    the start of a stop string is held until it either completes the stop string (the stream
    ends, the stop string and anything after it are dropped) or can no longer do so.
    """

    def __init__(self, tokenizer: Tokenizer, stop: tuple[str, ...] = ()):
        self._tokenizer = tokenizer
        self._decode = DecodeStream(skip_special_tokens=True)
        self._stop = stop
        self._held = ""
        self._ids: list[int] = []
        self._decoded = 0  # characters DecodeStream has produced

    def push(self, token_id: int) -> tuple[str, bool]:
        self._ids.append(token_id)
        piece = self._decode.step(self._tokenizer, token_id) or ""
        self._decoded += len(piece)
        if not self._stop:
            return piece, False
        pending = self._held + piece
        hits = [i for i in (pending.find(s) for s in self._stop) if i >= 0]
        if hits:
            self._held = ""
            return pending[:min(hits)], True
        keep = max((k for s in self._stop for k in range(1, len(s)) if pending.endswith(s[:k])), default=0)
        self._held = pending[len(pending) - keep:] if keep else ""
        return pending[:len(pending) - keep], False

    def flush(self) -> str:
        """Text still held back, released when the sequence ends for another reason, plus an
        incomplete trailing character (as the replacement character full decoding gives)."""
        held, self._held = self._held, ""
        full = self._tokenizer.decode(self._ids, skip_special_tokens=True) if self._ids else ""
        return held + full[self._decoded:]
