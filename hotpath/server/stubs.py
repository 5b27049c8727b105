"""The Python-backend stub processes under a tritonserver, by model (for the watchdog and soak RSS)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import psutil

STUB_BINARY = "triton_python_backend_stub"


def stub_processes(server_pid: int) -> dict[str, list[psutil.Process]]:
    """Live (non-zombie) stubs under the server, per model name."""
    stubs: dict[str, list[psutil.Process]] = {}
    try:
        children = psutil.Process(server_pid).children()
    except psutil.NoSuchProcess:
        return stubs
    for child in children:
        try:
            cmdline = child.cmdline()  # a killed stub stays a zombie: NoSuchProcess here
            if cmdline and cmdline[0].endswith(STUB_BINARY) and child.status() != psutil.STATUS_ZOMBIE:
                # argv[1] is <repository>/<model>/<version>/model.py
                stubs.setdefault(Path(cmdline[1]).parent.parent.name, []).append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied, IndexError):
            continue
    return stubs


def stub_pids(server_pid: int, model: str) -> list[int]:
    """PIDs of a model's live stubs, newest first (a replaced model's stubs may linger while it unloads)."""
    procs = stub_processes(server_pid).get(model, [])
    return [p.pid for p in sorted(procs, key=lambda p: p.create_time(), reverse=True)]


def stub_census(server_pid: int) -> Counter:
    """Live stubs under the server, counted per model."""
    return Counter({model: len(procs) for model, procs in stub_processes(server_pid).items()})


def rss_mb(server_pid: int) -> dict[str, float]:
    """Resident memory in MB: the server process ("tritonserver") and the sum of each model's stubs."""
    out = {}
    try:
        out["tritonserver"] = psutil.Process(server_pid).memory_info().rss / 2**20
    except psutil.NoSuchProcess:
        return out
    for model, procs in stub_processes(server_pid).items():
        total = 0.0
        for proc in procs:
            try:
                total += proc.memory_info().rss / 2**20
            except psutil.NoSuchProcess:
                continue
        out[model] = total
    return out
