"""usage.prompt_tokens of an embeddings request: the tokens the model itself runs on.

The one place the API counts tokens: the endpoint's own tokenizer.json, loaded with the settings its model
applies (hotpath.runtime.text.load_tokenizer: the same truncation at max_length, special tokens included),
so the count is what the encoder saw, a text longer than the context counting max_length.
"""

from __future__ import annotations

from typing import Sequence

from hotpath.openai_api.catalog import Tokenizer
from hotpath.runtime.text import load_tokenizer


class TokenCounter:
    def __init__(self, tokenizer: Tokenizer):
        self._tok = load_tokenizer(tokenizer.path, tokenizer.max_length)
        self._tok.no_padding()

    def count(self, texts: Sequence[str]) -> int:
        """Tokens of all `texts` together, as the model truncates them."""
        if len(texts) == 1:
            return len(self._tok.encode(texts[0]).ids)
        return sum(len(e.ids) for e in self._tok.encode_batch(list(texts)))
