"""Stopping Model Analyzer on a timeout takes the servers it started in sessions of their own down with it."""

import subprocess
import sys
import time
from pathlib import Path

from hotpath.perf.compare.alternatives.model_analyzer import _descendants, _stop


def _running(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_stop_ends_the_process_and_what_it_started_in_another_session():
    # Like Model Analyzer: a parent that starts a long-lived "server" in a new session, sharing its stdout.
    script = ("import subprocess, time; print('started', flush=True); "
              "subprocess.Popen(['sleep', '300'], start_new_session=True); time.sleep(300)")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    while not (below := _descendants(proc.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert below and all(_running(pid) for pid in below)
    t0 = time.monotonic()
    output = _stop(proc)
    assert time.monotonic() - t0 < 30                  # the server holding the pipe does not block it
    assert output.startswith("started")
    assert proc.returncode is not None and not any(_running(pid) for pid in below)
