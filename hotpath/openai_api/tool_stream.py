"""One streamed choice of a chat with tools: the engine's text deltas as OpenAI's chunk deltas.

Tool calls stream in the shape the openai SDK (and LangChain, LiteLLM) assemble: per call a first delta with
`index`, `id`, `type` and `function.name` (arguments ""), then `function.arguments` pieces, and the choice's
last chunk with finish_reason `tool_calls`.

- named function: the output is the arguments object (the engine's constraint), so its pieces stream as they
  come, after the call's first delta.
- required: the output is a JSON list of calls; it is buffered and sent as calls when it ends.
- auto: buffered until its opening tells: text that cannot open a call (anything but `<tool_call>`, ```, `[`
  or `[TOOL_CALLS]`, the openings the xlam parser reads) streams as content from then on; an opening that can
  is buffered to the end and read as a whole answer is (tool_calling.ToolPlan.answer). A call after prose is
  therefore found in whole answers only.

tool_events / tool_chunks render the chunks with a generation.Completion (passed in: generation imports
tool_calling, so this module does not import it back).
"""

from __future__ import annotations

from hotpath.openai_api.tool_calling import Answer, ToolPlan, call_id

OPENINGS = ("<tool_call>", "```", "[")


def opening(text: str) -> str | None:
    """'calls' when `text` opens like a tool call, 'content' when it cannot, None while it cannot tell."""
    start = text.lstrip()
    if not start:
        return None
    if start.startswith(OPENINGS):
        return "calls"
    return None if any(marker.startswith(start) for marker in OPENINGS) else "content"


def call_deltas(calls: list[dict]) -> list[dict]:
    """Each call as its first delta (id, type, name) and its arguments."""
    out = []
    for index, call in enumerate(calls):
        function = call["function"]
        out.append({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                    "function": {"name": function["name"], "arguments": ""}}]})
        out.append({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]})
    return out


class ToolStream:
    """feed() each text delta and end() once: each returns the deltas to send now, as (delta, the engine's
    logprob entries that go with it); entries of text still buffered wait for the next delta sent."""

    def __init__(self, plan: ToolPlan):
        self.plan, self.text, self.pending = plan, "", []
        self.verdict = "calls" if plan.mode == "required" else None
        self.id = call_id() if plan.mode == "named" else None

    def feed(self, text: str, logprobs: list = ()) -> list[tuple[dict, list]]:
        self.text += text
        self.pending.extend(logprobs)
        if self.plan.mode == "named":
            first = [] if self.verdict else [{"tool_calls": [{"index": 0, "id": self.id, "type": "function",
                                                              "function": {"name": self.plan.named, "arguments": ""}}]}]
            self.verdict = "calls"
            return self._send(first + ([{"tool_calls": [{"index": 0, "function": {"arguments": text}}]}] if text else []))
        if self.verdict is None:
            self.verdict = opening(self.text)
            return self._send([{"content": self.text}] if self.verdict == "content" else [])
        return self._send([{"content": text}] if self.verdict == "content" and text else [])

    def end(self, finish_reason: str | None) -> tuple[list[tuple[dict, list]], str | None]:
        """The last deltas and the choice's finish_reason."""
        if self.plan.mode == "named":
            return self._send([]), self.plan.answer(self.text, finish_reason).finish_reason
        if self.verdict == "content":
            return self._send([]), finish_reason
        answer: Answer = self.plan.answer(self.text, finish_reason)
        deltas = ([{"content": answer.content}] if answer.content else []) + call_deltas(answer.tool_calls)
        return self._send(deltas), answer.finish_reason

    def _send(self, deltas: list[dict]) -> list[tuple[dict, list]]:
        if not deltas:
            return []
        pending, self.pending = self.pending, []
        return [(delta, pending if i == 0 else []) for i, delta in enumerate(deltas)]

    def leftover(self) -> list:
        """Logprob entries no delta carried (sent with the finish chunk)."""
        pending, self.pending = self.pending, []
        return pending


async def tool_events(completion, first, steps, totals):
    """A stream's chunks when the model may call tools: each choice's deltas through its ToolStream."""
    streams = [ToolStream(completion.tools) for _ in range(completion.n)]
    for i in range(completion.n):
        yield completion.delta_chunk({"role": "assistant", "content": None}, index=i)
    step = first
    while step is not None:
        for i, stream in enumerate(streams):
            for delta, logprobs in stream.feed(step.text_of(i), step.logprobs_of(i)):
                yield completion.delta_chunk(delta, index=i, logprobs=logprobs)
        step = await anext(steps, None)
        if step is not None:
            totals.add(step)
    for i, stream in enumerate(streams):
        for chunk in tool_chunks(completion, i, stream, "", [], totals.of(i).finish_reason, opened=True):
            yield chunk


def tool_chunks(completion, index: int, stream: ToolStream, text: str, logprobs: list,
                finish_reason: str | None, opened: bool = False) -> list[dict]:
    """The chunks that end one choice's tool stream, after feeding it `text` (a replay: the whole answer, with the
    choice's first chunk unless `opened`)."""
    chunks = [] if opened else [completion.delta_chunk({"role": "assistant", "content": None}, index=index)]
    fed = stream.feed(text, logprobs) if text or logprobs else []
    last, reason = stream.end(finish_reason)
    chunks += [completion.delta_chunk(delta, index=index, logprobs=lp) for delta, lp in [*fed, *last]]
    return chunks + [completion.delta_chunk({}, reason, index=index, logprobs=stream.leftover())]
