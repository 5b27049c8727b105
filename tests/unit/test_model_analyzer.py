"""Stopping Model Analyzer on a timeout takes the servers it started in sessions of their own down with it."""

import subprocess
import sys

import pytest

from perf.lab.compare.alternatives.model_analyzer import _descendants, _running, _stop

# Like Model Analyzer: it handles SIGINT itself (it checkpoints, then stops), whatever the disposition it
# inherited (a CI job started in the background ignores SIGINT), and starts a long-lived "server" in a new
# session that shares its stdout. It says when the server runs, so the test waits on a line, not a clock.
STAND_IN = """
import signal, subprocess, sys, time
def interrupted(*_):
    print("interrupted", flush=True)
    sys.exit(1)
signal.signal(signal.SIGINT, interrupted)
server = subprocess.Popen(["sleep", "300"], start_new_session=True)
print("started", server.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.timeout(300)   # _stop's own waits are at most 60 + 2 x 30 s; a hang fails here, not a clock assert
def test_stop_ends_the_process_and_what_it_started_in_another_session():
    proc = subprocess.Popen([sys.executable, "-c", STAND_IN], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    started = proc.stdout.readline().split()
    assert started[0] == "started", started
    server = int(started[1])
    assert server in _descendants(proc.pid) and _running(server)
    output = _stop(proc)                                # returns although the server holds the pipe
    assert output.splitlines()[0] == "interrupted"      # SIGINT first: Model Analyzer's own clean stop
    assert proc.returncode == 1 and not _running(server)
