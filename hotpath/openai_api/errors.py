"""Errors in the OpenAI shape: `{"error": {"message", "type", "param", "code"}}` with the HTTP status the
official SDK turns into its typed exceptions (400 BadRequestError, 401 AuthenticationError, 404
NotFoundError, 408 (a body that stopped arriving), 413, 429 RateLimitError, 500, 503).

Triton's answers map one to one through hotpath.client's classification (`client_error`, which also
reads the "<model>: [STATUS] " tag of a stream's error): INVALID_ARGUMENT -> 400, RESOURCE_EXHAUSTED ->
429, UNAVAILABLE (overload, shutting down, no version ready now) -> 503, DEADLINE_EXCEEDED -> 504,
anything else -> 500. Retryable answers carry `Retry-After`. Messages never carry a traceback or a
server path: Triton's own message is passed on (it names the input), nothing from this process.
"""

from __future__ import annotations

from pydantic import ValidationError
from tritonclient.utils import InferenceServerException

from hotpath.client import client_error
from hotpath.runtime.errors import RETRY_AFTER_S, http_status


class APIError(Exception):
    """An answer other than 200, in the OpenAI shape."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, retry_after_s: int | None = None, close: bool = False):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.retry_after_s, self.close = retry_after_s, close

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        headers = {"retry-after": str(self.retry_after_s)} if self.retry_after_s is not None else {}
        return {**headers, "connection": "close"} if self.close else headers


def invalid(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def unsupported(param: str, instead: str | None = None) -> APIError:
    """A field the server refuses; `instead`: the field to send in its place (a deprecated one's successor)."""
    if instead:
        return invalid(f"'{param}' is deprecated and not supported by this server: send '{instead}' instead",
                       param, "unsupported_parameter")
    return invalid(f"'{param}' is not supported by this server: the engine cannot honour it "
                   "(send the field's default or leave it out)", param, "unsupported_parameter")


def model_not_found(model: str) -> APIError:
    return APIError(404, f"The model '{model}' does not exist or is not served here (GET /v1/models lists them)",
                    "invalid_request_error", "model", "model_not_found")


def body_too_large(limit: int) -> APIError:
    return APIError(413, f"Request body larger than {limit} bytes", "invalid_request_error", None, "request_too_large")


def body_timeout(stall_s: float) -> APIError:
    """A body that stopped arriving: answered, and its connection closed (uvicorn closes on `connection: close`)."""
    return APIError(408, f"Request body incomplete: nothing arrived for {stall_s:g} s", "invalid_request_error", None,
                    "request_timeout", close=True)


def overloaded(cap: int) -> APIError:
    return APIError(429, f"Server at capacity ({cap} requests in flight); retry later", "rate_limit_error", None,
                    "server_overloaded", RETRY_AFTER_S)


def _param(loc: tuple) -> str | None:
    """pydantic's error location as a field path: ('messages', 0, 'content') -> 'messages[0].content'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not part.startswith(("str", "list", "dict", "function-", "constrained", "literal")) or not out:
            out += ("." if out else "") + part
    return out or None


def from_validation(exc: ValidationError) -> APIError:
    """The first problem pydantic found, naming its field (an unknown field is named too)."""
    first = exc.errors(include_url=False, include_input=False)[0]
    kind = first["type"]
    if kind == "json_invalid":
        return invalid(f"The body is not valid JSON: {first['msg']}", None, "invalid_json")
    param = _param(tuple(first["loc"]))
    if kind == "extra_forbidden":
        return invalid(f"Unrecognized request argument supplied: {param}", param, "unknown_parameter")
    if kind == "missing":
        return invalid(f"Missing required parameter: '{param}'", param, "missing_required_parameter")
    if kind == "model_type" and not first["loc"]:
        return invalid("The body must be a JSON object", None, "invalid_type")
    return invalid(f"Invalid value for '{param}': {first['msg']}", param, "invalid_value")


def from_triton(model: str, exc: InferenceServerException, param: str | None = None) -> APIError:
    """Triton's error as the API answers it (see the module docstring). A server fault's own message
    stays in this process's log: it may hold a traceback."""
    error = client_error(model, exc)
    status = error.status or ""
    answer = http_status(status)
    code, kind, retry = answer.http, answer.openai_type, answer.retry_after_s
    if error.retryable and status != "RESOURCE_EXHAUSTED":   # a version unloading, a stub restarting
        code, kind, retry = 503, "server_error", RETRY_AFTER_S
    message = (exc.message() or "").removeprefix(f"{model}: ") if code < 500 or code == 503 else ""
    return APIError(code, f"{model}: {message or 'the server failed the request (' + (status or 'INTERNAL') + ')'}",
                    kind, param if code == 400 else None, status.lower() or None, retry)
