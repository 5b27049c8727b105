"""hotpath.runtime.lifetime without a server: a process exits by itself once its parent is gone, and a
stub deadlocked in its own exit path (no thread of its can run) is killed by its watcher process."""

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from hotpath.runtime.lifetime import STUB_BINARY, WATCHER_NAME, stub_arguments

# A parent that starts a child calling exit_with_server(), prints the child's PID, then waits forever.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(3600)
"""
CHILD = "from hotpath.runtime.lifetime import exit_with_server; exit_with_server(poll_s=0.05); import time; " \
        "time.sleep(3600)"

# A fake tritonserver: starts the fake stub with a stub's argv ({server} = its own PID), waits forever.
SERVER = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)   # dies of Ctrl-C even when started with SIGINT ignored (`cmd &`)
child = subprocess.Popen([a.replace("{server}", str(os.getpid())) for a in sys.argv[1:]])
print(child.pid, flush=True)
time.sleep(3600)
"""
# A fake stub (argv as Triton's after the binary: model.py, region, sizes, server PID; then what to do).
# Like pb_stub.cc it ignores SIGINT and SIGTERM. "deadlock": blocks in a C call that holds the GIL forever, so no thread of
# it can run again, as in a stub deadlocked in its exit path (every thread in futex_do_wait). A number:
# exits normally after that many seconds (its model unloaded, the server alive).
STUB = """
import ctypes, signal, sys, time
for s in (signal.SIGINT, signal.SIGTERM):
    signal.signal(s, lambda *_: None)   # a handler, as pb_stub.cc's (SIG_IGN would pass on to children)
from hotpath.runtime.lifetime import exit_with_server
exit_with_server(poll_s=0.05)
if sys.argv[5] == "deadlock":
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})   # no EINTR ends the sleep
    ctypes.PyDLL(None).sleep(3600)
    sys.exit("the deadlock ended")
time.sleep(float(sys.argv[5]))
"""


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def test_a_process_exits_when_its_parent_is_killed_even_unreaped():
    parent = subprocess.Popen([sys.executable, "-c", PARENT, CHILD], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    try:
        time.sleep(0.5)
        assert not _gone(child, 0.1), "the child exited while its parent lives"
        os.kill(parent.pid, signal.SIGKILL)   # not reaped until the end: a zombie, as a crashed server can be
        assert _gone(child, 5.0), "the child outlived its killed parent"
    finally:
        parent.wait()
        if not _gone(child, 0):
            os.kill(child, signal.SIGKILL)


def test_the_server_pid_comes_from_a_stubs_command_line():
    argv = [b"/b/triton_python_backend_stub", b"/r/m/1/model.py", b"triton_python_backend_shm_region_x",
            b"1048576", b"1048576", b"4242", b"/b/python", b"33", b"m_0_0", b"DEFAULT"]
    assert stub_arguments(b"\0".join(argv) + b"\0")[5] == "4242"
    assert stub_arguments(b"/usr/bin/python3\0-m\0pytest\0") is None
    assert stub_arguments(b"\0".join([argv[0], *argv[1:5], b"x"])) is None


class FakeServer:
    """A fake tritonserver (own session, as `hotpath serve` runs in a terminal's process group) with one
    fake stub under it, run through a symlink named like Triton's stub so that its argv is a stub's."""

    def __init__(self, tmp_path: Path, mode: str):
        link = tmp_path / STUB_BINARY
        link.symlink_to(sys.executable)
        model = tmp_path / "model.py"
        model.write_text(STUB)
        self.region = SHM_DIR / f"hotpath_test_region_{uuid.uuid4()}"
        self.region.write_bytes(b"\0" * 4096)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self.server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(link), str(model), self.region.name, "1048576", "1048576",
             "{server}", mode], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True)
        self.stub = int(self.server.stdout.readline())
        self.watchers = self._watchers(within_s=5.0)   # [] without the watcher process: the tests then fail

    def _watchers(self, within_s: float) -> list[psutil.Process]:
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            try:
                found = [p for p in psutil.Process(self.stub).children() if WATCHER_NAME in p.cmdline()]
            except psutil.Error:
                return []
            if found:
                return found
            time.sleep(0.02)
        return []

    def watchers_gone(self, within_s: float) -> bool:
        return bool(self.watchers) and all(_gone(p.pid, within_s) for p in self.watchers)

    def close(self):
        for pid in (self.server.pid, self.stub, *(p.pid for p in self.watchers)):
            if not _gone(pid, 0):
                os.kill(pid, signal.SIGKILL)
        self.server.wait()
        self.region.unlink(missing_ok=True)


SHM_DIR = Path("/dev/shm")


@pytest.fixture
def fake(tmp_path):
    made: list[FakeServer] = []
    yield lambda mode: made.append(FakeServer(tmp_path, mode)) or made[-1]
    for server in made:
        server.close()


def test_a_deadlocked_stub_is_killed_when_its_server_dies(fake):
    """Fails with the thread alone: the deadlocked stub (GIL held forever) outlives its server."""
    f = fake("deadlock")
    rss_mb = sum(p.memory_info().rss for p in f.watchers) / 2**20
    time.sleep(0.5)
    assert not _gone(f.stub, 0), "the fake stub exited while its server lives"
    f.server.kill()   # not reaped until close(): a zombie, as a crashed server can be
    assert _gone(f.stub, 10.0), "the deadlocked stub outlived its killed server by 10 s"
    assert f.watchers_gone(2.0), f"no {WATCHER_NAME}, or it outlived the stub it killed"
    assert not f.region.exists(), "the killed stub's /dev/shm region was left"
    assert len(f.watchers) == 1, f.watchers
    print(f"\n{WATCHER_NAME}: {rss_mb:.1f} MB RSS")


def test_a_ctrl_c_to_the_process_group_leaves_the_watcher_at_work(fake):
    """Ctrl-C reaches the whole foreground group (here the fake server's); SIGTERM to the watcher itself.
    The watcher keeps waiting, and kills the deadlocked stub when the server goes."""
    f = fake("deadlock")
    time.sleep(0.5)
    for watcher in f.watchers:
        watcher.send_signal(signal.SIGTERM)
        watcher.send_signal(signal.SIGINT)
    os.killpg(f.server.pid, signal.SIGINT)   # the fake server dies of it (KeyboardInterrupt); the stub ignores it
    assert _gone(f.server.pid, 10.0), "the fake server survived SIGINT"
    assert _gone(f.stub, 10.0), "the deadlocked stub outlived its interrupted server by 10 s"
    assert f.watchers_gone(2.0), f"no {WATCHER_NAME}, or it outlived the stub it killed"


def test_the_watcher_exits_with_its_stub_while_the_server_lives(fake):
    """A model unload: the stub exits, its watcher exits too, the server and the region are left alone."""
    f = fake("1.0")
    assert _gone(f.stub, 10.0), "the fake stub did not exit"
    assert f.watchers_gone(2.0), f"no {WATCHER_NAME}, or it outlived its stub"
    assert not _gone(f.server.pid, 0), "the server died with its stub"
    assert f.region.exists(), "the region was removed while its server lives"
