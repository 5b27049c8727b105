"""A chat with tools as the engine's `messages`: plain {"role", "content"} turns in SmolLM2's function-calling format.

SmolLM2-Instruct's chat template renders no tools (its chat_template.jinja knows only role and content; passing
`tools=` to apply_chat_template changes nothing), so the tools reach the model in a system prompt, TOOLS_PROMPT,
written here and nowhere else. It asks for the format SmolLM2 was tuned on (a JSON list of calls inside
<tool_call> tags; hotpath.openai_api.tool_parser reads it back), and an assistant's tool_calls in the
conversation are rendered the same way. A `tool` message becomes a user turn that names the call it answers,
in words (RESULT): SmolLM2's published template wraps results in <tool_response> tags, but measured on
SmolLM2-135M-Instruct (greedy) the model then echoes the tags back instead of answering, while the sentence
gets an answer that uses the result ("The weather in Paris is sunny, 21 degrees Celsius.").
"""

from __future__ import annotations

import json

from hotpath.openai_api.tool_parser import loads

TOOLS_PROMPT = """You can call functions to answer the user. These are the functions, with the JSON schemas of their arguments:
<tools>{tools}</tools>

To call one or more of them, answer with the calls alone, in exactly this format:
<tool_call>[{{"name": "function_name", "arguments": {{"argument_name": "value"}}}}]</tool_call>
Call only the functions listed, with arguments of the types their schemas give. When no function fits, or once \
you have the results you need, answer in plain text."""
RESULT = "The result of {call} is: {result}"


def tools_prompt(tools: list) -> str:
    """The system prompt that offers `tools` (schemas.Tool) to the model."""
    functions = [{"name": t.function.name, "description": t.function.description or "",
                  "parameters": t.function.arguments_schema} for t in tools]
    return TOOLS_PROMPT.format(tools=json.dumps(functions, ensure_ascii=False))


def _arguments(text: str):
    """A call's arguments as the model writes them: the JSON object, or the text when it is not JSON."""
    return loads(text, invalid=text)


def _turn(message, calls: dict[str, str]) -> dict:
    if message.role == "tool":
        call = calls.get(message.tool_call_id, f"the call {message.tool_call_id}")
        return {"role": "user", "content": RESULT.format(call=call, result=message.text)}
    if message.role == "assistant" and message.tool_calls:
        calls = [{"name": c.function.name, "arguments": _arguments(c.function.arguments)} for c in message.tool_calls]
        prose = message.text + "\n" if message.text else ""
        return {"role": "assistant", "content": f"{prose}<tool_call>{json.dumps(calls, ensure_ascii=False)}</tool_call>"}
    return {"role": "system" if message.role == "developer" else message.role, "content": message.text}


def engine_messages(messages: list, tools: list | None = None) -> list[dict]:
    """The conversation as text_generation's `messages` ("developer" is OpenAI's newer name for system); with
    `tools`, TOOLS_PROMPT opens the system turn, before the conversation's own system prompt."""
    calls = {c.id: f"{c.function.name}({c.function.arguments})" for m in messages for c in m.tool_calls or ()}
    turns = [_turn(m, calls) for m in messages]
    if tools:
        prompt = tools_prompt(tools)
        if turns[0]["role"] == "system":
            turns[0] = {"role": "system", "content": f"{prompt}\n\n{turns[0]['content']}"}
        else:
            turns.insert(0, {"role": "system", "content": prompt})
    return turns
