"""Docs that stay true: every command in the code blocks of README and docs/ parses (`--help` exits 0, a make
target exists), every relative link there points at something that exists (and, into a markdown file, at one of
its headings)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from hotpath import paths

README = paths.ROOT / "README.md"
DOCS = sorted((paths.ROOT / "docs").glob("*.md"))
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)
SHELL = ("", "bash", "sh", "shell", "console")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
TARGET = re.compile(r"^([A-Za-z0-9_.-]+)\s*:(?!=)", re.M)


def commands(markdown: str) -> list[list[str]]:
    """The argv of each command line in the fenced shell blocks (comments left out)."""
    found = []
    for language, block in FENCE.findall(markdown):
        if language not in SHELL or "import " in block:   # an untagged block of Python is not a command
            continue
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv:
                found.append(argv)
    return found


def help_argv(argv: list[str]) -> list[str] | None:
    """`hotpath SUB ...` -> hotpath SUB --help; `python -m MOD ...` -> python -m MOD --help; else None."""
    for i, word in enumerate(argv):
        name = Path(word).name
        if name == "hotpath":
            return [str(Path(sys.executable).with_name("hotpath")), *argv[i + 1:i + 2], "--help"]
        if name.startswith("python") and argv[i + 1:i + 2] == ["-m"]:
            return [sys.executable, "-m", argv[i + 2], "--help"]
    return None


def make_target(argv: list[str]) -> str | None:
    """`make TARGET [VAR=...]` -> TARGET."""
    if argv[0] != "make":
        return None
    return next((word for word in argv[1:] if "=" not in word and not word.startswith("-")), "")


def relative_links(path: Path) -> list[str]:
    return [link for link in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:", link)]


def anchors(markdown: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken(path: Path, link: str) -> str | None:
    """Why `link` (as written in `path`) points at nothing, or None."""
    where, _, anchor = link.partition("#")
    target = (path.parent / where).resolve() if where else path
    if not target.exists():
        return f"{link}: no {target.relative_to(paths.ROOT) if target.is_relative_to(paths.ROOT) else target}"
    if anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
        return f"{link}: no heading #{anchor} in {target.name}"
    return None


README_COMMANDS = commands(README.read_text())
ALL_COMMANDS = [argv for path in (README, *DOCS) for argv in commands(path.read_text())]


def test_readme_has_the_two_commands():
    targets = {make_target(argv) for argv in README_COMMANDS}
    assert {"serve", "test", "test-fast"} <= targets


@pytest.mark.parametrize("argv", sorted({tuple(a) for a in map(help_argv, ALL_COMMANDS) if a}),
                         ids=lambda argv: " ".join([Path(argv[0]).name, *argv[1:]]))
def test_command_parses(argv):
    done = subprocess.run(list(argv), cwd=paths.ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{' '.join(argv)}: exit {done.returncode}\n{done.stderr[-2000:]}"


def test_make_targets_exist():
    defined = set(TARGET.findall((paths.ROOT / "Makefile").read_text()))
    wanted = {t for t in map(make_target, ALL_COMMANDS) if t is not None}
    assert wanted and wanted - defined == set(), f"not in the Makefile: {wanted - defined}"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_point_at_something(path):
    problems = [why for link in relative_links(path) if (why := broken(path, link))]
    assert not problems, f"{path.relative_to(paths.ROOT)}: " + "; ".join(problems)


def test_the_checks_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n[ok](page.md#a-title) [gone](missing.md) [bad](page.md#nowhere) [web](https://x.y)\n"
                    "```bash\nmake nonexistent-target  # x\n.venv/bin/hotpath no-such-command --flag\n```\n")
    assert relative_links(page) == ["page.md#a-title", "missing.md", "page.md#nowhere"]
    assert [broken(page, link) is None for link in relative_links(page)] == [True, False, False]
    argvs = commands(page.read_text())
    assert make_target(argvs[0]) == "nonexistent-target"
    assert help_argv(argvs[1])[1:] == ["no-such-command", "--help"]
    assert subprocess.run(help_argv(argvs[1]), capture_output=True).returncode != 0
