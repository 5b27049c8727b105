"""Model outputs and the tool calls vLLM's xlam parser reads in them: the corpus of
tests/unit/test_openai_tool_parser.py and of the parity test with vLLM's own parser
(tests/integration/test_openai_tools.py)."""

# (output, content, calls): the forms SmolLM2 and the required-call constraint write, and what is no call.
TRUNCATED = '[{"name": "f", "arguments": {"a": '
OBJECT_BLOCK = '<tool_call>{"name": "f", "arguments": {}}</tool_call>'   # hermes' form: xlam wants a list
CASES = [
    ('<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>', "",
     [("get_weather", '{"city": "Paris"}')]),
    ('<tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {"x": 1}}]</tool_call>', "",
     [("a", "{}"), ("b", '{"x": 1}')]),
    ('Let me check.\n<tool_call>[{"name": "f", "arguments": {"q": "é"}}]</tool_call>', "Let me check.",
     [("f", '{"q": "é"}')]),
    ('[{"name": "f", "arguments": {"n": 2}}]', None, [("f", '{"n": 2}')]),
    ('  [{"name": "f", "arguments": {"n": 2}}]\n', None, [("f", '{"n": 2}')]),
    ('```json\n[{"name": "f", "arguments": {}}]\n```', "", [("f", "{}")]),
    ('[TOOL_CALLS][{"name": "f", "arguments": {}}]', "", [("f", "{}")]),
    ('<tool_call>[{"name": "f", "arguments": "{\\"a\\": 1}"}]</tool_call>', "", [("f", '{"a": 1}')]),
    ("The capital of France is Paris.", "The capital of France is Paris.", []),
    ("<tool_call>[]</tool_call>", "", []),
    (OBJECT_BLOCK, OBJECT_BLOCK, []),
    (TRUNCATED, TRUNCATED, []),
    ("[1, 2, 3]", None, []),
    ("<tool_call>not json</tool_call>", "<tool_call>not json</tool_call>", []),
    ('[{"arguments": {}}]', None, []),
]
