"""Tool calls in a finished model output, read as vLLM's `xlam` tool parser reads them
(vllm/tool_parsers/xlam_tool_parser.py, xLAMToolParser.extract_tool_calls), re-implemented here because the API
process has no vLLM (it lives in .venv-vllm, beside the engine).

Why xlam: SmolLM2-Instruct learned function calling from Argilla's Synth-APIGen (its model card), an APIGen
(Salesforce xLAM) data set, and answers with a JSON list of calls, `<tool_call>[{"name": ..., "arguments":
{...}}, ...]</tool_call>` (the format SmolLM2's published function-calling prompt asks for). vLLM's xlam parser
reads exactly that: a JSON list inside <tool_call> tags, a ```json block or after [TOOL_CALLS], or the whole
output as a bare JSON list (what the required-call constraint produces). hermes expects one JSON object per
<tool_call> block and would drop the list; pythonic and llama expect other syntaxes.
tests/unit/test_openai_tool_parser.py holds this reading to vLLM's own on a corpus.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# xLAMToolParser's patterns, in its order: the first block whose text is JSON holds the calls.
BLOCKS = (r"```(?:json)?\s*([\s\S]*?)```", r"\[TOOL_CALLS\]([\s\S]*?)(?=\n|$)", r"<tool_call>([\s\S]*?)</tool_call>")
THINKING = r"</think>([\s\S]*)"


@dataclass
class Extracted:
    """What the parser found: the calls as (name, arguments JSON text), and the text around them."""

    content: str | None
    calls: list[tuple[str, str]] = field(default_factory=list)


INVALID = object()


def loads(text: str, invalid=None):
    """`text` parsed as JSON, or `invalid` when it is not JSON (too deep included)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return invalid


def _is_json(text: str) -> bool:
    return loads(text, INVALID) is not INVALID


def _split(output: str) -> tuple[str | None, str | None]:
    """(content, the JSON text that may hold calls): xLAMToolParser.preprocess_model_output."""
    thinking = re.search(THINKING, output)
    if thinking:
        content, after = output[:thinking.start() + len("</think>")].strip(), thinking.group(1).strip()
        if _is_json(after):
            return content, after
        for pattern in BLOCKS:
            for candidate in re.findall(pattern, after):
                if _is_json(candidate):
                    return content, candidate
    for pattern in BLOCKS:
        for candidate in re.findall(pattern, output):
            if _is_json(candidate):
                return re.sub(pattern, "", output).strip(), candidate
    if output.strip().startswith("["):
        if _is_json(output):
            return None, output
        if "{" in output and "name" in output and "arguments" in output:
            return None, output
    return output, None


def extract(output: str) -> Extracted:
    """The tool calls in a whole output (xLAMToolParser.extract_tool_calls): none when nothing parses as a JSON
    list of {"name", "arguments"} objects (the output is then content)."""
    content, candidate = _split(output)
    if not candidate:
        return Extracted(content)
    calls = loads(candidate)
    if not isinstance(calls, list):
        return Extracted(content or output)
    found = []
    for call in calls:
        if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
            continue
        arguments = call["arguments"]
        found.append((call["name"], json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, dict)
                      else arguments))
    return Extracted(content, found)
