"""Chat template rendering (the model's Jinja template, rendered as transformers does)."""

from __future__ import annotations

from functools import lru_cache

from jinja2.sandbox import ImmutableSandboxedEnvironment


@lru_cache(maxsize=4)
def _compile(template: str):
    # The same environment settings as transformers' apply_chat_template.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    return env.from_string(template)


def messages(prompt: str, history: list[str] | tuple[str, ...] = ()) -> list[dict]:
    """The conversation: earlier turns (user, assistant, user, assistant, ...), then the new user prompt."""
    if len(history) % 2:
        raise ValueError("history must alternate user and assistant turns (an even count)")
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": t} for i, t in enumerate(history)]
    return turns + [{"role": "user", "content": prompt}]


def render_chat(template: str, prompt: str, bos_token: str = "", eos_token: str = "",
                history: list[str] | tuple[str, ...] = ()) -> str:
    """The conversation, with the generation prompt appended (the assistant's turn opens)."""
    return _compile(template).render(messages=messages(prompt, history),
                                     add_generation_prompt=True, bos_token=bos_token, eos_token=eos_token)


def encode_prompt(tokenizer, template: str, prompt: str, bos_token: str = "", eos_token: str = "",
                  history: list[str] | tuple[str, ...] = ()) -> list[int]:
    """Chat-templated token ids of a user prompt after `history` (special tokens come from the template
    itself, as with transformers' apply_chat_template(tokenize=True))."""
    text = render_chat(template, prompt, bos_token, eos_token, history)
    return tokenizer.encode(text, add_special_tokens=False).ids


def shared_prefix(tokenizer, template: str, bos_token: str = "", eos_token: str = "") -> list[int]:
    """Token ids every templated prompt starts with (system turn and the user turn's opening)."""
    a, b = (encode_prompt(tokenizer, template, p, bos_token, eos_token) for p in ("a", "b"))
    n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return a[:n]
