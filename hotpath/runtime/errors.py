"""hotpath's one error tree, and the one table that maps it to a status at every door.

    HotpathError                 a fault of ours (a bug, a broken build): INTERNAL / 500 / server_error
    ├── InputError               the caller's input: INVALID_ARGUMENT / 400 / invalid_request_error
    ├── ConfigError              an operator's spec, model parameter or config file: INTERNAL / 500 for a
    │                            request (the caller can do nothing about it), a failed command at the command line
    └── UnavailableError         a dependency down, overload or shutdown: UNAVAILABLE / 503, retry later

Messages name what is at fault (the input, the field, the file); no traceback or server path goes into one
that a client sees. Triton's Python stubs map an exception with `triton_code()`, the OpenAI API a gRPC status
with `STATUSES`, hotpath's gRPC client a status back to its exceptions (hotpath.client). Stdlib only: the stubs
import it (hotpath/runtime imports nothing outside itself).
"""

from __future__ import annotations

from dataclasses import dataclass

RETRY_AFTER_S = 1   # the Retry-After an answer of 429 / 503 carries


class HotpathError(Exception):
    """Base class for errors hotpath reports to users without a traceback."""

    status = "INTERNAL"


class InputError(HotpathError, ValueError):
    """A request input the endpoint refuses; the message names the input and the rule."""

    status = "INVALID_ARGUMENT"


class ConfigError(HotpathError, ValueError):
    """A spec, a model parameter, a setting or a config file that hotpath refuses; names the file or key."""

    status = "INTERNAL"


class UnavailableError(HotpathError, ConnectionError):
    """Something the request needs is not there now (an engine, a store, capacity): retry later or elsewhere."""

    status = "UNAVAILABLE"


@dataclass(frozen=True)
class Status:
    """How one gRPC status reads over HTTP and on the OpenAI API."""

    http: int
    openai_type: str
    retry_after_s: int | None = None


STATUSES: dict[str, Status] = {
    "INVALID_ARGUMENT": Status(400, "invalid_request_error"),
    "PERMISSION_DENIED": Status(403, "permission_error"),
    "UNAUTHENTICATED": Status(401, "authentication_error"),
    "NOT_FOUND": Status(404, "invalid_request_error"),
    "RESOURCE_EXHAUSTED": Status(429, "rate_limit_error", RETRY_AFTER_S),
    "UNAVAILABLE": Status(503, "server_error", RETRY_AFTER_S),
    "CANCELLED": Status(503, "server_error", RETRY_AFTER_S),
    "DEADLINE_EXCEEDED": Status(504, "server_error"),
    "INTERNAL": Status(500, "server_error"),
}


def status_of(exc: BaseException) -> str:
    """The gRPC status name an exception answers with: its branch's, else INTERNAL."""
    return exc.status if isinstance(exc, HotpathError) else "INTERNAL"


def http_status(status: str | None) -> Status:
    """A gRPC status name as HTTP and OpenAI read it (an unknown one is a server fault)."""
    return STATUSES.get(status or "INTERNAL", STATUSES["INTERNAL"])


_TRITON_CODES = {"INVALID_ARGUMENT": "INVALID_ARG", "UNAVAILABLE": "UNAVAILABLE", "INTERNAL": "INTERNAL"}


def triton_code(pb, exc: BaseException):
    """The pb_utils.TritonError code of `exc` in a Python stub (`pb` is triton_python_backend_utils)."""
    return getattr(pb.TritonError, _TRITON_CODES.get(status_of(exc), "INTERNAL"))
