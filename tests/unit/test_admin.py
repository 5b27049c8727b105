"""hotpath.server.admin: where the admin key comes from, the headers tools send, the server flags."""

import os
import re
import stat
import subprocess
import sys
import threading
import traceback

import pytest

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.server import admin


@pytest.fixture
def key_file(tmp_path, monkeypatch):
    """The default key file, in a scratch work dir."""
    monkeypatch.delenv(admin.ENV, raising=False)
    monkeypatch.delenv(admin.FILE_ENV, raising=False)
    monkeypatch.setenv("HOTPATH_WORK_DIR", str(tmp_path / "keys"))
    return tmp_path / "keys" / "admin-key"


def test_a_key_is_generated_once_private_and_reused(key_file):
    key = admin.admin_key()
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert admin.admin_key() == key and key_file.read_text().strip() == key
    assert [p.name for p in key_file.parent.iterdir()] == ["admin-key"]   # no temporary file left


def test_concurrent_first_uses_agree_on_one_key(key_file):
    keys = []
    threads = [threading.Thread(target=lambda: keys.append(admin.admin_key())) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 16 and set(keys) == {key_file.read_text().strip()}


def test_the_environment_wins_over_the_file(key_file, monkeypatch):
    key_file.parent.mkdir()
    key_file.write_text("from-file\n")
    assert admin.admin_key() == "from-file"
    monkeypatch.setenv(admin.ENV, " from-env ")
    assert admin.admin_key() == "from-env"


def test_the_default_file_lives_in_the_work_dir(tmp_path, monkeypatch):
    monkeypatch.delenv(admin.ENV, raising=False)
    monkeypatch.delenv(admin.FILE_ENV, raising=False)
    monkeypatch.setenv("HOTPATH_WORK_DIR", str(tmp_path))
    key = admin.admin_key()
    assert (paths.work_dir() / "admin-key").read_text().strip() == key


def test_a_named_key_file_must_exist(tmp_path, monkeypatch):
    """$HOTPATH_ADMIN_KEY_FILE names a secret: a key made up there would differ from the server's."""
    monkeypatch.delenv(admin.ENV, raising=False)
    named = tmp_path / "secrets" / "admin-key"
    monkeypatch.setenv(admin.FILE_ENV, str(named))
    with pytest.raises(HotpathError, match=f"HOTPATH_ADMIN_KEY_FILE={named}: no such file"):
        admin.admin_key()
    assert not named.parent.exists()
    named.parent.mkdir()
    named.write_text(" m0unted\r\n")
    assert admin.admin_key() == "m0unted"


BAD_KEYS = ["", "two words", "a,b", "k:v", "x=y"]


@pytest.mark.parametrize("bad", BAD_KEYS)
def test_keys_that_would_break_the_server_flag_are_refused(key_file, bad):
    key_file.parent.mkdir()
    key_file.write_text(bad)
    with pytest.raises(HotpathError, match="admin key"):
        admin.admin_key()


def _entrypoint(tmp_path, **env):
    """docker/entrypoint.sh up to its first command: `false` in place of the checker and tritonserver."""
    env = {"PATH": os.environ["PATH"], "PYTHON": "false", "TRITONSERVER": "false",
           "HOTPATH_CACHE_DIR": str(tmp_path / "cache"), **env}
    return subprocess.run(["bash", str(paths.ROOT / "docker" / "entrypoint.sh")], env=env, capture_output=True,
                          text=True, timeout=30)


def test_the_container_entrypoint_checks_keys_like_admin_key(tmp_path):
    script = (paths.ROOT / "docker" / "entrypoint.sh").read_text()
    assert f"ADMIN_KEY_PATTERN='^{admin.KEY_PATTERN}$'" in script
    secret = tmp_path / "admin-key"
    for bad in BAD_KEYS:
        secret.write_text(bad + "\n")
        run = _entrypoint(tmp_path, HOTPATH_ADMIN_KEY_FILE=str(secret))
        assert run.returncode == 2 and f"admin key from {secret} is empty or has characters" in run.stderr, bad
        assert not (tmp_path / "cache").exists(), "it went on after a bad key"
    run = _entrypoint(tmp_path, HOTPATH_ADMIN_KEY="a,b")
    assert run.returncode == 2 and "admin key from $HOTPATH_ADMIN_KEY" in run.stderr and "a,b" not in run.stderr
    run = _entrypoint(tmp_path, HOTPATH_ADMIN_KEY_FILE=str(tmp_path / "missing"))
    assert run.returncode == 2 and "no readable file" in run.stderr
    secret.write_text("\t k3y.from_a-secret \r\n")   # surrounding whitespace goes, as in admin_key()
    run = _entrypoint(tmp_path, HOTPATH_ADMIN_KEY_FILE=str(secret))
    assert run.returncode == 1 and run.stderr == "" and (tmp_path / "cache").is_dir(), run.stderr   # ran `false`


def test_headers_per_protocol_and_perf_analyzer_flags(monkeypatch):
    monkeypatch.setenv(admin.ENV, "k3y")
    # Triton 2.51 prefixes the gRPC metadata key (measured: the bare name is refused over gRPC).
    assert admin.admin_headers() == {"triton-grpc-protocol-admin-key": "k3y"}
    assert admin.admin_headers("http") == {"admin-key": "k3y"}
    assert admin.perf_analyzer_flags() == ["-H", "triton-grpc-protocol-admin-key:k3y"]
    assert admin.perf_analyzer_flags("http") == ["-H", "admin-key:k3y"]


def test_server_flags_restrict_every_admin_api_on_both_protocols(monkeypatch):
    monkeypatch.setenv(admin.ENV, "k3y")
    spec = "model-repository,shared-memory,logging,trace,statistics:admin-key=k3y"
    assert admin.restricted_api_flags() == [f"--http-restricted-api={spec}", f"--grpc-restricted-protocol={spec}"]
    assert admin.restricted_api_flags("other")[0].endswith(":admin-key=other")


def test_perf_analyzer_failures_name_the_command_without_the_admin_key(monkeypatch):
    """subprocess's TimeoutExpired and CalledProcessError print the whole command, `-H name:key` included."""
    from hotpath.sweeps.measure.perf_analyzer import run_perf_analyzer

    monkeypatch.setenv(admin.ENV, "s3cret-k3y")
    flags = admin.perf_analyzer_flags()
    assert admin.redacted(["pa", "-m", "m", *flags]) == "pa -m m -H triton-grpc-protocol-admin-key:REDACTED"
    slow = [sys.executable, "-c", "import time; time.sleep(30)", *flags]   # a real child, its extra args ignored
    failing = [sys.executable, "-c", "raise SystemExit(3)", *admin.perf_analyzer_flags("http")]
    for cmd, kwargs, expected in ((slow, {"timeout_s": 0.5}, "ran past 0.5 s"),
                                  (failing, {"check": True}, "exited with 3")):
        with pytest.raises(HotpathError, match=expected) as err:
            run_perf_analyzer(cmd, **kwargs)
        text = "".join(traceback.format_exception(err.value))
        assert "s3cret-k3y" not in text and "admin-key:REDACTED" in text, text
