"""NGINX (Debian's 1.22) as a gRPC load balancer over local replicas: config built with crossplane."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import crossplane

from hotpath.errors import HotpathError
from hotpath.processes import stop_process
from hotpath.server.ports import port_is_free

# Stateless inference and read-only calls may run twice: retry them on another replica even when
# the request already reached one (NGINX never retries a POST, which every gRPC call is, without
# `non_idempotent`). Repository, shared-memory and trace calls change state and are not retried.
IDEMPOTENT = ("ModelInfer", "ModelReady", "ServerReady", "ServerLive", "ModelMetadata", "ModelConfig",
              "ServerMetadata", "ModelStatistics")
GATEWAY_MESSAGE = "no replica could complete the call"   # grpc-message of the gateway's own errors
TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
# Access-log fields (NGINX variables), `|`-separated. The URI comes last: it is the only field a client
# writes, and may itself hold `|`.
LOG_FIELDS = ("msec", "status", "upstream_addr", "upstream_status", "upstream_trailer_grpc_status", "request_time",
              "request_uri")


def log_format(fields: tuple[str, ...] = LOG_FIELDS) -> str:
    """The log_format string of `fields` (request_uri last)."""
    if fields[-1] != "request_uri":
        raise ValueError("request_uri must be the last access-log field")
    return "|".join(f"${name}" for name in fields)


def parse_log_fields(text: str, fields: tuple[str, ...] = LOG_FIELDS) -> list[dict[str, str]]:
    """Access-log lines written with log_format(fields), as {field: value}; other lines are skipped."""
    rows = []
    for line in text.splitlines():
        values = line.split("|", len(fields) - 1)
        if len(values) == len(fields):
            rows.append(dict(zip(fields, values)))
    return rows


def d(directive: str, *args, block: list | None = None) -> dict:
    out = {"directive": directive, "args": [str(a) for a in args]}
    if block is not None:
        out["block"] = block
    return out


@dataclass(frozen=True)
class GatewaySettings:
    listen_port: int
    upstreams: tuple[str, ...]          # host:port of each replica's gRPC endpoint
    retry: bool = True                  # retry idempotent calls on another replica
    fail_timeout_s: int = 10            # a failed replica is skipped this long before it is tried again


def main_context(workdir: Path, http: list[dict], fields: tuple[str, ...] = LOG_FIELDS) -> list[dict]:
    """nginx.conf around an `http` block's own directives: one worker, files in `workdir`, an access log."""
    temp = [d(f"{kind}_temp_path", workdir / "tmp" / kind) for kind in TEMP_KINDS]
    return [
        d("daemon", "off"),
        d("worker_processes", 1),
        d("pid", workdir / "nginx.pid"),
        d("error_log", workdir / "error.log", "warn"),
        d("events", block=[d("worker_connections", 1024)]),
        d("http", block=[d("log_format", "hotpath", log_format(fields)),
                          d("access_log", workdir / "access.log", "hotpath"), *temp, *http]),
    ]


def grpc_error(name: str, grpc_status: int, message: str) -> dict:
    """A named location answering a gRPC call with `grpc_status` in a trailers-only response."""
    return d("location", name, block=[
        d("default_type", "application/grpc"),
        d("add_header", "grpc-status", grpc_status, "always"),
        d("add_header", "grpc-message", message, "always"),
        d("return", 204)])


def config(settings: GatewaySettings, workdir: Path) -> list[dict]:
    """The whole nginx.conf as crossplane directives."""
    servers = [d("server", u, "max_fails=1", f"fail_timeout={settings.fail_timeout_s}s") for u in settings.upstreams]
    retry = [d("grpc_next_upstream", "error", "timeout", "http_502", "http_503", "non_idempotent"),
             d("grpc_next_upstream_tries", len(settings.upstreams))] if settings.retry else \
            [d("grpc_next_upstream", "off")]
    return main_context(workdir, [
        d("client_body_buffer_size", "8m"),   # request bodies stay in memory
        d("client_max_body_size", "16m"),
        d("upstream", "triton_grpc", block=[d("least_conn"), *servers, d("keepalive", 32)]),
        d("server", block=[
            d("listen", f"127.0.0.1:{settings.listen_port}", "http2"),
            d("grpc_connect_timeout", "1s"),
            # NGINX's own errors (no replica reachable, one died mid-call) as gRPC UNAVAILABLE in a
            # trailers-only response: a gRPC client may retry that, never a plain HTTP 502.
            d("error_page", 502, 503, 504, "=", "@unavailable"),
            d("location", "~", f"^/inference\\.GRPCInferenceService/({'|'.join(IDEMPOTENT)})$", block=[
                d("grpc_pass", "grpc://triton_grpc"), *retry]),
            d("location", "/", block=[d("grpc_pass", "grpc://triton_grpc"),
                                       d("grpc_next_upstream", "error", "timeout")]),
            grpc_error("@unavailable", 14, GATEWAY_MESSAGE),
        ]),
    ])


def render(directives: list[dict]) -> str:
    return crossplane.build(directives) + "\n"


@dataclass
class Hop:
    """One line of the access log: a request and the replicas NGINX tried for it."""

    at: float
    uri: str
    status: int
    upstreams: tuple[str, ...]
    grpc_status: str

    @property
    def served_by(self) -> str:
        return self.upstreams[-1] if self.upstreams else ""


def parse_access_log(text: str) -> list[Hop]:
    """Access log lines (LOG_FIELDS) as hops; tried upstreams come as "a, b" in one field."""
    return [Hop(float(r["msec"]), r["request_uri"], int(r["status"]),
                tuple(a for a in r["upstream_addr"].split(", ") if a not in ("", "-")),
                r["upstream_trailer_grpc_status"])
            for r in parse_log_fields(text)]


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
        return True
    except OSError:
        return False


class LocalNginx:
    """One NGINX master + worker on loopback, in a scratch prefix; config checked with `nginx -t` first."""

    def __init__(self, settings: GatewaySettings):
        self.settings = settings
        self.dir = Path(tempfile.mkdtemp(prefix="hotpath-nginx-"))
        self.process: subprocess.Popen | None = None

    @property
    def grpc_url(self) -> str:
        return f"127.0.0.1:{self.settings.listen_port}"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def directives(self) -> list[dict]:
        """The nginx.conf it runs; a subclass serves another (and writes the files that one includes)."""
        return config(self.settings, self.dir)

    def _cmd(self, *extra: str) -> list[str]:
        exe = shutil.which("nginx") or "/usr/sbin/nginx"
        if not os.path.exists(exe):
            raise HotpathError("no `nginx` binary: scripts/setup.sh installs Debian's nginx package")
        return [exe, "-p", str(self.dir), "-c", str(self.dir / "nginx.conf"), "-e", str(self.dir / "error.log"), *extra]

    def start(self, timeout: float = 10.0) -> "LocalNginx":
        """Check the config, start NGINX, wait until it serves; on any failure stop it and remove the
        scratch dir (it may hold secrets, e.g. the tenant gateway's token map) before raising."""
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout: float) -> "LocalNginx":
        for kind in TEMP_KINDS:
            (self.dir / "tmp" / kind).mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o755)   # workers run as an unprivileged user when the master is root
        text = render(self.directives())
        (self.dir / "nginx.conf").write_text(text)
        check = subprocess.run(self._cmd("-t", "-q"), capture_output=True, text=True)
        if check.returncode != 0:
            raise HotpathError(f"nginx rejected its config:\n{check.stderr}\n{text}")
        busy = [port for port in self.listen_ports() if not port_is_free(port)]
        if busy:
            raise HotpathError(f"nginx cannot listen on 127.0.0.1 port(s) {busy}: already in use")
        self.process = subprocess.Popen(self._cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        # Started = its pid file names it and every listen port accepts. NGINX writes the pid file only
        # once it has bound every port (after a failed bind it retries for 2.5 s, then exits without
        # one), so a port accepting on behalf of another process is not taken for NGINX. The ports
        # are checked too: refused connections were seen right after the pid file appeared, on a busy host.
        t0 = time.monotonic()
        while not (self._pid_file_is_ours() and all(_accepts(port) for port in self.listen_ports())):
            if self.process.poll() is not None or time.monotonic() - t0 > timeout:
                raise HotpathError(f"nginx did not start: {self._error_log()}")
            time.sleep(0.02)
        if self.process.poll() is not None:
            raise HotpathError(f"nginx exited right after starting: {self._error_log()}")
        return self

    def _pid_file_is_ours(self) -> bool:
        try:
            return (self.dir / "nginx.pid").read_text().strip() == str(self.process.pid)
        except OSError:
            return False

    def _error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text()[-2000:] if path.exists() else "(no error log)"

    def listen_ports(self) -> list[int]:
        """The loopback ports the config listens on."""
        return [self.settings.listen_port]

    def stop(self) -> None:
        stop_process(self.process, signal.SIGQUIT, 10)   # SIGQUIT: graceful, finish in-flight requests
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalNginx":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
