"""Prose that stands alone: no tracked file points outside the repository or at the tracker's issue numbers."""

import re
import subprocess

from hotpath import paths

OUTSIDE = re.compile(r"\.\./shared|/work/shared|RUNTIME_NOTES|ANCHORS\.md")
# "issue 26", "issues 26 and 29", "Issue 28, item 1"; upstream references ("server#8048") name their project.
ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)
SKIP = {"tests/unit/test_prose.py"}


def _tracked_text() -> dict[str, str]:
    names = subprocess.run(["git", "ls-files", "-z"], cwd=paths.ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    out = {}
    for name in filter(None, names):
        path = paths.ROOT / name
        if name in SKIP or not path.is_file():
            continue
        try:
            out[name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue   # binary
    return out


def _offenders(pattern: re.Pattern) -> list[str]:
    return [f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
            for name, text in _tracked_text().items() for m in pattern.finditer(text)]


def test_no_tracked_file_points_outside_the_repository():
    assert _offenders(OUTSIDE) == []


def test_no_tracked_file_cites_an_issue_number():
    assert _offenders(ISSUE) == []


def test_the_patterns_catch_what_they_are_for():
    assert OUTSIDE.search("see ../shared/RUNTIME_NOTES.md") and ISSUE.search("(Issue 28, item 1)")
    assert not ISSUE.search("upstream server#8048") and not ISSUE.search("an issue of scale")
