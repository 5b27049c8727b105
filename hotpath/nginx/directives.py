"""nginx.conf as crossplane directives: the builder, the main context every config shares, gRPC errors."""

from __future__ import annotations

import grp
import os
import pwd
import resource
from pathlib import Path

import crossplane

from hotpath.nginx.access_log import LOG_FIELDS, log_format

TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")   # NGINX's temp dirs, kept in the scratch dir
WORKER_USER = "nobody"   # workers' user when the master runs as root (NGINX's own default, said explicitly)
# Thousands of slow or idle clients held at once (perf/reports/slow_clients.md holds 2,000 on one door) leave
# room for calls; a proxied call takes two (client and upstream). ~0.5 KB each, allocated at start.
WORKER_CONNECTIONS = 16384


def worker_ids() -> tuple[int, int] | None:
    """(uid, gid) the workers run as when the master is root; None when they run as the caller."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam(WORKER_USER)
    return entry.pw_uid, entry.pw_gid


def _user_directive() -> list[dict]:
    ids = worker_ids()
    return [] if ids is None else [d("user", WORKER_USER, grp.getgrgid(ids[1]).gr_name)]


def d(directive: str, *args, block: list | None = None) -> dict:
    """One directive in crossplane's form; arguments become strings."""
    out = {"directive": directive, "args": [str(a) for a in args]}
    if block is not None:
        out["block"] = block
    return out


def render(directives: list[dict]) -> str:
    return crossplane.build(directives) + "\n"


def open_files() -> int:
    """worker_rlimit_nofile: a descriptor per connection and one per body or cache file, within the hard limit
    NGINX inherits (past it setrlimit fails, even as root in a container without CAP_SYS_RESOURCE)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    wanted = 2 * WORKER_CONNECTIONS
    return wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)


def main_context(workdir: Path, http: list[dict], fields: tuple[str, ...] = LOG_FIELDS,
                 modules: tuple[str, ...] = ()) -> list[dict]:
    """nginx.conf around an `http` block's own directives: one worker, files in `workdir`, an access log,
    the dynamic `modules` (paths) loaded first."""
    temp = [d(f"{kind}_temp_path", workdir / "tmp" / kind) for kind in TEMP_KINDS]
    return [
        *[d("load_module", path) for path in modules],
        *_user_directive(),
        d("daemon", "off"),
        d("worker_processes", 1),
        d("pid", workdir / "nginx.pid"),
        d("error_log", workdir / "error.log", "warn"),
        d("worker_rlimit_nofile", open_files()),
        d("events", block=[d("worker_connections", WORKER_CONNECTIONS)]),
        d("http", block=[d("log_format", "hotpath", log_format(fields)),
                          d("access_log", workdir / "access.log", "hotpath"), *temp, *http]),
    ]


def grpc_error(name: str, grpc_status: int, message: str) -> dict:
    """A named location answering a gRPC call with `grpc_status` in a trailers-only response (which a
    gRPC client reads as a status it may retry; a plain HTTP 502 it may not)."""
    return d("location", name, block=[
        d("default_type", "application/grpc"),
        d("add_header", "grpc-status", grpc_status, "always"),
        d("add_header", "grpc-message", message, "always"),
        d("return", 204)])
