"""One NGINX master + worker on loopback in a scratch prefix, running any config: start, reload, stop."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Protocol

import psutil

from hotpath.errors import HotpathError
from hotpath.nginx.access_log import LogEntry, parse_access_log
from hotpath.nginx.directives import TEMP_KINDS, render, worker_ids
from hotpath.server.ports import port_is_free
from hotpath.shutdown import stop_process


class NginxConfig(Protocol):
    """What LocalNginx needs of a config (hotpath.gateway.config, hotpath.scaleout.balancer)."""

    grpc_port: int
    log_fields: tuple[str, ...]

    @property
    def listen_ports(self) -> list[int]: ...

    def directives(self, workdir: Path) -> list[dict]: ...

    def private_files(self) -> dict[str, str]:
        """Files beside nginx.conf that nginx.conf includes, written mode 0600 (they may hold secrets)."""
        ...


def _host(config) -> str:
    """Where this host reaches the config's listeners: its listen address (the tenant gateway's
    --listen; 127.0.0.1 for other configs), or loopback when that is every interface."""
    address = getattr(config, "listen_address", "127.0.0.1")
    return "127.0.0.1" if address in ("0.0.0.0", "*", "") else address


def _accepts(port: int, host: str = "127.0.0.1") -> bool:
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


class LocalNginx:
    """NGINX serving `config`; the config is checked with `nginx -t` before it is started or reloaded."""

    def __init__(self, config: NginxConfig):
        self.settings = config
        self.dir = Path(tempfile.mkdtemp(prefix="hotpath-nginx-"))
        self.process: subprocess.Popen | None = None

    @property
    def grpc_url(self) -> str:
        return f"{_host(self.settings)}:{self.settings.grpc_port}"

    @property
    def http_url(self) -> str:
        """The config's HTTP port (the tenant gateway has one, the replica balancer not)."""
        return f"{_host(self.settings)}:{self.settings.http_port}"

    @property
    def access_log(self) -> Path:
        return self.dir / "access.log"

    def log(self, start: int = 0, count: int = 0, timeout_s: float = 30.0) -> list[LogEntry]:
        """Access-log entries from `start` on, waiting (up to `timeout_s`) until there are `count`: NGINX
        writes a line after it has answered, so a client may see the answer first."""
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.access_log.read_text() if self.access_log.exists() else ""
            entries = parse_access_log(text, self.settings.log_fields)[start:]
            if len(entries) >= count or time.monotonic() > deadline:
                return entries
            time.sleep(0.05)

    def write_config(self) -> str:
        """Write the private files and nginx.conf, check them with `nginx -t`; the config's text."""
        self._make_temp_dirs()
        for name, text in self.settings.private_files().items():
            fd = os.open(self.dir / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        text = render(self.settings.directives(self.dir))
        (self.dir / "nginx.conf").write_text(text)
        check = subprocess.run(self._cmd("-t", "-q"), capture_output=True, text=True)
        if check.returncode != 0:
            raise HotpathError(f"nginx rejected its config:\n{check.stderr}\n{text}")
        return text

    def _make_temp_dirs(self) -> None:
        """NGINX's temp dirs (bodies over client_body_buffer_size are written there), owned by the workers'
        user with explicit modes: under `umask 077` as root, dirs made with the umask were the master's
        alone, and every body that spilled to disk got 500."""
        ids = worker_ids()
        (self.dir / "tmp").mkdir(exist_ok=True)
        (self.dir / "tmp").chmod(0o755)
        for kind in TEMP_KINDS:
            path = self.dir / "tmp" / kind
            path.mkdir(exist_ok=True)
            path.chmod(0o700)
            if ids is not None:
                os.chown(path, *ids)

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
        self.dir.chmod(0o755)   # workers run as an unprivileged user when the master is root
        self.write_config()
        address = getattr(self.settings, "listen_address", "127.0.0.1")
        busy = [port for port in self.settings.listen_ports if not port_is_free(port, address)]
        if busy:
            raise HotpathError(f"nginx cannot listen on {address} port(s) {busy}: already in use")
        self.process = subprocess.Popen(self._cmd(), stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        # Started = its pid file names it and every listen port accepts. NGINX writes the pid file only
        # once it has bound every port (after a failed bind it retries for 2.5 s, then exits without
        # one), so a port accepting on behalf of another process is not taken for NGINX. The ports
        # are checked too: refused connections were seen right after the pid file appeared, on a busy host.
        t0, host = time.monotonic(), _host(self.settings)
        while not (self._pid_file_is_ours() and all(_accepts(port, host) for port in self.settings.listen_ports)):
            if self.process.poll() is not None or time.monotonic() - t0 > timeout:
                raise HotpathError(f"nginx did not start: {self._error_log()}")
            time.sleep(0.02)
        if self.process.poll() is not None:
            raise HotpathError(f"nginx exited right after starting: {self._error_log()}")
        return self

    def reload(self, config: NginxConfig | None = None, timeout: float = 10.0) -> None:
        """Serve `config` (else the current one, its files written again) without dropping a call: SIGHUP
        starts workers on the new config, the old ones stop accepting and finish their calls. Returns once
        a new worker runs and no old one accepts; a config `nginx -t` rejects leaves the running one as it
        is. Listen ports must stay the same."""
        if config is not None and list(config.listen_ports) != list(self.settings.listen_ports):
            raise HotpathError("a reload cannot change the listen ports; restart instead")
        previous, self.settings = self.settings, config or self.settings
        try:
            self.write_config()
        except HotpathError:
            self.settings = previous
            self.write_config()
            raise
        master = psutil.Process(self.process.pid)
        old = {p.pid for p in master.children()}
        self.process.send_signal(signal.SIGHUP)
        t0 = time.monotonic()
        while not self._reloaded(master, old):
            if self.process.poll() is not None or time.monotonic() - t0 > timeout:
                raise HotpathError(f"nginx did not reload: {self._error_log()}")
            time.sleep(0.02)

    @staticmethod
    def _reloaded(master: psutil.Process, old: set[int]) -> bool:
        """A worker not in `old` runs, and every old one is gone or shutting down (its process title says
        so once it has closed the listen sockets)."""
        new = False
        for worker in master.children():
            try:
                if worker.pid not in old:
                    new = True
                elif "shutting down" not in " ".join(worker.cmdline()):
                    return False
            except psutil.NoSuchProcess:
                continue
        return new

    def _pid_file_is_ours(self) -> bool:
        try:
            return (self.dir / "nginx.pid").read_text().strip() == str(self.process.pid)
        except OSError:
            return False

    def _error_log(self) -> str:
        path = self.dir / "error.log"
        return path.read_text()[-2000:] if path.exists() else "(no error log)"

    def stop(self) -> None:
        stop_process(self.process, signal.SIGQUIT, 10)   # SIGQUIT: graceful, finish in-flight requests
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalNginx":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
