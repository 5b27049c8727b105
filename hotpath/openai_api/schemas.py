"""Request bodies of the OpenAI-compatible API, validated strictly (pydantic, extra="forbid").

Every field the OpenAI API defines for a route is either honoured or refused with 400 naming it
(`param`): an unknown field, and a known one the engine cannot honour (tools, logit_bias, penalties,
best_of, ...), never pass silently. A refused field may still be sent with the value that asks for
nothing (best_of = 1, an empty logit_bias, a zero penalty): clients and frameworks send those defaults.
`n` (1..8), chat's `logprobs` / `top_logprobs` (0..20) and completions' `logprobs` (0..5) are honoured:
the engine samples the choices and returns its own log-probabilities. Numbers are bounded here, before any tensor is built: no int reaches a tensor
type it does not fit, no NaN or infinity reaches the sampler. `response_format` (text, json_object,
json_schema) is honoured: the engine constrains its output (text_generation's `structured_outputs`), with
the schema bounded here as the engine bounds it (hotpath.runtime.llm.request.check_constraint). Chat's
`tools`, `tool_choice` and `parallel_tool_calls` are honoured (hotpath.openai_api.tool_calling); the legacy
`functions` / `function_call` are refused, pointing at `tools`.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr, field_validator, model_validator

from hotpath.runtime.llm.request import InputError, check_constraint

# OpenAI's own limit of inputs per embeddings request; the API sends them to Triton in chunks of the
# endpoint's max_batch_size (hotpath.openai_api.triton).
MAX_EMBEDDING_INPUTS = 2048
MAX_STOP = 4                 # OpenAI's limit of stop sequences
MAX_MESSAGES = 256
MAX_N = 8                    # choices per request (text_generation's sampling_parameters.n allows as many)
MAX_TOP_LOGPROBS = 20        # chat's top_logprobs (OpenAI's and vLLM's limit)
MAX_COMPLETION_LOGPROBS = 5  # /v1/completions' logprobs (OpenAI's legacy limit)
SEED_RANGE = (-(2 ** 63), 2 ** 63 - 1)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


class Unsupported:
    """Fields of the OpenAI API the engines cannot honour, and the value of each that asks for nothing
    (sent as such, they are accepted). `check` names the first one a request sets otherwise."""

    def __init__(self, **harmless):
        self.harmless = harmless

    def check(self, request: BaseModel) -> str | None:
        for name, ok in self.harmless.items():
            if name in request.model_fields_set and getattr(request, name) not in ok:
                return name
        return None


class EmbeddingsRequest(Strict):
    model: StrictStr
    input: StrictStr | Annotated[list[StrictStr], Field(min_length=1, max_length=MAX_EMBEDDING_INPUTS)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: StrictInt | None = None
    user: StrictStr | None = None

    @property
    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


class StreamOptions(Strict):
    include_usage: StrictBool = False
    continuous_usage_stats: Literal[False] = False   # vLLM's extension, refused when asked for


class TextPart(Strict):
    type: Literal["text"]
    text: StrictStr


class FunctionCall(Strict):
    name: StrictStr
    arguments: StrictStr   # JSON text, as OpenAI sends it


class ToolCall(Strict):
    """A call an assistant message made (sent back in the conversation)."""

    id: StrictStr
    type: Literal["function"] = "function"
    function: FunctionCall


class Message(Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: StrictStr | Annotated[list[TextPart], Field(min_length=1)] | None = None
    name: StrictStr | None = None
    tool_calls: list[ToolCall] | None = None   # assistant: the calls it made (content may then be null)
    tool_call_id: StrictStr | None = None      # tool: the call this message answers

    @model_validator(mode="after")
    def _shape(self):
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("'tool_calls' is allowed on assistant messages only")
        if (self.role == "tool") != (self.tool_call_id is not None):
            raise ValueError("'tool_call_id' is required on tool messages and allowed on no other")
        if self.content is None and not (self.role == "assistant" and self.tool_calls):
            raise ValueError("'content' is required (null only on an assistant message with tool_calls)")
        return self

    @property
    def text(self) -> str:
        if self.content is None:
            return ""
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content)


Name = Annotated[StrictStr, Field(pattern=r"^[A-Za-z0-9_-]{1,64}$")]   # a schema's or a function's (OpenAI's rule)


def bounded_schema(value: dict) -> dict:
    """A JSON schema bounded as the engine bounds a structured-output constraint (a ValueError for pydantic)."""
    try:
        check_constraint("json", value, "the schema")
    except InputError as exc:
        raise ValueError(str(exc)) from None
    return value


class JSONSchema(Strict):
    """response_format.json_schema: OpenAI's shape; `strict` is accepted either way (the output is always
    held to the schema)."""

    name: Name
    description: StrictStr | None = None
    schema_: dict = Field(alias="schema")
    strict: StrictBool | None = None

    @field_validator("schema_")
    @classmethod
    def _bounded(cls, value):
        return bounded_schema(value)


class ResponseFormat(Strict):
    """{"type": "text"} (no constraint), {"type": "json_object"} (any JSON object), or
    {"type": "json_schema", "json_schema": {"name", "schema", "description"?, "strict"?}}."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JSONSchema | None = None

    @model_validator(mode="after")
    def _schema_iff_json_schema(self):
        if (self.type == "json_schema") != (self.json_schema is not None):
            raise ValueError("'json_schema' is required with type 'json_schema' and allowed with no other type")
        return self

    def structured_outputs(self) -> dict | None:
        """text_generation's sampling_parameters.structured_outputs for this format (None: unconstrained)."""
        if self.type == "json_object":
            return {"json_object": True}
        if self.type == "json_schema":
            return {"json": self.json_schema.schema_}
        return None


MAX_TOOLS = 128                     # OpenAI's limit of tools per request
NO_ARGUMENTS = {"type": "object", "properties": {}}   # a function without `parameters` (OpenAI's meaning)


def check_parameters(value: dict) -> dict:
    """A function's `parameters`: a valid JSON schema (its own draft's meta-schema, 2020-12 by default) of an
    object, bounded as a structured-output constraint (the engine enforces it on required and named calls)."""
    from jsonschema import Draft202012Validator, SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(value, default=Draft202012Validator).check_schema(value)
    except SchemaError as exc:
        raise ValueError(f"not a valid JSON schema: {exc.message}"[:300]) from None
    if value.get("type", "object") != "object":
        raise ValueError("must be the JSON schema of an object (a function's arguments): 'type' must be 'object'")
    return bounded_schema(value)


class FunctionDefinition(Strict):
    name: Name
    description: StrictStr | None = None
    parameters: dict | None = None
    strict: StrictBool | None = None   # accepted either way: a required or named call is always held to it

    @field_validator("parameters")
    @classmethod
    def _schema(cls, value):
        return value if value is None else check_parameters(value)

    @property
    def arguments_schema(self) -> dict:
        return NO_ARGUMENTS if self.parameters is None else self.parameters


class Tool(Strict):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionName(Strict):
    name: StrictStr


class NamedToolChoice(Strict):
    """tool_choice {"type": "function", "function": {"name"}}: that function must be called."""

    type: Literal["function"]
    function: FunctionName


Stop = StrictStr | Annotated[list[StrictStr], Field(max_length=MAX_STOP)] | None
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class Sampling(Strict):
    """Sampling fields common to chat and text completions (the engine's sampling_parameters)."""

    model: StrictStr
    max_tokens: Annotated[StrictInt, Field(ge=1, le=2 ** 31 - 1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: Annotated[StrictInt, Field(ge=SEED_RANGE[0], le=SEED_RANGE[1])] | None = None
    stop: Stop = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: StrictStr | None = None
    n: Annotated[StrictInt, Field(ge=1, le=MAX_N)] | None = None   # choices, each with its index
    # vLLM's extension (its OpenAI server takes it too): end-of-sequence is ignored until this many tokens,
    # which benchmarks use to fix every answer's length (AIPerf, genai-perf).
    min_tokens: Annotated[StrictInt, Field(ge=0, le=2 ** 31 - 1)] | None = None
    # chat: logprobs true/false with top_logprobs 0..20; completions: logprobs 0..5 (the legacy shape)
    logprobs: StrictBool | None = None
    top_logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    # Accepted only with the values that ask for nothing (Unsupported below); typed so that a wrong
    # type is still a 400 naming the field.
    logit_bias: dict[StrictStr, float] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    best_of: StrictInt | None = None
    response_format: ResponseFormat | None = None   # completions too: vLLM's extension

    @field_validator("stop")
    @classmethod
    def _stops(cls, value):
        stops = [value] if isinstance(value, str) else value or []
        if any(not s for s in stops):
            raise ValueError("stop sequences must not be empty")
        return value

    @property
    def stops(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    @property
    def choices(self) -> int:
        return self.n or 1

    @property
    def top_logprobs_wanted(self) -> int | None:
        """The engine's sampling_parameters.logprobs: top log-probabilities per token (0: the chosen token's
        alone), None when the request asks for no log-probabilities."""
        if self.logprobs is True:
            return self.top_logprobs or 0
        return None


class ChatCompletionRequest(Sampling):
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    max_completion_tokens: Annotated[StrictInt, Field(ge=1, le=2 ** 31 - 1)] | None = None
    tools: Annotated[list[Tool], Field(max_length=MAX_TOOLS)] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    functions: list | None = None
    function_call: StrictStr | dict | None = None
    parallel_tool_calls: StrictBool | None = None
    modalities: list | None = None
    audio: dict | None = None
    prediction: dict | None = None
    reasoning_effort: StrictStr | None = None
    service_tier: StrictStr | None = None
    store: StrictBool | None = None
    metadata: dict | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(Sampling):
    prompt: StrictStr | Annotated[list[StrictStr], Field(min_length=1, max_length=1)]
    logprobs: Annotated[StrictInt, Field(ge=0, le=MAX_COMPLETION_LOGPROBS)] | None = None   # legacy: an integer
    echo: StrictBool | None = None
    suffix: StrictStr | None = None

    @property
    def text(self) -> str:
        return self.prompt if isinstance(self.prompt, str) else self.prompt[0]

    @property
    def token_limit(self) -> int | None:
        return self.max_tokens

    @property
    def top_logprobs_wanted(self) -> int | None:
        return self.logprobs


def min_tokens_fault(request: Sampling) -> str | None:
    """'min_tokens' when it asks for more tokens than the request's limit, else None."""
    limit = request.token_limit
    if request.min_tokens and limit is not None and request.min_tokens > limit:
        return "min_tokens"
    return None


def logprobs_fault(request: Sampling) -> str | None:
    """The field to name when a chat asks for top_logprobs without logprobs (OpenAI's rule), else None."""
    if isinstance(request, ChatCompletionRequest) and request.top_logprobs and request.logprobs is not True:
        return "top_logprobs"
    return None


_NOTHING = (None,)
_SAMPLING_REFUSED = dict(logit_bias=(None, {}), presence_penalty=(None, 0, 0.0), frequency_penalty=(None, 0, 0.0), best_of=(None, 1))
# functions / function_call: OpenAI's deprecated spelling of tools / tool_choice, refused (errors.unsupported
# names the replacement: DEPRECATED).
DEPRECATED = {"functions": "tools", "function_call": "tool_choice"}
CHAT_REFUSED = Unsupported(**_SAMPLING_REFUSED, functions=(None, []), function_call=(None, "none"),
                           modalities=(None, ["text"]), audio=_NOTHING,
                           prediction=_NOTHING, reasoning_effort=_NOTHING, service_tier=(None, "auto", "default"),
                           store=(None, False), metadata=_NOTHING)
COMPLETION_REFUSED = Unsupported(**_SAMPLING_REFUSED, top_logprobs=(None, 0), echo=(None, False), suffix=(None, ""))


# -- /tokenize and /detokenize (vLLM's shapes; hotpath.openai_api.tokenization)

TOKEN_ID_MAX = 2 ** 32 - 1   # ids past 32 bits are refused before the vocabulary check


class TokenizeCompletionRequest(Strict):
    model: StrictStr
    prompt: StrictStr
    add_special_tokens: StrictBool = True
    return_token_strs: StrictBool | None = False


class TokenizeChatRequest(Strict):
    model: StrictStr
    messages: Annotated[list[Message], Field(min_length=1, max_length=MAX_MESSAGES)]
    add_generation_prompt: StrictBool = True
    continue_final_message: StrictBool = False
    add_special_tokens: StrictBool = False
    return_token_strs: StrictBool | None = False


class TokenizeRequest:
    """tokenize's body: the chat form when it has `messages`, else the prompt form (as vLLM tells them)."""

    @staticmethod
    def model_validate_json(raw: bytes):
        import json

        try:
            chat = "messages" in json.loads(raw)
        except (ValueError, TypeError, RecursionError):
            chat = False
        return (TokenizeChatRequest if chat else TokenizeCompletionRequest).model_validate_json(raw)


class DetokenizeRequest(Strict):
    model: StrictStr
    tokens: list[Annotated[StrictInt, Field(ge=0, le=TOKEN_ID_MAX)]]
