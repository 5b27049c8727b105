"""hotpath.settings: every environment variable the code reads has an accessor there and a row in the table of
docs/configuration.md, and only the files listed below still read one without it."""

import re

import pytest

from hotpath import paths, settings
from hotpath.server import command

# A name where code reads or sets it: a string literal ("HOTPATH_X", f"...HOTPATH_X...") or a shell expansion
# ($HOTPATH_X, ${HOTPATH_X:-...}); a Python identifier such as spec.py's HOTPATH_KEYS is neither.
NAME = re.compile(r"""(?<=["'${])HOTPATH_[A-Z0-9_]*[A-Z0-9]\b""")
SOURCES = ("hotpath", "python_backends", "perf", "docker", "scripts")
# A read of one variable from the environment, whatever its name or however it is spelt (a constant, a
# literal): `environ.get(`, `getenv(`, `environ[...]` not followed by `=`. Copies of the whole environment
# for a child process (`dict(os.environ)`, `{**os.environ}`) and writes (`environ[k] = v`, `setdefault`) are
# not reads of a setting.
DIRECT_READ = re.compile(r"""environ\.get\(|getenv\(|environ\[[^\]]+\](?!\s*=[^=])""")


def _files():
    for top in SOURCES:
        for path in sorted((paths.ROOT / top).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".sh", ".yaml", ".yml", ".toml", "") \
                    and "__pycache__" not in path.parts:
                yield path


def _names_in_code() -> dict[str, str]:
    found = {}
    for path in _files():
        for name in NAME.findall(path.read_text(errors="replace")):
            found.setdefault(name, str(path.relative_to(paths.ROOT)))
    return found


def test_every_variable_the_code_names_has_an_accessor():
    missing = {name: where for name, where in _names_in_code().items() if name not in settings.SETTINGS}
    assert not missing, f"add these to hotpath/settings.py: {missing}"


def test_the_docs_list_every_variable():
    doc = (paths.ROOT / "docs" / "configuration.md").read_text()
    table = doc[doc.index("## Environment variables"):]
    listed = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", table[:table.index("\n\n", table.index("|---"))]))
    assert set(settings.SETTINGS) - listed == set(), "docs/configuration.md's table lacks these"
    assert listed - set(settings.SETTINGS) == set(), "docs/configuration.md lists variables hotpath.settings does not know"


def test_no_file_but_settings_reads_a_variable():
    direct = {str(p.relative_to(paths.ROOT)) for p in _files() if p.suffix == ".py" and p.name != "settings.py"
              and DIRECT_READ.search(p.read_text(errors="replace"))}
    assert direct == set(), "read these through hotpath.settings"
    assert DIRECT_READ.search('os.environ.get("HOTPATH_X")') and not DIRECT_READ.search("env = dict(os.environ)")


def test_an_accessor_reads_the_environment_when_called(monkeypatch):
    monkeypatch.delenv("HOTPATH_CACHE_BYTES", raising=False)
    assert settings.cache_bytes() == command.DEFAULT_CACHE_BYTES == 256 * 1024 * 1024
    monkeypatch.setenv("HOTPATH_CACHE_BYTES", "0")
    assert settings.cache_bytes() == 0 and command.cache_bytes_from_env() == 0
    monkeypatch.setenv("HOTPATH_CACHE_BYTES", " ")
    assert settings.cache_bytes() == settings.cache_bytes.default, "blank is unset"
    assert settings.trace_rate({"HOTPATH_TRACE_RATE": "7"}) == 7, "a mapping instead of os.environ"
    for raw, expected in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("HOTPATH_ALLOW_BUSY", raw)
        assert settings.allow_busy() is expected, raw
    monkeypatch.setenv("HOTPATH_WATCHDOG", "0")
    assert settings.watchdog() is False
    monkeypatch.setenv("HOTPATH_WORK_DIR", "/tmp/elsewhere")
    assert paths.work_dir() == paths.Path("/tmp/elsewhere").resolve()
    monkeypatch.setenv("HOTPATH_EXIT_TIMEOUT_SECS", "soon")
    with pytest.raises(ValueError):
        settings.exit_timeout_s()
