"""Which instance of a model may spread one text over every core: one that finds the others idle.

One text on several ORT threads is the latency-first layout of a host with more cores than instances
(hotpath.runtime.split_run): at concurrency 1 the other instances are idle, so their cores are free. Once
two instances each run a text on two threads, four threads share two cores and both texts slow down
(perf/reports/compare-floor.md: the step 6.9 ms at c=1, 10.4 ms at c=2). So each instance holds a lock on a
file of its own while it runs anything (an advisory flock, per model and server), and a text goes wide only
when no other instance's lock is held. Two instances that start together both see the other busy and both
stay on one core. The locks are the kernel's: a stub that dies holding one releases it.
"""

from __future__ import annotations

import fcntl
import os
import re
import time
from pathlib import Path

SHARED_DIRS = (Path("/dev/shm"), Path("/tmp"))
RESCAN_S = 1.0   # how often the folder is read again for instances that started later (not per text)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


class CoreGate:
    def __init__(self, folder: Path, prefix: str, instance: str):
        self.folder, self.prefix = folder, prefix
        self.path = folder / f"{prefix}{_safe(instance)}.lock"
        self._own = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        self._others: dict[str, int] = {}
        self._scanned_at = float("-inf")

    @classmethod
    def for_instance(cls, model: str, instance: str, server_pid: int | None = None) -> "CoreGate":
        """The gate of `instance`, shared with every other instance of `model` under one tritonserver (the
        stubs' parent)."""
        folder = next((d for d in SHARED_DIRS if d.is_dir() and os.access(d, os.W_OK)), SHARED_DIRS[-1])
        return cls(folder, f"hotpath-cores-{server_pid or os.getppid()}-{_safe(model)}-", instance)

    def enter(self) -> bool:
        """Mark this instance busy; True when every other instance is idle (this one may use every core)."""
        fcntl.flock(self._own, fcntl.LOCK_EX)
        return not any(self._busy(fd) for fd in self._other_fds())

    def leave(self) -> None:
        fcntl.flock(self._own, fcntl.LOCK_UN)

    def close(self) -> None:
        """Close the files and remove this instance's own (a killed stub's file stays, unlocked: idle)."""
        for fd in (self._own, *self._others.values()):
            os.close(fd)
        self._others.clear()
        self.path.unlink(missing_ok=True)

    def _other_fds(self) -> list[int]:
        now = time.monotonic()
        if now - self._scanned_at < RESCAN_S:
            return list(self._others.values())
        self._scanned_at = now
        for entry in os.scandir(self.folder):   # instances that started after this one
            if entry.name.startswith(self.prefix) and entry.path != str(self.path) and entry.name not in self._others:
                try:
                    self._others[entry.name] = os.open(entry.path, os.O_RDONLY)
                except OSError:
                    continue
        return list(self._others.values())

    @staticmethod
    def _busy(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
