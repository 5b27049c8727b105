"""Stopping a child server process: a signal, a bounded wait, then SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_process(process: subprocess.Popen | None, sig: int = signal.SIGTERM, timeout: float = 30.0,
                 group: bool = True) -> None:
    """Send `sig` to a running `process` (its whole process group with `group`), wait up to `timeout`
    seconds for it to exit, then kill it. Does nothing when it is absent or already gone."""
    if process is None or process.poll() is not None:
        return

    def send(s: int) -> None:
        if group:
            os.killpg(process.pid, s)
        else:
            process.send_signal(s)

    send(sig)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        process.wait()
