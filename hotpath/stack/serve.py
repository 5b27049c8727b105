"""`hotpath serve`: one server in the foreground until Ctrl-C or SIGTERM."""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path

from hotpath.errors import ServerError
from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, port_is_free
from hotpath.server.tracing import OtlpTracing
from hotpath.server.watchdog import Watchdog

log = logging.getLogger(__name__)


def serve_forever(ports: ServerPorts, repository: Path | None = None, ort_threads: int | None = None,
                  demo: bool = False, tracing: OtlpTracing | None = None, watchdog: bool = True,
                  probe_s: float = 5.0, openai_port: int = 0, openai_aliases: list[str] | None = None,
                  tenants: Path | None = None) -> int:
    """`hotpath serve`: start the server, print endpoints (and a demo request), wait for Ctrl-C/SIGTERM.
    With `watchdog`, models whose Python stub dies are restarted (explicit model control). With
    `openai_port`, the OpenAI-compatible API runs beside it (hotpath.openai_api), stopped first. With
    `tenants` (a tenants file), the tenant gateway runs in front of both (hotpath.gateway.local), and the
    demo goes through it with the first tenant's token."""
    server = LocalTriton(repository, ports, ort_threads, model_control="explicit" if watchdog else "none",
                         extra_args=tracing.flags() if tracing else None)
    guard = Watchdog(server, probe_s=probe_s, log=logging.getLogger("hotpath.server.watchdog").info) if watchdog else None
    stop = {"signal": None}

    def _handle(signum, _frame):
        stop["signal"] = signum

    signal.signal(signal.SIGTERM, _handle)
    signal.signal(signal.SIGINT, _handle)
    api = gateway = None
    if openai_port and not port_is_free(openai_port):
        raise ServerError(f"OpenAI API port {openai_port} is in use; pass --openai-port or set HOTPATH_OPENAI_PORT")
    server.start()
    try:
        if openai_port:
            from hotpath.openai_api.openai_server import OpenAIServer

            api = OpenAIServer(server.grpc_url, openai_port, repository, aliases=openai_aliases).start()
            log.info(f"[serve] OpenAI  {api.base_url} (log: {api.log_path})")
        log.info(f"[serve] gRPC    {server.grpc_url}\n[serve] HTTP    http://{server.http_url}\n"
                 f"[serve] metrics {server.metrics_url}")
        if tenants:
            gateway = _start_gateway(tenants, server, api, repository)
        if tracing:
            log.info(f"[serve] traces  OpenTelemetry, 1 request in {tracing.rate} -> {tracing.url}")
        if demo:
            from hotpath.stack.demo import show_example

            if gateway:
                s = gateway.settings
                openai = f"http://{s.address(s.openai_port)}/v1" if s.openai_port else None
                show_example(gateway.grpc_url, openai, token=s.tenants[0].token)
            else:
                show_example(server.grpc_url, api.base_url if api else None)
        if guard:
            guard.start()
        log.info("[serve] serving; Ctrl-C to stop")
        while stop["signal"] is None:
            if (not guard or not guard.alive()) and server.process.poll() is not None:
                log.error(f"[serve] tritonserver exited ({server.process.returncode}):\n{server.log_tail()}")
                return 1
            if gateway and gateway.process.poll() is not None:
                log.error(f"[serve] the tenant gateway's nginx exited ({gateway.process.returncode})")
                return 1
            if api and api.process.poll() is not None:
                log.error(f"[serve] the OpenAI API exited ({api.process.returncode}):\n{api.log_tail()}")
                return 1
            time.sleep(0.5)
    finally:
        if gateway:
            gateway.stop()
        if api:
            api.stop()
        if guard:
            guard.stop()
        log.info("[serve] stopping tritonserver")
        server.stop()
    return 0


def _start_gateway(tenants: Path, server: LocalTriton, api, repository: Path | None):
    """The tenant gateway in front of the server (and the API), started; its doors logged."""
    from hotpath.gateway.local import local_gateway

    gateway = local_gateway(tenants, server.grpc_url, server.http_url, f"{api.host}:{api.port}" if api else "",
                            repository).start()
    log.info(f"[serve] gateway {gateway.summary()}")
    return gateway
