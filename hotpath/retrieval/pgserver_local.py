"""A real Postgres + pgvector on this machine, from the binaries the `pgserver` wheel ships.

For tests and benchmarks of the pgvector store: no Debian package has pgvector, and no mock stands in.
Postgres refuses to run as root (these machines and CI run as uid 0), so as root the server runs as the
unprivileged user `pgserver`, created if missing, with the same permission fixes `pgserver` itself
makes (`pgserver.utils`: read/traverse bits on the binaries and on the data directory's parents). The
postmaster is our own child in its own process group: `stop` (fast shutdown) and `kill` (a crash:
SIGKILL to the postmaster and its backends at once) go to that PID, never to processes by name.

    with LocalPostgres() as pg:      # a new cluster in a temp dir; pg.remove() deletes it
        store = PgVectorStore(pg.dsn, dim=384)
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
import warnings
from pathlib import Path

from hotpath.errors import ServerError
from hotpath.shutdown import stop_process

SYSTEM_USER = "pgserver"   # the name pgserver itself uses when it finds itself running as root


def _pgserver_utils():
    # Importing pgserver warns about XDG_RUNTIME_DIR (its server class sets up a lock file we do not use).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import pgserver._commands
        import pgserver.utils
    return pgserver._commands, pgserver.utils


def bin_dir() -> Path:
    return _pgserver_utils()[0].POSTGRES_BIN_PATH


def _unprivileged_user(pgdata: Path) -> str | None:
    """As root: the user Postgres runs as, able to read the binaries and own `pgdata`; else None."""
    if os.geteuid() != 0:
        return None
    import stat

    utils = _pgserver_utils()[1]
    entry = utils.ensure_user_exists(SYSTEM_USER)
    utils.ensure_prefix_permissions(bin_dir())
    readable = stat.S_IRGRP | stat.S_IROTH
    utils.ensure_folder_permissions(bin_dir(), readable | stat.S_IXGRP | stat.S_IXOTH)
    utils.ensure_folder_permissions(bin_dir().parent / "lib", readable)
    utils.ensure_folder_permissions(bin_dir().parent / "share", readable)
    utils.ensure_prefix_permissions(pgdata)
    os.chown(pgdata, entry.pw_uid, entry.pw_gid)
    return SYSTEM_USER


class LocalPostgres:
    """One Postgres cluster in `pgdata` (created on first start), listening on 127.0.0.1:`port`.

    Without `pgdata`, a new directory under the system's temp dir, removed by `remove()`. The parents of
    `pgdata` must stay traversable for user pgserver while it runs: not pytest's tmp_path, whose
    pytest-of-root every new pytest session resets to 0700 (a concurrent session would cut the server
    off its own files). `settings`: server parameters (`-c name=value`), e.g. maintenance_work_mem."""

    def __init__(self, pgdata: Path | None = None, port: int | None = None, settings: dict[str, str] | None = None,
                 start_timeout_s: float = 60.0):
        import tempfile

        from hotpath.server.ports import free_ports

        self.owned: Path | None = None
        if pgdata is None:
            self.owned = Path(tempfile.mkdtemp(prefix="hotpath-pg-"))
            self.owned.chmod(0o755)
            pgdata = self.owned / "data"
        self.pgdata = Path(pgdata).resolve()
        self.port = port or free_ports(1)[0]
        self.settings = dict(settings or {})
        self.start_timeout_s = start_timeout_s
        self.process: subprocess.Popen | None = None
        self.log_path = self.pgdata.parent / f"{self.pgdata.name}.log"

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process and self.process.poll() is None else None

    def _run_as(self, user: str | None) -> dict:
        # cwd: the caller's may be a directory the unprivileged user cannot enter (/root on CI).
        return {"user": user, "cwd": self.pgdata, "env": {**os.environ, "LC_ALL": "C"}}

    def _initdb(self, user: str | None) -> None:
        if (self.pgdata / "PG_VERSION").exists():
            return
        done = subprocess.run([str(bin_dir() / "initdb"), "-D", str(self.pgdata), "--auth=trust", "-U", "postgres",
                               "--encoding=UTF8", "--no-locale"], capture_output=True, text=True,
                              **self._run_as(user))
        if done.returncode:
            raise ServerError(f"initdb {self.pgdata} failed: {done.stderr[-2000:]}")

    def start(self) -> LocalPostgres:
        """Start the server (initdb first if `pgdata` is new); returns once it accepts connections."""
        if self.pid:
            return self
        self.pgdata.mkdir(parents=True, exist_ok=True)
        self.pgdata.chmod(0o700)   # Postgres refuses a data directory others can read
        user = _unprivileged_user(self.pgdata)
        self._initdb(user)
        args = [str(bin_dir() / "postgres"), "-D", str(self.pgdata), "-h", "127.0.0.1", "-p", str(self.port),
                "-k", str(self.pgdata)]
        for name, value in self.settings.items():
            args += ["-c", f"{name}={value}"]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                            **self._run_as(user))
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        t0 = time.monotonic()
        while True:
            if self.process.poll() is not None:
                raise ServerError(f"postgres exited with {self.process.returncode}: {self.log_tail()}")
            ready = subprocess.run([str(bin_dir() / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                                   capture_output=True)
            if ready.returncode == 0:
                return
            if time.monotonic() - t0 > self.start_timeout_s:
                self.kill()
                raise ServerError(f"postgres not ready after {self.start_timeout_s:.0f} s: {self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self, chars: int = 2000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:] if self.log_path.exists() else ""

    def stop(self) -> None:
        """Fast shutdown (SIGINT to the postmaster's group: clients disconnected, a checkpoint written)."""
        stop_process(self.process, signal.SIGINT, timeout=30.0, group=True)

    def kill(self) -> None:
        """A crash: SIGKILL to the postmaster and every backend; the next start replays the WAL."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            self._wait_group_gone(self.process.pid)

    @staticmethod
    def _wait_group_gone(pgid: int, timeout_s: float = 30.0) -> None:
        """Until no live process is left in the group: a backend still dying keeps the old shared memory
        attached, and a new postmaster refuses to start beside it ("pre-existing shared memory block")."""
        import psutil

        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            left = []
            for proc in psutil.process_iter():
                try:
                    if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                        left.append(proc.pid)
                except (ProcessLookupError, psutil.Error):
                    continue
            if not left:
                return
            time.sleep(0.05)

    def restart(self) -> LocalPostgres:
        self.stop()
        return self.start()

    def remove(self) -> None:
        """Stop and delete the data directory and its log."""
        self.stop()
        shutil.rmtree(self.pgdata, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)
        if self.owned:
            shutil.rmtree(self.owned, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
