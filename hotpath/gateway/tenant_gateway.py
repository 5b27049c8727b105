"""The tenant gateway as it runs: NGINX (hotpath.gateway.config) and the stream admission beside it."""

from __future__ import annotations

import dataclasses
import secrets

from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import CHARGE_SOCKET
from hotpath.gateway.streams import Charger, StreamAdmission
from hotpath.nginx.access_log import LogEntry
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.server.ports import free_ports


class TenantGateway:
    """NGINX on the settings' ports, and the stream admission on a free loopback port that only NGINX
    calls; started and stopped together (`with TenantGateway(settings) as gateway:`)."""

    def __init__(self, settings: TenantGatewaySettings):
        status, = free_ports(1)
        key = settings.charge_key or secrets.token_hex(16)
        self.nginx = LocalNginx(dataclasses.replace(settings, status_port=settings.status_port or status,
                                                    charge_key=key))
        # Port 0 unless the settings name one: the admission binds first and NGINX is told the port it got.
        self.streams = StreamAdmission(settings.stream_port or 0, settings.grpc_upstreams,
                                       Charger(self.nginx.dir / CHARGE_SOCKET, key))

    @property
    def settings(self) -> TenantGatewaySettings:
        return self.nginx.settings

    @property
    def grpc_url(self) -> str:
        return self.nginx.grpc_url

    @property
    def http_url(self) -> str:
        return self.nginx.http_url

    @property
    def status_url(self) -> str:
        """The gateway's own /metrics and /health (loopback)."""
        return f"127.0.0.1:{self.settings.status_port}"

    @property
    def access_log(self):
        return self.nginx.access_log

    @property
    def process(self):
        return self.nginx.process

    def summary(self) -> str:
        """Where each door is and what holds it, for the log."""
        s = self.settings
        openai = f", OpenAI http://{s.address(s.openai_port)}/v1 -> {', '.join(s.openai_upstreams)}" \
            if s.openai_port else ""
        return (f"gRPC {s.address(s.grpc_port)}, HTTP {s.address(s.http_port)} -> {', '.join(s.grpc_upstreams)} / "
                f"{', '.join(s.http_upstreams)}{openai}; {len(s.tenants)} tenant(s), {s.in_flight_cap} inference "
                f"calls in flight, {s.streams_cap} streams open, bodies up to {s.max_body_bytes} bytes; access log "
                f"{self.access_log}; quotas {'shared in ' + s.redis.url if s.redis else 'per replica (no Redis)'}; "
                f"metrics and health http://{s.address(s.status_port)}/metrics, /health")

    def log(self, start: int = 0, count: int = 0, timeout_s: float = 30.0) -> list[LogEntry]:
        return self.nginx.log(start, count, timeout_s)

    def reload(self, settings: TenantGatewaySettings) -> None:
        """Serve new settings (tenants, limits) without dropping a call; the stream admission stays."""
        self.nginx.reload(dataclasses.replace(settings, stream_port=self.settings.stream_port,
                                              status_port=self.settings.status_port,
                                              charge_key=self.settings.charge_key))

    def start(self) -> "TenantGateway":
        self.streams.start()
        self.nginx.settings = dataclasses.replace(self.nginx.settings, stream_port=self.streams.port)
        try:
            self.nginx.start()
        except BaseException:
            self.streams.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.streams.stop()
        finally:   # NGINX never outlives the gateway (a failed stop of the admission left masters behind)
            self.nginx.stop()

    def __enter__(self) -> "TenantGateway":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
