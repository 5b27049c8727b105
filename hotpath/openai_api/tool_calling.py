"""What a chat's `tools` / `tool_choice` ask of the engine, and its output read back as tool calls.

- `none` (the default without tools): the tools are not shown to the model (as vLLM's
  --exclude-tools-when-tool-choice-none) and its output is content.
- `auto` (the default with tools): the model sees the tools (tool_prompt) and decides; its output is read with
  vLLM's xlam format (tool_parser). Calls naming a function that was not offered, or whose arguments are not a
  JSON object, are no calls: the whole output is then content.
- `required` and a named function: the engine's structured outputs (text_generation's `structured_outputs`,
  as response_format) hold the output to a JSON schema that admits only valid calls to the offered tools: a
  list of {"name", "arguments"} (required; one call at most when parallel_tool_calls is false), or the named
  function's arguments object. Every answer is then a call, unless max_tokens cut it (finish_reason length).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from hotpath.openai_api import tool_parser
from hotpath.openai_api.schemas import ChatCompletionRequest
from hotpath.runtime.llm.request import InputError, check_constraint


def call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def tool_call(name: str, arguments: str) -> dict:
    """One call in OpenAI's shape (message.tool_calls[i]), with an id of its own."""
    return {"id": call_id(), "type": "function", "function": {"name": name, "arguments": arguments}}


@dataclass(frozen=True)
class Answer:
    """One choice's output as OpenAI returns it."""

    content: str | None
    tool_calls: list[dict] = field(default_factory=list)
    finish_reason: str | None = None


@dataclass(frozen=True)
class ToolPlan:
    mode: str = "none"                      # none | auto | required | named
    tools: dict = field(default_factory=dict)   # offered function name -> its arguments' JSON schema
    named: str | None = None
    parallel: bool = True

    @classmethod
    def of(cls, request: ChatCompletionRequest) -> ToolPlan:
        tools = {t.function.name: t.function.arguments_schema for t in request.tools or ()}
        choice = request.tool_choice or ("auto" if tools else "none")
        named = None
        if not isinstance(choice, str):
            choice, named = "named", choice.function.name
        return cls(choice, tools, named, request.parallel_tool_calls is not False)

    @property
    def active(self) -> bool:
        return self.mode != "none"

    def constraint(self) -> dict | None:
        """The engine's structured_outputs for required and named calls (None: unconstrained)."""
        if self.mode == "named":
            return {"json": self.tools[self.named]}
        if self.mode != "required":
            return None
        calls = [{"type": "object", "properties": {"name": {"type": "string", "enum": [name]}, "arguments": schema},
                  "required": ["name", "arguments"], "additionalProperties": False}
                 for name, schema in self.tools.items()]
        listing = {"type": "array", "minItems": 1, "items": calls[0] if len(calls) == 1 else {"anyOf": calls}}
        return {"json": listing if self.parallel else {**listing, "maxItems": 1}}

    def answer(self, text: str, finish_reason: str | None) -> Answer:
        """A whole output as content or tool calls; finish_reason `tool_calls` when calls ended it."""
        content, calls = None, []
        if self.mode == "named":
            calls = [tool_call(self.named, text.strip())]
        elif self.mode in ("auto", "required"):
            content, calls = self._read(text)
        if not calls:
            return Answer(text, [], finish_reason)
        return Answer(content or None, calls, "tool_calls" if finish_reason == "stop" else finish_reason)

    def _read(self, text: str) -> tuple[str | None, list[dict]]:
        """(the text around the calls, the calls): none unless every call is to an offered function."""
        found = tool_parser.extract(text)
        if not found.calls or not all(isinstance(name, str) and name in self.tools and _object(arguments)
                                      for name, arguments in found.calls):
            return None, []
        calls = found.calls if self.parallel else found.calls[:1]
        return found.content, [tool_call(name, arguments) for name, arguments in calls]


def _object(arguments) -> bool:
    return isinstance(arguments, str) and isinstance(tool_parser.loads(arguments), dict)


def tool_fault(request: ChatCompletionRequest) -> tuple[str, str] | None:
    """(message, param) for a chat whose tools, tool_choice or tool history do not hold together, else None."""
    names = [t.function.name for t in request.tools or ()]
    for i, name in enumerate(names):
        if name in names[:i]:
            return f"function name {name!r} is offered twice", f"tools[{i}].function.name"
    choice = request.tool_choice
    if choice not in (None, "none") and not names:
        return "'tool_choice' needs 'tools'", "tool_choice"
    if choice is not None and not isinstance(choice, str) and choice.function.name not in names:
        return f"tool_choice names function {choice.function.name!r}, which is not in 'tools'", "tool_choice"
    if (fault := _history_fault(request, set(names))) is not None:
        return fault
    plan = ToolPlan.of(request)
    constraint = plan.constraint()
    if constraint is not None:
        if request.response_format is not None and request.response_format.type != "text":
            return (f"'response_format' cannot constrain an answer that tool_choice {plan.mode!r} already "
                    "constrains to tool calls", "response_format")
        try:
            check_constraint("json", constraint["json"], "the schema of the calls to 'tools'")
        except InputError as exc:
            return str(exc), "tools"
    return None


def _history_fault(request: ChatCompletionRequest, offered: set[str]) -> tuple[str, str] | None:
    """An assistant call to a function not in `tools`, or a tool message answering no earlier call."""
    made: set[str] = set()
    for i, message in enumerate(request.messages):
        for j, call in enumerate(message.tool_calls or ()):
            if call.function.name not in offered:
                return (f"messages[{i}] calls function {call.function.name!r}, which is not in 'tools'",
                        f"messages[{i}].tool_calls[{j}].function.name")
            made.add(call.id)
        if message.role == "tool" and message.tool_call_id not in made:
            return (f"messages[{i}].tool_call_id {message.tool_call_id!r} answers no earlier assistant tool call",
                    f"messages[{i}].tool_call_id")
    return None
