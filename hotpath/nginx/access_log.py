"""The access log both configs write: `|`-separated NGINX variables, parsed into one entry type."""

from __future__ import annotations

from dataclasses import dataclass

# The URI comes last: it is the only field a client writes, and may itself hold `|`.
LOG_FIELDS = ("msec", "status", "upstream_addr", "upstream_status", "upstream_trailer_grpc_status", "request_time",
              "upstream_response_time", "request_uri")
TENANT_FIELD = "hotpath_tenant"          # the tenant gateway's variable: who called
GRPC_HEADER_FIELD = "sent_http_grpc_status"   # the status of NGINX's own trailers-only gRPC answers


def log_format(fields: tuple[str, ...] = LOG_FIELDS) -> str:
    """The log_format string of `fields` (request_uri last)."""
    if fields[-1] != "request_uri":
        raise ValueError("request_uri must be the last access-log field")
    return "|".join(f"${name}" for name in fields)


@dataclass(frozen=True)
class LogEntry:
    """One request: when it ended, which replicas NGINX tried for it, what the client got."""

    at: float                     # $msec: when NGINX logged it, seconds since the epoch (ms resolution)
    uri: str
    status: int
    upstreams: tuple[str, ...]    # every replica tried, in order; () when NGINX answered alone
    grpc_status: str              # the server's trailer, else NGINX's own header; "" for HTTP
    seconds: float                # $request_time, from the first byte read
    tenant: str = ""              # "" without a token, or in a log without TENANT_FIELD
    upstream_seconds: float = 0.0   # $upstream_response_time of the replica that answered; 0 when none

    @property
    def upstream(self) -> str:
        return ", ".join(self.upstreams)

    @property
    def served_by(self) -> str:
        return self.upstreams[-1] if self.upstreams else ""

    @property
    def started(self) -> float:
        """When NGINX read its first byte, on the same (ms) clock as `at`."""
        return _before(self.at, self.seconds)

    @property
    def upstream_started(self) -> float:
        """When the answering replica was asked, at the latest (the same ms clock as `at`): the span from here
        to `at` lies inside the call's admission by a gateway (admitted in the access phase, before it is
        proxied; released in the log phase, when `at` is taken), where [started, at) also holds the wait for
        the request's body, before admission."""
        return _before(self.at, self.upstream_seconds)


def _before(at: float, seconds: float) -> float:
    """`seconds` before `at`, on NGINX's millisecond clock."""
    return round(at * 1000 - seconds * 1000) / 1000


def _value(raw: str | None) -> str:
    return "" if raw in (None, "-") else raw


def _last_seconds(raw: str | None) -> float:
    """The last of NGINX's per-upstream times ("0.010, 0.012", " : " across internal redirects; "-" for none)."""
    last = (raw or "").replace(" : ", ", ").split(", ")[-1]
    return float(_value(last) or 0)


def parse_access_log(text: str, fields: tuple[str, ...] = LOG_FIELDS) -> list[LogEntry]:
    """Lines written with log_format(fields); other lines are skipped. Tried upstreams come as "a, b"."""
    entries = []
    for line in text.splitlines():
        values = line.split("|", len(fields) - 1)
        if len(values) != len(fields):
            continue
        r = dict(zip(fields, values))
        entries.append(LogEntry(
            float(r["msec"]), r["request_uri"], int(r["status"]),
            tuple(a for a in r["upstream_addr"].split(", ") if a not in ("", "-")),
            _value(r["upstream_trailer_grpc_status"]) or _value(r.get(GRPC_HEADER_FIELD)),
            float(r["request_time"]), _value(r.get(TENANT_FIELD)),
            _last_seconds(r.get("upstream_response_time"))))
    return entries
