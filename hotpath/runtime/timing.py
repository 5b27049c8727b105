"""Optional per-execute() timestamps from inside a Python-backend stub, for `hotpath perf --explain`.

Triton's trace gives COMPUTE_INPUT_END and COMPUTE_OUTPUT_START for a Python model, which include
the hand-over of tensors to and from the stub process. Recording when `execute()` itself starts
and ends (on CLOCK_MONOTONIC, the clock of Triton's trace timestamps) splits that span into
transfer-in, the model's own work and transfer-out.

Off unless the server's environment sets HOTPATH_STUB_TIMING_DIR; when off, `ExecuteLog.open`
returns None and a model pays one `is None` check per execute().
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

from hotpath.runtime import settings

ENV = settings.stub_timing_dir.name
now_ns = time.monotonic_ns  # same clock as Triton's trace timestamps (steady_clock)


class ExecuteLog:
    """Appends `start_ns end_ns n_requests` per execute() to <dir>/<model>.<instance>.<pid>.log."""

    def __init__(self, path: Path):
        # Line-buffered so a killed stub loses at most one line; a write costs a few microseconds.
        self._file = open(path, "a", buffering=1)

    @classmethod
    def open(cls, args: dict) -> "ExecuteLog | None":
        """The log for this model instance, or None when stub timing is off."""
        directory = settings.stub_timing_dir()
        if not directory:
            return None
        Path(directory).mkdir(parents=True, exist_ok=True)
        name = f"{args['model_name']}.{args.get('model_instance_name', 'instance')}.{os.getpid()}.log"
        return cls(Path(directory) / name)

    def record(self, start_ns: int, n_requests: int) -> None:
        self._file.write(f"{start_ns} {now_ns()} {n_requests}\n")


def read_logs(directory: Path | str) -> dict[str, list[tuple[int, int, int]]]:
    """model name -> [(start_ns, end_ns, n_requests)] from every log in `directory`, sorted by start."""
    out: dict[str, list[tuple[int, int, int]]] = {}
    for path in Path(directory).glob("*.log"):
        model = path.name.split(".", 1)[0]
        rows = out.setdefault(model, [])
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                rows.append((int(parts[0]), int(parts[1]), int(parts[2])))
    for rows in out.values():
        rows.sort()
    return out


def timed(execute):
    """Decorate a TritonPythonModel.execute; logs it when `self.execute_log` (ExecuteLog.open) is set."""
    @functools.wraps(execute)
    def wrapper(self, requests):
        log = getattr(self, "execute_log", None)
        if log is None:
            return execute(self, requests)
        start = now_ns()
        responses = execute(self, requests)
        log.record(start, len(requests))
        return responses
    return wrapper
