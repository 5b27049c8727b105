"""A local redis-server (Debian's redis-server package): on a free loopback port, with a data dir of its
own, for `python -m hotpath.gateway serve --redis local` and the tests. It never outlives its owner: the
kernel sends it SIGTERM when the process that started it exits (PR_SET_PDEATHSIG, set between fork and
exec; it fires when the starting *thread* ends, so start it from the thread that lives as long as the
owner: the main thread in `serve` and in pytest fixtures), and `stop()` ends it before that.

Nothing is persisted (no RDB, no AOF): quotas and cached answers are worth seconds to hours, and a
restarted Redis starting empty is one of the faults the gateway is built to take (docs/operations.md).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.server.ports import free_ports
from hotpath.shared_state.target import RedisTarget
from hotpath.shutdown import stop_process

PR_SET_PDEATHSIG = 1
# Quotas and cached answers all carry a TTL: under memory pressure the least recently used of them go first.
MAXMEMORY = "256mb"
MAXMEMORY_POLICY = "volatile-lru"


def _die_with(owner: int):
    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != owner:   # the owner exited between fork and prctl
            os._exit(1)
    return preexec


def ping(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Redis answers PING on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class LocalRedis:
    """redis-server on 127.0.0.1:`port` (a free one by default); `with LocalRedis() as redis: redis.target`."""

    def __init__(self, port: int = 0, maxmemory: str = MAXMEMORY):
        self.port = port or free_ports(1)[0]
        self.maxmemory = maxmemory
        self.dir = Path(tempfile.mkdtemp(prefix="hotpath-redis-"))
        self.process: subprocess.Popen | None = None

    @property
    def target(self) -> RedisTarget:
        return RedisTarget("127.0.0.1", self.port)

    @property
    def url(self) -> str:
        return self.target.url

    def command(self) -> list[str]:
        exe = shutil.which("redis-server") or "/usr/bin/redis-server"
        if not os.path.exists(exe):
            raise HotpathError("no `redis-server` binary: scripts/setup.sh installs Debian's redis-server package")
        return [exe, "--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.dir),
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--protected-mode", "yes",
                "--maxmemory", self.maxmemory, "--maxmemory-policy", MAXMEMORY_POLICY,
                "--logfile", str(self.dir / "redis.log")]

    def start(self, timeout: float = 10.0) -> "LocalRedis":
        """Start it and wait until it answers PING (also after `kill()`: the same port, a fresh, empty Redis)."""
        if self.process is not None and self.process.poll() is None:
            return self
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.STDOUT, start_new_session=True,
                                        preexec_fn=_die_with(os.getpid()))
        t0 = time.monotonic()
        while not ping("127.0.0.1", self.port):
            if self.process.poll() is not None or time.monotonic() - t0 > timeout:
                log = self.dir / "redis.log"
                tail = log.read_text()[-2000:] if log.exists() else "(no log)"
                self.stop()
                raise HotpathError(f"redis-server did not start on port {self.port}: {tail}")
            time.sleep(0.02)
        return self

    def kill(self) -> None:
        """SIGKILL, as a crash would (the tests' fault); `start()` brings it back on the same port."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def pause(self) -> None:
        """SIGSTOP: a Redis that accepts connections (the kernel does) but answers nothing, a slow Redis."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)   # a paused one cannot act on SIGTERM
        stop_process(self.process, signal.SIGTERM, 10)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalRedis":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
