"""Text tokenization for the tokenizer Python backend, testable without Triton.

One `encode_batch` call per Triton `execute()`: all texts of all requests are tokenized together,
padded to the longest sequence of that batch, and split back per request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer

from hotpath.runtime.inputs import InputError, column, required


def load_tokenizer(path: Path | str, max_length: int, pad_to_multiple_of: int | None = None) -> Tokenizer:
    """Load a HF fast tokenizer, truncating at `max_length` tokens and padding to the batch's longest.

    With `pad_to_multiple_of`, the padded length is rounded up to a multiple of it. Triton's dynamic
    batcher only groups requests of equal shape, so bucketed lengths let the encoder batch requests
    that the tokenizer saw in different executions; without buckets almost every request has its
    own length and the encoder runs them one by one.
    """
    if pad_to_multiple_of and max_length % pad_to_multiple_of:
        raise ValueError(f"max_length {max_length} must be a multiple of pad_to_multiple_of {pad_to_multiple_of}")
    tok = Tokenizer.from_file(str(path))
    # The shipped tokenizer.json forces fixed padding/truncation at 128; replace both.
    tok.no_padding()
    tok.no_truncation()
    tok.enable_truncation(max_length=max_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]",
                       pad_to_multiple_of=pad_to_multiple_of or None)
    return tok


def encode(tok: Tokenizer, texts: Sequence[str]) -> dict[str, np.ndarray]:
    """Tokenize `texts` in one call; returns int64 arrays [len(texts), longest]."""
    encodings = tok.encode_batch(list(texts))
    return {
        "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
    }


class TextInputError(InputError):
    """A text input the endpoint refuses (not UTF-8, too long); the message names the item and why."""


def decode_utf8(values: np.ndarray, max_bytes: int | None = None, max_chars: int | None = None) -> list[str]:
    """BYTES tensor [n, 1] (or [n]) -> list of str; raises TextInputError naming the bad item.

    `max_bytes` is checked before decoding and `max_chars` after, both before any tokenizing: the
    tokenizer reads the whole text even though the model keeps only its first max_length tokens,
    so one huge text would otherwise hold the step (and every request batched behind it).
    """
    flat = values.reshape(-1)
    texts = []
    for i, v in enumerate(flat):
        if isinstance(v, str):
            text = v
        elif not isinstance(v, bytes):   # bytes(5) would be five NULs: refuse rather than embed them
            raise TextInputError(f"TEXT[{i}] must be bytes (UTF-8), got {type(v).__name__}")
        else:
            raw = v
            if max_bytes is not None and len(raw) > max_bytes:
                raise TextInputError(f"TEXT[{i}] is {len(raw)} bytes, over the limit of {max_bytes}")
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise TextInputError(f"TEXT[{i}] is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
        if max_chars is not None and len(text) > max_chars:
            raise TextInputError(f"TEXT[{i}] is {len(text)} characters, over the limit of {max_chars}")
        texts.append(text)
    return texts


def gather_texts(arrays: Sequence[np.ndarray | None], limits: dict[str, int | None]
                 ) -> tuple[list[str], list[tuple[int, int] | None], list[str | None]]:
    """The TEXT tensors of one execute()'s requests (None: missing) -> all their texts, each request's span in
    that list, and each request's input error (None when fine), so one bad request fails alone."""
    texts: list[str] = []
    spans: list[tuple[int, int] | None] = []
    errors: list[str | None] = []
    for values in arrays:
        try:
            batch = decode_utf8(column(required(values, "TEXT", "BYTES [batch, 1]"), "TEXT"), **limits)
        except InputError as exc:
            errors.append(str(exc))
            spans.append(None)
            continue
        errors.append(None)
        spans.append((len(texts), len(texts) + len(batch)))
        texts.extend(batch)
    return texts, spans, errors
