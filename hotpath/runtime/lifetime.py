"""A Python-backend stub never outlives its tritonserver, crash included.

Call `exit_with_server()` first thing in a model's `initialize`. It sets up two watchers:

1. Fast path, a daemon thread in the stub: compares `os.getppid()` with the server's PID every `POLL_S`
   (the kernel reparents a process the moment its parent exits, zombie or not), then removes the stub's
   /dev/shm region (the dead server can no longer) and ends the stub with `os._exit` (no finalization: it
   could block on locks the dead server or a busy main thread holds).
2. A tiny watcher process outside the stub (`WATCHER`, `python -I -S -c`, standard library only, ~9 MB
   RSS): it holds pidfds of the stub and of the server, waits for either to exit, and when the server goes
   first SIGKILLs the stub (`pidfd_send_signal`: no PID-reuse race) and removes its region. It exits as
   soon as the stub is gone: with its server, with its model's unload (server alive: region left to it)
   or killed by the watchdog. It runs in a session of its own and ignores SIGINT/SIGTERM, so a Ctrl-C to
   `hotpath serve`'s process group leaves it waiting for the stub, as it should.

Why the thread alone is not enough. Triton 2.51's stub checks its parent itself (every 300 ms,
`kill(parent_pid, 0)` in python_backend's pb_stub.cc). A SIGKILLed tritonserver not yet reaped is a zombie,
which that check takes for alive (the thread handles this case), but once the server is reaped the stub's
own exit path runs first and can deadlock: seen twice on this machine, orphan stubs with parent PID 1,
290 MB-1.1 GB each, every thread in futex_do_wait, still alive minutes later. The thread then never runs
again (the lock it needs, the GIL, is held), and SIGTERM is ignored by the stub; only a process outside can
end it. pidfds make that race-free: a pidfd is readable once its process has exited, zombie or reaped.

The server's PID comes from the stub's own command line (argv[5] is the PID tritonserver passes it), so a
stub whose server died before `initialize` ran (already reparented) exits at once. (Triton 2.51 `exec`s the
stub from `bash -c`, so its parent is tritonserver itself; were it ever started through a wrapper that
stays, the wrapper is watched.)

Not PR_SET_PDEATHSIG: it fires when the *thread* that forked the process exits, and Triton forks each stub
from a thread that ends right after the instance is created (the Python backend declares parallel instance
loading, so Triton core initializes instances under `std::async(std::launch::async, ...)`: core r24.10
src/backend_model.cc), which would kill every stub just after its load.

Standard library only, Linux >= 5.3 and Python >= 3.9 (pidfds): this runs inside Triton's Python backend,
in the production container too (Ubuntu 22.04, Python 3.10).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

POLL_S = 0.2
STUB_BINARY = "triton_python_backend_stub"
SHM_DIR = Path("/dev/shm")
WATCHER_NAME = "hotpath-stub-watcher"   # sys.argv[1] of every watcher process: how tests and people find it

# argv: -c NAME STUB_PID SERVER_PIDFD REGION. The stub is this process's parent: once its pidfd is open, a
# parent PID still equal to it proves the pidfd is the stub's (were the stub gone, we would be reparented).
WATCHER = r"""import os, select, signal, sys
for s in (signal.SIGINT, signal.SIGTERM): signal.signal(s, signal.SIG_IGN)
stub_pid, server, region = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
try: stub = os.pidfd_open(stub_pid)
except OSError: stub = None
if stub is not None and os.getppid() == stub_pid and stub not in select.select([stub, server], [], [])[0]:
    try: signal.pidfd_send_signal(stub, signal.SIGKILL)
    except OSError: pass
    else: print(f"hotpath: tritonserver is gone; {sys.argv[1]} SIGKILLed Python stub pid {stub_pid}", file=sys.stderr)
if region and select.select([server], [], [], 0)[0]:
    try: os.unlink("/dev/shm/" + region.lstrip("/"))
    except OSError: pass
"""

_watching = threading.Lock()
_started = False
_watcher: subprocess.Popen | None = None


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
    at once if it is gone already. Idempotent; returns immediately (a daemon thread and a watcher process
    do the watching)."""
    global _started, _watcher
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
        _watcher = start_watcher(server_pid, region)
        _started = True


def start_watcher(server_pid: int, region: str | None) -> subprocess.Popen | None:
    """Start the watcher process for this process (the stub) and `server_pid`, its parent; None (and a
    line on stderr) when it cannot start: the thread still watches."""
    try:
        server = os.pidfd_open(server_pid)
    except OSError as e:   # no pidfds (Linux < 5.3), or the server is gone (the thread sees it)
        return _no_watcher(f"pidfd_open({server_pid}): {e}")
    try:
        if os.getppid() != server_pid:   # gone between the check and pidfd_open: the fd may be another's
            _exit(server_pid, region, "is gone")
        return subprocess.Popen(
            [_interpreter(), "-I", "-S", "-c", WATCHER, WATCHER_NAME, str(os.getpid()), str(server), region or ""],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, close_fds=True, pass_fds=(server,),
            start_new_session=True)
    except OSError as e:
        return _no_watcher(str(e))
    finally:
        os.close(server)


def _interpreter() -> str:
    """A Python to run the watcher with. Inside the stub (an embedded interpreter) sys.executable is the
    `python3` found on PATH; never the stub binary itself."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for path in (sys.executable, getattr(sys, "_base_executable", ""),
                 os.path.join(sys.base_exec_prefix, "bin", version)):
        if path and not path.endswith(STUB_BINARY) and os.access(path, os.X_OK):
            return path
    raise OSError(f"no Python interpreter found for the {WATCHER_NAME}")


def _no_watcher(why: str) -> None:
    _log(f"hotpath: no {WATCHER_NAME} for Python stub pid {os.getpid()} ({why}); its thread still watches")
    return None


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
    _log(f"hotpath: tritonserver (pid {server_pid}) {why}; Python stub pid {os.getpid()} exits")
    os._exit(1)


def _log(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:  # noqa: BLE001 - the log may be gone with the server; go on regardless
        pass
