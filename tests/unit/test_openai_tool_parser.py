"""hotpath.openai_api.tool_parser: tool calls read from a finished output as vLLM's xlam parser reads them
(tests/integration/test_openai_tools.py compares it with vLLM's own parser on the same corpus)."""

import json

import pytest

from hotpath.openai_api.tool_parser import extract
from tests.tool_outputs import CASES


@pytest.mark.parametrize("output, content, calls", CASES)
def test_extract(output, content, calls):
    found = extract(output)
    assert (found.content, found.calls) == (content, calls)


def test_a_json_object_is_not_a_list_of_calls():
    # xlam wants a list; an object alone is content (the whole output)
    text = '{"name": "f", "arguments": {}}'
    assert extract(text).calls == [] and extract(text).content == text


def test_arguments_keep_their_text():
    arguments = {"city": "São Paulo", "days": 3, "nested": {"a": [1, 2]}}
    found = extract("<tool_call>" + json.dumps([{"name": "f", "arguments": arguments}]) + "</tool_call>")
    assert json.loads(found.calls[0][1]) == arguments and "São" in found.calls[0][1]
