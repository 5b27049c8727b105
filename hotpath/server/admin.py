"""The admin key that unlocks Triton's restricted APIs, and the server flags that demand it.

Restricted by default on every hotpath server (local and container): model repository (load/unload),
shared memory, logging, trace and statistics. Health, metadata, config and inference stay open.
hotpath's own tools send the key: HTTP header `admin-key`; over gRPC Triton 2.51 expects the metadata
key `triton-grpc-protocol-admin-key` (it prefixes the configured name). Without it HTTP answers 403,
gRPC answers UNAVAILABLE "This protocol is restricted" (measured on 2.51).
"""

from __future__ import annotations

import os
import re
import secrets
import shlex
import tempfile
from pathlib import Path

from hotpath import paths, settings
from hotpath.errors import HotpathError

HEADER = "admin-key"
GRPC_HEADER = f"triton-grpc-protocol-{HEADER}"
ENV = settings.admin_key.name
FILE_ENV = settings.admin_key_file.name
RESTRICTED = ("model-repository", "shared-memory", "logging", "trace", "statistics")
# tritonserver splits its restricted-API flag at ',', ':' and '='; a header value holds no spaces.
# docker/entrypoint.sh checks the same (a unit test compares them).
KEY_PATTERN = r"[A-Za-z0-9._~+/-]+"


def admin_key() -> str:
    """The key: $HOTPATH_ADMIN_KEY, else the file $HOTPATH_ADMIN_KEY_FILE (it must exist), else
    .hotpath/admin-key, created with a random key (mode 0600) on first use so that a local server is
    never left open."""
    if key := settings.admin_key():
        return _checked(key, f"${ENV}")
    if named := settings.admin_key_file():
        # Named on purpose (a mounted secret): a key made up here would lock out whoever holds the real one.
        path = Path(named)
        if not path.is_file():
            raise HotpathError(f"${FILE_ENV}={path}: no such file; put the admin key there, or unset "
                               f"${FILE_ENV} to use a generated one")
    else:
        path = paths.work_dir() / "admin-key"
        if not path.exists():
            _generate(path)
    return _checked(path.read_text().strip(), str(path))


def _generate(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Written aside, then linked into place: concurrent first uses (a server and a tool) agree on
    # one key and never read a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".admin-key-")  # mode 0600
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16) + "\n")
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        os.unlink(tmp)


def _checked(key: str, source: str) -> str:
    if not re.fullmatch(KEY_PATTERN, key):
        raise HotpathError(f"admin key from {source} is empty or has characters other than letters, digits "
                           "and ._~+/-")
    return key


def admin_headers(protocol: str = "grpc") -> dict[str, str]:
    """`headers=` for a tritonclient call to a restricted API (load_model, statistics, trace, logging...)."""
    return {GRPC_HEADER if protocol == "grpc" else HEADER: admin_key()}


def perf_analyzer_flags(protocol: str = "grpc") -> list[str]:
    """perf_analyzer reads the statistics API: `-H name:value` (perf_analyzer 2.50 sends it over gRPC too)."""
    (name, value), = admin_headers(protocol).items()
    return ["-H", f"{name}:{value}"]


def redacted(cmd: list[str]) -> str:
    """`cmd` as one shell line with the admin key of any `-H name:key` flag (perf_analyzer_flags) hidden."""
    prefixes = (f"{GRPC_HEADER}:", f"{HEADER}:")
    return shlex.join(a.split(":", 1)[0] + ":REDACTED" if a.startswith(prefixes) else a for a in cmd)


def restricted_api_flags(key: str | None = None) -> list[str]:
    """tritonserver flags restricting RESTRICTED on HTTP and gRPC to callers sending the key."""
    spec = f"{','.join(RESTRICTED)}:{HEADER}={key or admin_key()}"
    return [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
