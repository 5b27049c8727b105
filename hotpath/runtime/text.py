"""Text tokenization for the tokenizer Python backend, testable without Triton.

One `encode_batch` call per Triton `execute()`: all texts of all requests are tokenized together,
padded to the longest sequence of that batch, and split back per request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
from tokenizers import Tokenizer


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


def decode_utf8(values: np.ndarray) -> list[str]:
    """BYTES tensor [n, 1] (or [n]) -> list of str; raises ValueError naming the bad item."""
    flat = values.reshape(-1)
    texts = []
    for i, v in enumerate(flat):
        if isinstance(v, str):
            texts.append(v)
            continue
        try:
            texts.append(bytes(v).decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"TEXT[{i}] is not valid UTF-8 ({exc.reason} at byte {exc.start})") from None
    return texts
