"""N local tritonserver replicas of one repository, each on its own free ports."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from hotpath.server.local_triton import LocalTriton
from hotpath.server.ports import ServerPorts, free_ports


class LocalReplicas:
    def __init__(self, count: int, repository: Path | None = None, ort_threads: int | None = None):
        self.servers = []
        for _ in range(count):
            http, grpc, metrics = free_ports(3)
            self.servers.append(LocalTriton(repository, ServerPorts(http, grpc, metrics), ort_threads,
                                            log=lambda m: None))

    @property
    def grpc_urls(self) -> list[str]:
        return [s.grpc_url for s in self.servers]

    @property
    def http_urls(self) -> list[str]:
        return [s.http_url for s in self.servers]

    def start(self) -> "LocalReplicas":
        try:
            with ThreadPoolExecutor(len(self.servers)) as pool:
                list(pool.map(LocalTriton.start, self.servers))
        except Exception:
            self.stop()
            raise
        return self

    def kill(self, index: int) -> None:
        """SIGKILL one replica with its Python stubs (its process group): a crash, not a drain."""
        os.killpg(self.servers[index].process.pid, signal.SIGKILL)
        self.servers[index].process.wait()

    def stop(self) -> None:
        for s in self.servers:
            s.stop()

    def __enter__(self) -> "LocalReplicas":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
