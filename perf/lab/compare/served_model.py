"""The served text_generation model as the perf studies see it: its model directory's tokenizer and chat
template (what vLLM applies; llama.cpp is sent the same prompt token ids) and the dtype it is served in."""

from __future__ import annotations

from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError

ENDPOINT = "text_generation"


def tokenizer_dir() -> Path:
    """The served model directory's tokenizer (genai-perf's --tokenizer: synthetic prompts, token counts)."""
    version = paths.model_repository() / ENDPOINT / "1"
    found = sorted(version.rglob("tokenizer.json")) if version.is_dir() else []
    if not found:
        raise HotpathError(f"no tokenizer.json under {version}: run `hotpath build --model {ENDPOINT}`")
    return found[0].parent


def served_tokenizer():
    """The served model directory's tokenizer (transformers): its chat template is the one vLLM applies."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tokenizer_dir()))


def chat_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The prompt token ids of a chat, as the served model renders it (generation prompt appended)."""
    return list(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=False))


def served_dtype() -> str:
    """The dtype text_generation is served in on this host (build/text_generation.toml [parameters] dtype,
    'auto' resolved as the engine resolves it)."""
    from hotpath.runtime.llm.settings import from_parameters
    from hotpath.specs.spec import load_spec

    spec = load_spec(paths.model_specs_dir() / f"{ENDPOINT}.toml")
    return from_parameters({k: v.string_value for k, v in spec.config.parameters.items()}).resolved_dtype()[0]
