"""LiteLLM's side of tests/integration/test_openai_tools.py, run by .venv-litellm's Python (requirements-litellm.txt:
LiteLLM's pins conflict with .venv's): a tool-calling loop against the OpenAI-compatible API, printed as JSON.

    .venv-litellm/bin/python tests/integration/litellm_client.py <api base URL> <model>
"""

import json
import os
import sys

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")   # its bundled copy: no fetch (no network here)
import litellm  # noqa: E402

litellm.suppress_debug_info = True

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def main(base: str, model: str) -> dict:
    common = dict(model=f"openai/{model}", api_base=base, api_key="unused", temperature=0, max_tokens=64,
                  num_retries=0)
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = litellm.completion(messages=messages, tools=[WEATHER], tool_choice="required", **common)
    message = first.choices[0].message
    calls = [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments} for c in message.tool_calls]
    chunks = list(litellm.completion(messages=messages, tools=[WEATHER], stream=True,
                                     tool_choice={"type": "function", "function": {"name": "get_weather"}}, **common))
    streamed = litellm.stream_chunk_builder(chunks, messages=messages).choices[0]
    messages.append(message.model_dump(exclude_none=True))
    messages += [{"role": "tool", "tool_call_id": c["id"], "content": "sunny, 21 C"} for c in calls]
    final = litellm.completion(messages=messages, tools=[WEATHER], tool_choice="none", **common).choices[0]
    return {"finish_reason": first.choices[0].finish_reason, "calls": calls,
            "streamed": {"finish_reason": streamed.finish_reason,
                         "calls": [{"id": c.id, "name": c.function.name, "arguments": c.function.arguments}
                                   for c in streamed.message.tool_calls or ()]},
            "final": {"content": final.message.content, "finish_reason": final.finish_reason,
                      "tool_calls": final.message.tool_calls}}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2])))
