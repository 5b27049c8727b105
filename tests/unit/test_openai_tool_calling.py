"""Chat tools without a server: request validation (400s naming the field), the required/named constraint, the
conversation as the engine gets it, and outputs read back as calls, whole and streamed."""

import json

import pytest
from jsonschema import Draft202012Validator
from pydantic import ValidationError

from hotpath.openai_api import errors
from hotpath.openai_api.generation import Choice, Completion, Totals, messages_json, sampling_parameters
from hotpath.openai_api.schemas import CHAT_REFUSED, DEPRECATED, ChatCompletionRequest
from hotpath.openai_api.tool_calling import ToolPlan, tool_fault
from hotpath.openai_api.tool_prompt import TOOLS_PROMPT, engine_messages
from hotpath.openai_api.tool_stream import ToolStream, opening

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string"},
                                                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                                                "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string"}}, "required": ["zone"]}}}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate_json(json.dumps({"model": "m", "messages": [USER], **fields}))


def _param(**fields) -> str:
    with pytest.raises(ValidationError) as exc:
        _request(**fields)
    return errors.from_validation(exc.value).param


def _call(call_id="call_1", name="get_weather", arguments='{"city": "Paris"}'):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- validation

@pytest.mark.parametrize("parameters", [
    {"type": "objekt"}, {"type": "object", "properties": 5}, {"type": "object", "required": "city"},
    {"type": "string"}, {"type": "object", "properties": {"a": {"type": "integer", "minimum": "zero"}}},
    [1, 2], "an object",
])
def test_a_bad_parameters_schema_is_a_400_naming_it(parameters):
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters}}
    assert _param(tools=[WEATHER, tool]) == "tools[1].function.parameters"


@pytest.mark.parametrize("tools, param", [
    ([{"type": "function", "function": {"name": "has space"}}], "tools[0].function.name"),
    ([{"type": "function", "function": {"name": "x" * 65}}], "tools[0].function.name"),
    ([{"type": "retrieval", "function": {"name": "f"}}], "tools[0].type"),
    ([{"type": "function"}], "tools[0].function"),
    ([{"type": "function", "function": {"name": "f", "extra": 1}}], "tools[0].function.extra"),
    ([WEATHER] * 129, "tools"),
])
def test_bad_tools_name_the_field(tools, param):
    assert _param(tools=tools) == param


def test_tool_choice_values():
    assert _param(tools=[WEATHER], tool_choice="sometimes") == "tool_choice"
    assert {ToolPlan.of(_request(tools=[WEATHER], tool_choice=c)).mode for c in ("none", "auto", "required")} \
        == {"none", "auto", "required"}
    assert ToolPlan.of(_request(tools=[WEATHER])).mode == "auto" and ToolPlan.of(_request()).mode == "none"
    named = ToolPlan.of(_request(tools=[WEATHER, TIME], tool_choice={"type": "function",
                                                                      "function": {"name": "get_time"}}))
    assert (named.mode, named.named) == ("named", "get_time")


@pytest.mark.parametrize("fields, param", [
    (dict(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_time"}}), "tool_choice"),
    (dict(tool_choice="required"), "tool_choice"),
    (dict(tools=[WEATHER, WEATHER]), "tools[1].function.name"),
    (dict(tools=[WEATHER], tool_choice="required", response_format={"type": "json_object"}), "response_format"),
    (dict(tools=[WEATHER], messages=[USER, {"role": "assistant", "content": None,
                                            "tool_calls": [_call(name="get_time")]}, {"role": "user", "content": "?"}]),
     "messages[1].tool_calls[0].function.name"),
    (dict(messages=[USER, {"role": "assistant", "content": None, "tool_calls": [_call()]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
     "messages[1].tool_calls[0].function.name"),   # a call in history needs its tool offered
    (dict(tools=[WEATHER], messages=[USER, {"role": "assistant", "content": None, "tool_calls": [_call()]},
                                     {"role": "tool", "tool_call_id": "call_2", "content": "sunny"}]),
     "messages[2].tool_call_id"),
    (dict(tools=[WEATHER], messages=[{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, USER]),
     "messages[0].tool_call_id"),
])
def test_tools_that_do_not_hold_together_name_the_field(fields, param):
    assert tool_fault(_request(**fields))[1] == param


def test_a_coherent_tool_loop_is_accepted():
    request = _request(tools=[WEATHER], messages=[
        USER, {"role": "assistant", "content": None, "tool_calls": [_call()]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}], parallel_tool_calls=False)
    assert tool_fault(request) is None and CHAT_REFUSED.check(request) is None


@pytest.mark.parametrize("message, param", [
    ({"role": "tool", "content": "x"}, "messages[0]"),                     # no tool_call_id
    ({"role": "user", "content": None}, "messages[0]"),
    ({"role": "assistant", "content": None}, "messages[0]"),               # null content needs tool_calls
    ({"role": "user", "content": "x", "tool_calls": [_call()]}, "messages[0]"),
    ({"role": "user", "content": "x", "tool_call_id": "c"}, "messages[0]"),
    ({"role": "function", "content": "x"}, "messages[0].role"),
    ({"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
                                                             "function": {"name": "f", "arguments": {}}}]},
     "messages[0].tool_calls[0].function.arguments"),                      # arguments are JSON text
])
def test_message_shapes(message, param):
    assert _param(messages=[message]) == param


def test_functions_stay_refused_pointing_at_tools():
    request = _request(functions=[{"name": "f", "parameters": {}}])
    refused = CHAT_REFUSED.check(request)
    error = errors.unsupported(refused, DEPRECATED.get(refused))
    assert (refused, error.status, error.param) == ("functions", 400, "functions") and "'tools'" in error.message
    assert CHAT_REFUSED.check(_request(function_call="auto")) == "function_call"


# -- the constraint: only valid calls to the offered tools

def test_required_admits_only_valid_calls():
    request = _request(tools=[WEATHER, TIME], tool_choice="required")
    schema = json.loads(sampling_parameters(request)["structured_outputs"])["json"]
    valid = Draft202012Validator(schema).is_valid
    assert valid([{"name": "get_weather", "arguments": {"city": "Paris"}}])
    assert valid([{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "celsius"}},
                  {"name": "get_time", "arguments": {"zone": "UTC"}}])
    for bad in ([], [{"name": "get_news", "arguments": {}}], [{"name": "get_weather", "arguments": {}}],
                [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "kelvin"}}],
                [{"name": "get_weather", "arguments": {"city": 3}}], {"name": "get_weather", "arguments": {}},
                [{"name": "get_time", "arguments": {"zone": "UTC"}, "extra": 1}]):
        assert not valid(bad), bad
    single = ToolPlan.of(_request(tools=[WEATHER], tool_choice="required", parallel_tool_calls=False)).constraint()
    assert not Draft202012Validator(single["json"]).is_valid([{"name": "get_weather", "arguments": {"city": "a"}}] * 2)


def test_named_is_the_functions_arguments():
    request = _request(tools=[WEATHER, TIME], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert json.loads(sampling_parameters(request)["structured_outputs"]) == \
        {"json": WEATHER["function"]["parameters"]}
    assert "structured_outputs" not in sampling_parameters(_request(tools=[WEATHER]))
    assert "structured_outputs" not in sampling_parameters(_request(tools=[WEATHER], tool_choice="none"))


def test_no_parameters_means_no_arguments():
    plan = ToolPlan.of(_request(tools=[{"type": "function", "function": {"name": "ping"}}], tool_choice="required"))
    assert plan.constraint()["json"]["items"]["properties"]["arguments"] == {"type": "object", "properties": {}}


# -- the conversation as the engine gets it

def test_tools_and_tool_turns_as_plain_turns():
    request = _request(tools=[WEATHER], messages=[
        {"role": "developer", "content": "Be brief."}, USER,
        {"role": "assistant", "content": None, "tool_calls": [_call()]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}])
    turns = json.loads(messages_json(request))
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[0]["content"].startswith(TOOLS_PROMPT.split("{tools}")[0]) and turns[0]["content"].endswith("Be brief.")
    assert '"name": "get_weather"' in turns[0]["content"]
    assert turns[2]["content"] == '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>'
    assert turns[3]["content"] == 'The result of get_weather({"city": "Paris"}) is: sunny'
    assert all(set(t) == {"role", "content"} and isinstance(t["content"], str) for t in turns)
    # tool_choice none: the tools are not shown (the model answers in text), the history still is
    unseen = json.loads(messages_json(_request(tools=[WEATHER], tool_choice="none", messages=request.model_dump()["messages"])))
    assert unseen[0] == {"role": "system", "content": "Be brief."} and unseen[2] == turns[2]
    assert engine_messages([USER_MSG]) == [USER]


USER_MSG = ChatCompletionRequest.model_validate({"model": "m", "messages": [USER]}).messages[0]


# -- outputs read back

def _whole(request, text, reason="stop"):
    return Completion(request).whole(Totals(choices=[Choice(text, reason)]))["choices"][0]


def test_whole_answers():
    auto = _request(tools=[WEATHER, TIME])
    choice = _whole(auto, '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, '
                          '{"name": "get_time", "arguments": {"zone": "CET"}}]</tool_call>')
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    calls = choice["message"]["tool_calls"]
    assert [(c["type"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("function", "get_weather", {"city": "Paris"}), ("function", "get_time", {"zone": "CET"})]
    assert len({c["id"] for c in calls}) == 2 and all(c["id"].startswith("call_") for c in calls)
    # an unknown function, or arguments that are no object: no call, the output is content
    for text in ('<tool_call>[{"name": "get_news", "arguments": {}}]</tool_call>',
                 '<tool_call>[{"name": "get_weather", "arguments": "Paris"}]</tool_call>', "It is sunny."):
        assert _whole(auto, text) == {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": "stop"}
    one = _request(tools=[WEATHER, TIME], parallel_tool_calls=False)
    assert len(_whole(one, '[{"name": "get_weather", "arguments": {"city": "a"}}, '
                           '{"name": "get_time", "arguments": {"zone": "b"}}]')["message"]["tool_calls"]) == 1
    named = _request(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = _whole(named, '{"city": "Paris"}')
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["tool_calls"][0]["function"] == \
        {"name": "get_weather", "arguments": '{"city": "Paris"}'}
    cut = _whole(_request(tools=[WEATHER], tool_choice="required"), '[{"name": "get_weather", "argu', "length")
    assert cut["finish_reason"] == "length" and cut["message"] == {"role": "assistant",
                                                                  "content": '[{"name": "get_weather", "argu'}
    plain = _whole(_request(tools=[WEATHER], tool_choice="none"), '[{"name": "get_weather", "arguments": {}}]')
    assert plain["finish_reason"] == "stop" and "tool_calls" not in plain["message"]


@pytest.mark.parametrize("text, verdict", [("", None), ("  ", None), ("<tool", None), ("<tool_call>[", "calls"),
                                           ("[", "calls"), ("`", None), ("```json", "calls"), ("The", "content"),
                                           ("<b>", "content"), (" Sure", "content")])
def test_opening(text, verdict):
    assert opening(text) == verdict


def _stream(plan, pieces, reason="stop"):
    stream, deltas = ToolStream(plan), []
    for piece in pieces:
        deltas += [d for d, _ in stream.feed(piece)]
    last, finish = stream.end(reason)
    return deltas + [d for d, _ in last], finish


def _assemble(deltas):
    """What the openai SDK builds from the deltas: content and calls by index."""
    content, calls = None, {}
    for delta in deltas:
        if delta.get("content"):
            content = (content or "") + delta["content"]
        for piece in delta.get("tool_calls", ()):
            call = calls.setdefault(piece["index"], {"id": None, "name": "", "arguments": ""})
            call["id"] = piece.get("id", call["id"])
            call["name"] += piece.get("function", {}).get("name", "")
            call["arguments"] += piece.get("function", {}).get("arguments", "")
    return content, [calls[i] for i in sorted(calls)]


def test_streamed_calls_assemble_to_the_whole_answer():
    text = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>'
    for request in (_request(tools=[WEATHER]), _request(tools=[WEATHER], tool_choice="required")):
        plan = ToolPlan.of(request)
        source = text if plan.mode == "auto" else '[{"name": "get_weather", "arguments": {"city": "Paris"}}]'
        deltas, finish = _stream(plan, [source[i:i + 5] for i in range(0, len(source), 5)])
        content, calls = _assemble(deltas)
        assert finish == "tool_calls" and content is None
        assert [(c["name"], json.loads(c["arguments"])) for c in calls] == [("get_weather", {"city": "Paris"})]
        assert calls[0]["id"].startswith("call_")
    named = ToolPlan.of(_request(tools=[WEATHER], tool_choice={"type": "function", "function": {"name": "get_weather"}}))
    deltas, finish = _stream(named, ['{"ci', 'ty": "Pa', 'ris"}'])
    assert len(deltas) == 4 and deltas[0]["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": ""}
    assert finish == "tool_calls" and _assemble(deltas)[1][0]["arguments"] == '{"city": "Paris"}'


def test_streamed_content_starts_once_it_cannot_be_a_call():
    plan = ToolPlan.of(_request(tools=[WEATHER]))
    stream = ToolStream(plan)
    assert stream.feed(" ") == [] and stream.feed("It", [["e1"]]) == [({"content": " It"}, [["e1"]])]
    assert stream.feed(" is sunny.") == [({"content": " is sunny."}, [])]
    assert stream.end("stop") == ([], "stop")
    # an opening that looked like a call but was not: the whole text, once, at the end
    deltas, finish = _stream(plan, ["[1, ", "2]"])
    assert deltas == [{"content": "[1, 2]"}] and finish == "stop"


def test_a_replayed_answer_streams_as_calls():
    """A cached answer replayed as a stream (the answer cache keeps the text): the same chunks as a live one."""
    from hotpath.openai_api.tool_stream import tool_chunks

    completion = Completion(_request(tools=[WEATHER], tool_choice="required", stream=True))
    chunks = tool_chunks(completion, 0, ToolStream(completion.tools),
                         '[{"name": "get_weather", "arguments": {"city": "Paris"}}]', [], "stop")
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": None} and deltas[-1] == {}
    assert _assemble(deltas[1:-1])[1][0]["name"] == "get_weather"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * (len(chunks) - 1) + ["tool_calls"]
