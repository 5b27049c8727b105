"""/tokenize and /detokenize (vLLM's routes and shapes) with a generation model's own tokenizer.

The model's exported directory holds what its engine tokenizes with: tokenizer.json (loaded here with the
tokenizers library) and its chat template (chat_template.jinja, else tokenizer_config.json's), rendered
as Hugging Face renders it (a sandboxed Jinja environment with trim_blocks and lstrip_blocks, `tojson`,
`raise_exception`, the special tokens as variables), so a chat's tokens are the ones the engine process
builds for the same messages (hotpath.runtime.llm.engine_process: the template, then the text encoded
without special tokens).

- tokenize {model, prompt, add_special_tokens = true, return_token_strs = false} or
  {model, messages, add_generation_prompt = true, continue_final_message = false, add_special_tokens = false,
  return_token_strs = false} -> {count, max_model_len, tokens, token_strs}
- detokenize {model, tokens} -> {prompt}: the ids decoded as the tokenizer decodes them (special tokens kept)
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from hotpath.openai_api import errors

CHAT_TEMPLATE_FILE = "chat_template.jinja"
SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token")


class ModelTokenizer:
    """A generation model's tokenizer and chat template, from its exported directory."""

    def __init__(self, export: Path):
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(export / "tokenizer.json"))
        self.vocab_size = self.tokenizer.get_vocab_size(with_added_tokens=True)
        config_file = export / "tokenizer_config.json"
        config = json.loads(config_file.read_text(encoding="utf-8")) if config_file.is_file() else {}
        self.special = {name: _token_text(config.get(name)) for name in SPECIAL_TOKENS if config.get(name)}
        template_file = export / CHAT_TEMPLATE_FILE
        template = template_file.read_text(encoding="utf-8") if template_file.is_file() else config.get("chat_template")
        self.template = _compile(template) if isinstance(template, str) else None

    def encode(self, text: str, add_special_tokens: bool) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids

    def token_strs(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.id_to_token(i) or "" for i in ids]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def render(self, messages: list[dict], add_generation_prompt: bool, continue_final_message: bool) -> str:
        """The conversation as the chat template writes it (Hugging Face's apply_chat_template, tokenize=False)."""
        import jinja2

        if self.template is None:
            raise errors.invalid("this model has no chat template: send 'prompt'", "messages")
        try:
            text = self.template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                                        **self.special)
        except jinja2.TemplateError as exc:   # the template's own refusal (raise_exception): the messages' fault
            raise errors.invalid(f"the chat template refused the messages: {str(exc)[:200]}", "messages",
                                 "invalid_value") from None
        if continue_final_message:   # as transformers: cut after the final message's content
            final = messages[-1]["content"]
            if final in text:
                text = text[: text.rindex(final) + len(final)]
            elif final.strip() in text:
                text = text[: text.rindex(final.strip()) + len(final.strip())]
            else:
                raise errors.invalid("continue_final_message: the final message's content is not in the rendered "
                                     "chat", "continue_final_message")
        return text


def _token_text(value) -> str:
    return value.get("content", "") if isinstance(value, dict) else str(value)


def _compile(template: str):
    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template)


def check_text(text: str, param: str) -> None:
    """400 naming `param` for text that is not valid Unicode (a lone surrogate from a JSON escape)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise errors.invalid(f"{param} is not valid Unicode text (lone surrogate at {exc.start})", param,
                                 "invalid_value") from None


def check_ids(ids: list[int], vocab_size: int) -> None:
    """400 naming `tokens` for an id outside the vocabulary (pydantic already held them to 0..2^32-1)."""
    for i, token in enumerate(ids):
        if not 0 <= token < vocab_size:
            raise errors.invalid(f"tokens[{i}] is {token}, outside this model's vocabulary of {vocab_size} tokens "
                                 f"(0..{vocab_size - 1})", "tokens", "invalid_value")
