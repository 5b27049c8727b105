"""Is the machine quiet enough to measure? CPU used by other processes over a short window.

Read from /proc (psutil when there is no /proc and it happens to be installed). Our own
process and its descendants (the local tritonserver, its stubs) do not count.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from hotpath import settings
from hotpath.errors import HotpathError

logger = logging.getLogger(__name__)

WINDOW_S = 1.5


@dataclass(frozen=True)
class Sample:
    """One reading of every process: (name, parent pid, CPU seconds used so far) by pid."""

    taken_at: float
    processes: dict[int, tuple[str, int, float]]


@dataclass(frozen=True)
class ProcessCpu:
    pid: int
    name: str
    cores: float  # CPU seconds per wall-clock second over the window

    def __str__(self) -> str:
        return f"pid {self.pid} {self.name} ({self.cores:.2f} cores)"


@dataclass(frozen=True)
class QuietReport:
    window_s: float
    limit_cores: float
    busy: list[ProcessCpu] = field(default_factory=list)  # busiest first
    source: str = "/proc"  # "" when the machine could not be read

    @property
    def other_cores(self) -> float:
        return sum(p.cores for p in self.busy)

    @property
    def quiet(self) -> bool:
        return not self.source or self.other_cores <= self.limit_cores

    def summary(self) -> str:
        if not self.source:
            return "machine load not checked (no /proc, no psutil)"
        top = ", ".join(str(p) for p in self.busy[:3]) or "none"
        return (f"other processes used {self.other_cores:.2f} cores over {self.window_s:g} s (limit "
                f"{self.limit_cores:.2f}); busiest: {top}")


def read_proc(proc: Path = Path("/proc")) -> Sample:
    """Every process's name, parent and user + system CPU seconds, from /proc/<pid>/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    processes = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:  # exited meanwhile
            continue
        # The name sits in parentheses and may itself contain spaces or ')'.
        name = text[text.index("(") + 1:text.rindex(")")]
        rest = text[text.rindex(")") + 2:].split()
        processes[int(entry.name)] = (name, int(rest[1]), (int(rest[11]) + int(rest[12])) / tick)
    return Sample(time.monotonic(), processes)


def read_psutil() -> Sample:
    import psutil

    processes = {}
    for p in psutil.process_iter(["name", "ppid", "cpu_times"]):
        times = p.info["cpu_times"]
        if times is not None:
            processes[p.pid] = (p.info["name"] or "?", p.info["ppid"] or 0, times.user + times.system)
    return Sample(time.monotonic(), processes)


def descendants(sample: Sample, root: int) -> set[int]:
    """`root` and every process below it."""
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _) in sample.processes.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo += children.get(pid, [])
    return found


def busiest(before: Sample, after: Sample, exclude: set[int]) -> list[ProcessCpu]:
    """CPU per process between two samples, busiest first, processes that used none left out.

    A process that started in between spent all of its CPU time inside the window.
    """
    elapsed = max(after.taken_at - before.taken_at, 1e-6)
    rows = []
    for pid, (name, _, seconds) in after.processes.items():
        if pid in exclude:
            continue
        used = seconds - before.processes.get(pid, (name, 0, 0.0))[2]
        if used > 0:
            rows.append(ProcessCpu(pid, name, used / elapsed))
    return sorted(rows, key=lambda p: -p.cores)


def default_limit() -> float:
    """Cores other processes may use: a tenth of the machine, at least 0.2 of a core."""
    limit = settings.quiet_max_cores()
    return limit if limit is not None else max(0.2, 0.1 * (os.cpu_count() or 1))


def _reader():
    if Path("/proc/self/stat").exists():
        return read_proc, "/proc"
    try:
        import psutil  # noqa: F401  (only if already installed)
    except ImportError:
        return None, ""
    return read_psutil, "psutil"


def measure_others(window_s: float = WINDOW_S, limit_cores: float | None = None,
                   exclude_tree_of: int | None = None) -> QuietReport:
    """CPU used by every process outside our own process tree over `window_s` seconds."""
    limit = default_limit() if limit_cores is None else limit_cores
    read, source = _reader()
    if read is None:
        return QuietReport(window_s, limit, source="")
    before = read()
    time.sleep(window_s)
    after = read()
    root = os.getpid() if exclude_tree_of is None else exclude_tree_of
    exclude = descendants(after, root) | descendants(before, root)
    rows = [ProcessCpu(p.pid, command_line(p.pid) or p.name, p.cores) for p in busiest(before, after, exclude)]
    return QuietReport(window_s, limit, rows, source)


def command_line(pid: int, width: int = 60) -> str:
    """A process's command line on one line, its program's directory dropped, cut at `width`."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    argv = [part.decode(errors="replace") for part in raw.split(b"\0") if part]
    text = " ".join(" ".join([Path(argv[0]).name, *argv[1:]]).split()) if argv else ""  # one line
    return text if len(text) <= width else text[:width - 3] + "..."


def allow_busy_default() -> bool:
    return settings.allow_busy()


def require_quiet(allow_busy: bool = False, log=logger.info) -> QuietReport:
    """Refuse to measure on a busy machine, naming the busiest processes, unless `allow_busy`."""
    report = measure_others()
    if report.quiet:
        log(f"[perf] machine quiet: {report.summary()}")
    elif allow_busy:
        log(f"[perf] warning: machine busy, measuring anyway (--allow-busy): {report.summary()}")
    else:
        raise HotpathError(f"machine busy: {report.summary()}. Measure on a quiet machine, or pass --allow-busy "
                           "(HOTPATH_ALLOW_BUSY=1) to go on.")
    return report
