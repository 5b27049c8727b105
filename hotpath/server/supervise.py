"""`python3 -m hotpath.server.supervise -- tritonserver ARGS...`: tritonserver under hotpath's watchdog.

The production container's entrypoint runs Triton this way, so a dead or hung Python stub is repaired
there as under `hotpath serve` (Triton 2.51 keeps such a model "ready" while every request to it
fails): the same Watchdog (hotpath.server.watchdog) reloads the model through explicit model control,
with the admin key of $HOTPATH_ADMIN_KEY. What it cannot repair ends the container instead of leaving
it broken: when tritonserver exits, or a reload fails, this process exits with tritonserver's code,
and the orchestrator (Kubernetes, compose's `restart:`) starts a new one. SIGTERM and SIGINT go to
tritonserver, which drains in-flight requests for its --exit-timeout-secs and exits.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import tritonclient.grpc as grpcclient

from hotpath import logs, settings
from hotpath.server.admin import ENV as ADMIN_KEY_ENV
from hotpath.server.watchdog import Watchdog

log = logging.getLogger(__name__)


@dataclass
class Supervised:
    """A tritonserver process this module started: what the Watchdog reads of a server."""
    process: subprocess.Popen
    grpc_url: str
    repository: Path
    model_control: str = "explicit"

    def log_tail(self, lines: int = 30) -> str:
        return "(tritonserver's log is this container's output)"


def flag(cmd: list[str], name: str, default: str | None = None) -> str | None:
    """The value of `--name=value` in a tritonserver command line (the entrypoint writes that form)."""
    prefix = f"--{name}="
    values = [a[len(prefix):] for a in cmd if a.startswith(prefix)]
    return values[-1] if values else default


def _wait_ready(process: subprocess.Popen, url: str) -> bool:
    """True once the server is ready; False if it exited first. Model loads may take minutes: no timeout."""
    with grpcclient.InferenceServerClient(url) as client:
        while process.poll() is None:
            try:
                if client.is_server_ready(client_timeout=2):
                    return True
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            time.sleep(0.5)
    return False


def exit_code(returncode: int) -> int:
    """A shell's exit status for a child's return code (killed by signal N: 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def supervise(cmd: list[str], census_s: float = 0.5, probe_s: float = 5.0) -> int:
    """Run `cmd` (a tritonserver command line with --model-control-mode=explicit) under the Watchdog."""
    if flag(cmd, "model-control-mode") != "explicit":
        raise SystemExit("supervise: the watchdog reloads models through explicit model control; "
                         "pass --model-control-mode=explicit --load-model=*")
    repository = Path(flag(cmd, "model-repository") or "/models")
    url = f"127.0.0.1:{flag(cmd, 'grpc-port', '8001')}"
    env = {k: v for k, v in os.environ.items() if k != ADMIN_KEY_ENV}   # no key in the stubs' environment
    process = subprocess.Popen(cmd, env=env)
    watchdog: list[Watchdog] = []

    def forward(signum, _frame):
        process.send_signal(signum)
        for w in watchdog:   # no repairs while the server drains
            threading.Thread(target=w.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    if _wait_ready(process, url):
        watchdog.append(Watchdog(Supervised(process, url, repository), census_s=census_s, probe_s=probe_s,
                                 log=logging.getLogger("hotpath.server.watchdog").info, restart_server=False).start())
    code = process.wait()
    for w in watchdog:
        w.stop()
    if code != 0:
        log.error(f"[supervise] tritonserver exited with {code}; exiting so that the orchestrator restarts the container")
    return exit_code(code)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python3 -m hotpath.server.supervise -- tritonserver ARGS...", file=sys.stderr)
        return 2
    logs.configure()
    return supervise(argv, probe_s=settings.probe_s())


if __name__ == "__main__":
    sys.exit(main())
