"""The admin key that unlocks Triton's restricted APIs, and the server flags that demand it.

Restricted by default on every hotpath server (local and container): model repository (load/unload),
shared memory, logging, trace and statistics. Health, metadata, config and inference stay open.
hotpath's own tools send the key as the `admin-key` header.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from hotpath import paths

HEADER = "admin-key"
ENV = "HOTPATH_ADMIN_KEY"
FILE_ENV = "HOTPATH_ADMIN_KEY_FILE"
RESTRICTED = ("model-repository", "shared-memory", "logging", "trace", "statistics")


def _key_file() -> Path:
    return Path(os.environ.get(FILE_ENV, paths.work_dir() / "admin-key"))


def admin_key() -> str:
    """The key: $HOTPATH_ADMIN_KEY, else the file $HOTPATH_ADMIN_KEY_FILE (default .hotpath/admin-key),
    created with a random key (mode 0600) on first use so that a local server is never left open."""
    if os.environ.get(ENV):
        return os.environ[ENV].strip()
    path = _key_file()
    if path.exists():
        key = path.read_text().strip()
        if key:
            return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_hex(16)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(key + "\n")
    return key


def admin_headers() -> dict[str, str]:
    """Headers for a tritonclient call to a restricted API (load_model, statistics, trace, logging...)."""
    return {HEADER: admin_key()}


def restricted_api_flags(key: str | None = None) -> list[str]:
    """tritonserver flags restricting RESTRICTED on HTTP and gRPC to callers sending the key."""
    spec = f"{','.join(RESTRICTED)}:{HEADER}={key or admin_key()}"
    return [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
