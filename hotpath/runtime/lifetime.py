"""A Python-backend stub exits by itself when its tritonserver dies, crash included.

Call `exit_with_server()` first thing in a model's `initialize`. Triton 2.51's stub has a check of its
own (every 300 ms, `kill(parent_pid, 0)` in python_backend's pb_stub.cc), but a SIGKILLed tritonserver
that its parent has not reaped yet is a zombie, which that check takes for alive: the stubs stayed as
orphans (1.1-1.4 GB each, parent PID 1) for as long as the zombie lasted, and they ignore SIGTERM (the
stub installs a handler that skips SIGINT and SIGTERM).

Mechanism: a daemon thread compares `os.getppid()` with the server's PID every `POLL_S`. The kernel
reparents a process the moment its parent exits, zombie or not, so the parent PID changes at the
crash; the thread then removes the stub's shared-memory region (the dead server can no longer) and
ends the process with `os._exit` (no Python finalization, no C++ destructors: those could block on
locks the dead server or a busy main thread holds). The server's PID comes from the stub's own command
line (argv[5] is the PID tritonserver passes it), so a stub whose server died before `initialize` ran
(already reparented) exits at once. (Triton 2.51 `exec`s the stub from `bash -c`, so its parent is
tritonserver itself; were it ever started through a wrapper that stays, the wrapper is watched.)

Not PR_SET_PDEATHSIG: it fires when the *thread* that forked the process exits, and Triton forks each
stub from a thread that ends right after the instance is created (the Python backend declares parallel
instance loading, so Triton core initializes instances under `std::async(std::launch::async, ...)`:
core r24.10 src/backend_model.cc), which would kill every stub just after its load.

Standard library only: this runs inside Triton's Python backend, in the production container too.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.2
STUB_BINARY = "triton_python_backend_stub"
SHM_DIR = Path("/dev/shm")

_watching = threading.Lock()
_started = False


def stub_arguments(cmdline: bytes | None = None) -> list[str] | None:
    """This process's argv when it is a Python-backend stub, else None. A stub's argv: binary, model
    path, shared-memory region, default size, growth size, parent PID, install path, IPC handle, name."""
    if cmdline is None:
        try:
            cmdline = Path("/proc/self/cmdline").read_bytes()
        except OSError:
            return None
    argv = [a.decode(errors="replace") for a in cmdline.split(b"\0") if a]
    if len(argv) < 6 or not argv[0].endswith(STUB_BINARY) or not argv[5].isdigit():
        return None
    return argv


def exit_with_server(poll_s: float = POLL_S) -> None:
    """Exit this process (os._exit) as soon as its parent, the tritonserver that started it, is gone;
    at once if it is gone already. Idempotent; returns immediately (the watching is a daemon thread)."""
    global _started
    with _watching:
        if _started:
            return
        argv = stub_arguments()
        # Outside a stub (tests, a model run by hand) the parent at the time of the call is the one to outlive.
        server_pid = int(argv[5]) if argv else os.getppid()
        region = argv[2] if argv else None
        if os.getppid() != server_pid:
            if not _running(server_pid):
                _exit(server_pid, region, "was gone before the model initialized")
            server_pid = os.getppid()   # started through a wrapper process: outlive that one
        threading.Thread(target=_watch, args=(server_pid, region, poll_s),
                         name="hotpath-exit-with-server", daemon=True).start()
        _started = True


def _running(pid: int) -> bool:
    """`pid` exists and is no zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:][:1] not in ("Z", "X")


def _watch(server_pid: int, region: str | None, poll_s: float) -> None:
    while os.getppid() == server_pid:
        time.sleep(poll_s)
    _exit(server_pid, region, "is gone")


def _exit(server_pid: int, region: str | None, why: str) -> None:
    if region:
        # boost.interprocess' shared_memory_object lives in /dev/shm under the region's name; only the
        # server (which created it and would remove it on a clean shutdown) and this stub use it.
        try:
            (SHM_DIR / region.lstrip("/")).unlink()
        except OSError:
            pass
    try:
        sys.stderr.write(f"hotpath: tritonserver (pid {server_pid}) {why}; Python stub pid {os.getpid()} "
                         f"exits\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the log may be gone with the server; exit regardless
        pass
    os._exit(1)
