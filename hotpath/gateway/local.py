"""The tenant gateway as a local NGINX process on loopback (tests, benchmarks, `python -m hotpath.gateway`)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from hotpath.gateway.config import LOG_FIELDS, TENANT, TOKEN_MAP, TenantGatewaySettings, config, token_map
from hotpath.scaleout.nginx import LocalNginx, parse_log_fields, render


class LocalGateway(LocalNginx):
    """LocalNginx serving the tenant gateway's config; the token map is written mode 0600 beside it."""

    settings: TenantGatewaySettings

    @property
    def http_url(self) -> str:
        return f"127.0.0.1:{self.settings.http_port}"

    def listen_ports(self) -> list[int]:
        return [self.settings.listen_port, self.settings.http_port]

    def log(self) -> list["LogEntry"]:
        return parse_log(self.access_log.read_text()) if self.access_log.exists() else []

    def directives(self) -> list[dict]:
        fd = os.open(self.dir / TOKEN_MAP, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(render(token_map(self.settings.tenants)))
        return config(self.settings, self.dir)


@dataclass(frozen=True)
class LogEntry:
    """One access-log line (config.LOG_FIELDS): which tenant called what, who answered, with which status."""

    uri: str
    status: int
    upstream: str          # "" when the gateway answered alone
    grpc_status: str       # the server's trailer, else the gateway's own header; "" for HTTP
    tenant: str
    seconds: float


def parse_log(text: str) -> list[LogEntry]:
    entries = []
    for r in parse_log_fields(text, LOG_FIELDS):
        trailer, header = r["upstream_trailer_grpc_status"], r["sent_http_grpc_status"]
        grpc_status = trailer if trailer != "-" else header
        upstream = r["upstream_addr"]
        entries.append(LogEntry(r["request_uri"], int(r["status"]), "" if upstream == "-" else upstream,
                                "" if grpc_status == "-" else grpc_status, r[TENANT.removeprefix("$")],
                                float(r["request_time"])))
    return entries
