"""hotpath.runtime.lifetime without a server: a process exits by itself once its parent is gone."""

import os
import signal
import subprocess
import sys
import time

import psutil

from hotpath.runtime.lifetime import stub_arguments

# A parent that starts a child calling exit_with_server(), prints the child's PID, then waits forever.
PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]])
print(child.pid, flush=True)
time.sleep(3600)
"""
CHILD = "from hotpath.runtime.lifetime import exit_with_server; exit_with_server(poll_s=0.05); import time; " \
        "time.sleep(3600)"


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.02)
    return False


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
