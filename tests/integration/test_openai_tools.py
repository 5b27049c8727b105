"""Tool calling on /v1/chat/completions against the real stack (tritonserver serving text_generation on vLLM, and the
API process), driven by the openai SDK, LangChain's ChatOpenAI.bind_tools and LiteLLM.

`required` and a named function are held by the engine's structured outputs to valid calls of the offered tools:
every answer is checked against the tool's own schema. `auto` is the model's choice, read with vLLM's xlam format:
SmolLM2-135M calls a tool when the conversation shows it how (one earlier call), and answers in text otherwise.
Streams are assembled by the SDK's own ChatCompletionStreamState and must equal the whole answers. Faults are 400s
naming the field.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import openai
import pytest
from jsonschema import Draft202012Validator
from openai.lib.streaming.chat import ChatCompletionStreamState

from hotpath import paths

GEN = "text_generation"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Get the current time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string"}, "hours24": {"type": "boolean"}},
                   "required": ["zone"]}}}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
QUESTIONS = ["What is the weather in Paris?", "What time is it in Tokyo?", "Tell me a joke about cats.",
             "Is it raining in Buenos Aires right now? Answer in fahrenheit."]
PARIS = [{"role": "user", "content": "What is the weather in Paris?"}]
# One call shown in the conversation: what SmolLM2-135M needs to call a tool on its own (auto).
SHOWN = [*PARIS, {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
    {"role": "user", "content": "What is the weather in London?"}]


# Room for the calls: the JSON grammar lets the model write whitespace, and it does (81 tokens for two calls).
CALL_TOKENS = 256


def _chat(chat_sdk, messages, max_tokens=64, **fields):
    return chat_sdk.chat.completions.create(model=GEN, messages=messages, temperature=0, max_tokens=max_tokens, **fields)


def _streamed(chat_sdk, messages, max_tokens=64, **fields):
    """The streamed answer as the openai SDK assembles it (its ChatCompletionStreamState)."""
    state = ChatCompletionStreamState()
    for chunk in chat_sdk.chat.completions.create(model=GEN, messages=messages, temperature=0, max_tokens=max_tokens,
                                             stream=True, **fields):
        state.handle_chunk(chunk)
    return state.get_final_completion()


def _calls(choice) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls or ()]


def _valid_calls(choice, names=tuple(SCHEMAS)) -> list[tuple[str, dict]]:
    calls = _calls(choice)
    assert choice.finish_reason == "tool_calls" and calls, choice
    for name, arguments in calls:
        assert name in names
        Draft202012Validator(SCHEMAS[name]).validate(arguments)
    ids = [c.id for c in choice.message.tool_calls]
    assert len(set(ids)) == len(ids) and all(i.startswith("call_") for i in ids)
    assert all(c.type == "function" for c in choice.message.tool_calls)
    return calls


# -- required and named: a valid call every time

@pytest.mark.parametrize("question", QUESTIONS)
def test_required_answers_valid_calls_whole_and_streamed(chat_sdk, question):
    messages = [{"role": "user", "content": question}]
    whole = _chat(chat_sdk, messages, CALL_TOKENS, tools=TOOLS, tool_choice="required")
    calls = _valid_calls(whole.choices[0])
    assert whole.choices[0].message.content is None
    streamed = _streamed(chat_sdk, messages, CALL_TOKENS, tools=TOOLS, tool_choice="required")
    assert _valid_calls(streamed.choices[0]) == calls   # greedy: the same calls
    one = _chat(chat_sdk, messages, CALL_TOKENS, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    assert len(_valid_calls(one.choices[0])) == 1


def test_required_with_several_sampled_choices(chat_sdk):
    """Sampled (temperature 1) the model may list calls past any max_tokens; one call each keeps them whole."""
    answer = chat_sdk.chat.completions.create(model=GEN, messages=PARIS, tools=TOOLS, tool_choice="required", n=3,
                                         temperature=1.0, seed=3, max_tokens=CALL_TOKENS, parallel_tool_calls=False)
    assert [c.index for c in answer.choices] == [0, 1, 2]
    for choice in answer.choices:
        assert len(_valid_calls(choice)) == 1


@pytest.mark.parametrize("name", ["get_weather", "get_time"])
def test_named_function_is_called_whatever_the_question(chat_sdk, name):
    choice = {"type": "function", "function": {"name": name}}
    for question in ("What is the weather in Paris?", "What time is it in Tokyo?"):
        messages = [{"role": "user", "content": question}]
        whole = _chat(chat_sdk, messages, CALL_TOKENS, tools=TOOLS, tool_choice=choice)
        calls = _valid_calls(whole.choices[0], (name,))
        assert len(calls) == 1
        streamed = _streamed(chat_sdk, messages, CALL_TOKENS, tools=TOOLS, tool_choice=choice)
        assert _valid_calls(streamed.choices[0], (name,)) == calls


def test_named_stream_sends_the_call_then_argument_pieces(chat_sdk):
    stream = chat_sdk.chat.completions.create(model=GEN, messages=PARIS, tools=TOOLS, temperature=0, max_tokens=CALL_TOKENS,
                                         tool_choice={"type": "function", "function": {"name": "get_weather"}},
                                         stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    first = deltas[1].tool_calls[0]
    assert (first.index, first.type, first.function.name, first.function.arguments) == (0, "function", "get_weather", "")
    pieces = [d.tool_calls[0].function.arguments for d in deltas[2:] if d.tool_calls]
    assert len(pieces) > 2 and all(d.tool_calls[0].id is None for d in deltas[2:] if d.tool_calls)   # streamed as made
    assert json.loads("".join(pieces))["city"] == "Paris"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"
    assert chunks[-1].usage.completion_tokens > 0


# -- auto: the model decides

def test_auto_parses_the_models_call(chat_sdk):
    whole = _chat(chat_sdk, SHOWN, tools=TOOLS)
    assert _valid_calls(whole.choices[0]) == [("get_weather", {"city": "London"})]
    assert whole.choices[0].message.content is None
    streamed = _streamed(chat_sdk, SHOWN, tools=TOOLS)
    assert _calls(streamed.choices[0]) == _calls(whole.choices[0]) and streamed.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("question", ["Tell me a joke about cats.", "What is the capital of France?"])
def test_auto_answers_in_text_when_the_model_does_not_call(chat_sdk, question):
    messages = [{"role": "user", "content": question}]
    whole = _chat(chat_sdk, messages, tools=TOOLS, tool_choice="auto")
    choice = whole.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason in ("stop", "length") and choice.message.content
    streamed = _streamed(chat_sdk, messages, tools=TOOLS, tool_choice="auto").choices[0]
    assert (streamed.message.content, streamed.finish_reason) == (choice.message.content, choice.finish_reason)
    assert not streamed.message.tool_calls


def test_none_hides_the_tools(chat_sdk):
    """tool_choice none answers as if no tools were offered (the model does not see them): same greedy text."""
    for messages in (PARIS, SHOWN):
        none = _chat(chat_sdk, messages, tools=TOOLS, tool_choice="none").choices[0]
        assert none.message.tool_calls is None and none.finish_reason in ("stop", "length")
        if messages is PARIS:
            assert none.message.content == _chat(chat_sdk, messages).choices[0].message.content
    # the shown call is plain text under none: content, never parsed
    assert "<tool_call>" in _chat(chat_sdk, SHOWN, tools=TOOLS, tool_choice="none").choices[0].message.content


def test_a_tool_loop_with_the_sdk(chat_sdk):
    first = _chat(chat_sdk, PARIS, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    message = first.choices[0].message
    messages = [*PARIS, message.model_dump(exclude_none=True),
                *({"role": "tool", "tool_call_id": c.id, "content": "sunny, 21 C"} for c in message.tool_calls)]
    final = _chat(chat_sdk, messages, tools=TOOLS, tool_choice="none").choices[0]
    assert final.finish_reason == "stop" and "sunny" in final.message.content.lower()


# -- faults: 400 naming the field

def _refused(chat_sdk, **fields) -> dict:
    with pytest.raises(openai.BadRequestError) as err:
        chat_sdk.chat.completions.create(model=GEN, max_tokens=8, **{"messages": PARIS, **fields})
    body = err.value.body
    assert set(body) == {"message", "type", "param", "code"} and "Traceback" not in body["message"]
    return body


@pytest.mark.parametrize("parameters", [{"type": "objekt"}, {"type": "string"}, {"type": "object", "properties": 1},
                                        {"type": "object", "required": "city"}])
def test_a_bad_parameters_schema_is_a_400(chat_sdk, parameters):
    bad = {"type": "function", "function": {"name": "broken", "parameters": parameters}}
    assert _refused(chat_sdk, tools=[WEATHER, bad])["param"] == "tools[1].function.parameters"


@pytest.mark.parametrize("fields, param", [
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_news"}}), "tool_choice"),
    (dict(tools=[TIME], messages=SHOWN), "messages[1].tool_calls[0].function.name"),
    (dict(tools=TOOLS, messages=[*SHOWN[:2], {"role": "tool", "tool_call_id": "call_9", "content": "sunny"}]),
     "messages[2].tool_call_id"),
    (dict(tools=TOOLS, messages=[{"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
     "messages[0].tool_call_id"),
    (dict(tool_choice="required"), "tool_choice"),
    (dict(functions=[{"name": "get_weather", "parameters": {"type": "object"}}]), "functions"),
    (dict(tools=TOOLS, tool_choice="required", response_format={"type": "json_object"}), "response_format"),
])
def test_tool_faults_are_400s_naming_the_field(chat_sdk, fields, param):
    body = _refused(chat_sdk, **fields)
    assert body["param"] == param, body
    if param == "functions":
        assert "'tools'" in body["message"]


# -- frameworks

def test_langchain_tool_loop(chat_api):
    """ChatOpenAI.bind_tools: the tool called with the model's arguments, its ToolMessage sent back, a final answer.
    With HOTPATH_TOOLS_TRANSCRIPT set, the loop's transcript is written there (markdown)."""
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    seen = []

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        seen.append(city)
        return {"Paris": "sunny, 21 C"}.get(city, "cloudy, 15 C")

    llm = ChatOpenAI(model=GEN, base_url=chat_api.base_url, api_key="unused", temperature=0, max_tokens=64, max_retries=0)
    messages = [HumanMessage("What is the weather in Paris?")]
    called = llm.bind_tools([get_weather], tool_choice="get_weather").invoke(messages)
    assert called.response_metadata["finish_reason"] == "tool_calls" and len(called.tool_calls) == 1
    messages.append(called)
    results = [ToolMessage(get_weather.invoke(call["args"]), tool_call_id=call["id"]) for call in called.tool_calls]
    messages += results
    final = llm.bind_tools([get_weather], tool_choice="none").invoke(messages)
    assert seen == ["Paris"] and not final.tool_calls and final.response_metadata["finish_reason"] == "stop"
    assert "sunny" in final.content.lower()
    chunks = list(llm.bind_tools([get_weather], tool_choice="any").stream(messages[:1]))   # "any": required
    streamed = sum(chunks[1:], chunks[0])
    assert [(c["name"], c["args"]) for c in streamed.tool_calls] == [(c["name"], c["args"]) for c in called.tool_calls]
    if path := os.environ.get("HOTPATH_TOOLS_TRANSCRIPT"):
        _transcript(Path(path), messages, called, results, final)


def _transcript(path: Path, messages, called, results, final) -> None:
    lines = ["# LangChain tool-calling loop against hotpath's OpenAI-compatible API", "",
             "Command: `HOTPATH_TOOLS_TRANSCRIPT=" + str(path) + " .venv/bin/python -m pytest -q "
             "tests/integration/test_openai_tools.py::test_langchain_tool_loop`", "",
             "Model: text_generation (SmolLM2-135M-Instruct on vLLM, greedy), `ChatOpenAI(...).bind_tools([get_weather])`.",
             "", f"1. user: {messages[0].content}",
             f"2. assistant (tool_choice=get_weather, finish_reason={called.response_metadata['finish_reason']}): "
             "tool_calls " + json.dumps([{"id": c["id"], "name": c["name"], "args": c["args"]} for c in called.tool_calls])]
    lines += [f"3. tool `{called.tool_calls[0]['name']}`({json.dumps(called.tool_calls[0]['args'])}) answered: "
              f"{r.content!r} (tool_call_id {r.tool_call_id})" for r in results]
    lines += [f"4. assistant (tool_choice=none, finish_reason={final.response_metadata['finish_reason']}): "
              f"{final.content!r}", ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def test_litellm_tool_loop(chat_api):
    """litellm.completion(model="openai/<name>", api_base=..., tools=...): a required call, a named one streamed
    (assembled by litellm.stream_chunk_builder), the result sent back, a final answer. LiteLLM runs in its own venv."""
    python = paths.ROOT / ".venv-litellm" / "bin" / "python"
    assert python.is_file(), "no .venv-litellm: scripts/setup.sh creates it (requirements-litellm.txt)"
    run = subprocess.run([str(python), str(Path(__file__).with_name("litellm_client.py")), chat_api.base_url, GEN],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["finish_reason"] == "tool_calls" and [c["name"] for c in result["calls"]] == ["get_weather"]
    assert json.loads(result["calls"][0]["arguments"]) == {"city": "Paris"}
    streamed = result["streamed"]
    assert streamed["finish_reason"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in streamed["calls"]] == [("get_weather", {"city": "Paris"})]
    final = result["final"]
    assert final["finish_reason"] == "stop" and not final["tool_calls"] and "sunny" in final["content"].lower()


# -- the parser: the same reading as vLLM's own xlam parser

def test_the_parser_reads_as_vllms_xlam_parser():
    """hotpath.openai_api.tool_parser against vllm.tool_parsers.xlam_tool_parser (in .venv-vllm) on the unit tests'
    corpus: the same calls (name, arguments) and content."""
    from hotpath.openai_api.tool_parser import extract
    from tests.tool_outputs import CASES

    outputs = [case[0] for case in CASES]
    script = ("import json, sys\nfrom vllm.tool_parsers.xlam_tool_parser import xLAMToolParser\n"
              "p = xLAMToolParser(None)\nout = []\nfor text in json.loads(sys.stdin.read()):\n"
              "    r = p.extract_tool_calls(text, None)\n"
              "    out.append([r.content, [[c.function.name, c.function.arguments] for c in r.tool_calls]])\n"
              "print(json.dumps(out))\n")
    run = subprocess.run([str(paths.ROOT / ".venv-vllm" / "bin" / "python"), "-c", script], input=json.dumps(outputs),
                         capture_output=True, text=True, timeout=300, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"})
    assert run.returncode == 0, run.stderr[-3000:]
    theirs = json.loads(run.stdout.strip().splitlines()[-1])
    for text, (content, calls) in zip(outputs, theirs):
        ours = extract(text)
        assert [list(c) for c in ours.calls] == calls, text
        assert (ours.content or "") == (content or ""), text
