"""Check commit messages: a subject of at most 72 characters in the imperative, a blank line, then a body.

    python3 scripts/check_commits.py [REVISION_RANGE]

The range defaults to every commit after BASELINE, the last commit written before the rule (history before
it stays as it is); merge commits are skipped. Exits 1 naming each commit that breaks a rule. .ci/run calls
it before the tests. Standard library only: it runs before anything is installed.
"""

from __future__ import annotations

import re
import subprocess
import sys

BASELINE = "a55c96deb1a1eb280ac950f8af2a41b21541f649"
MAX_SUBJECT = 72
# A subject in the imperative starts with a verb's base form: "Add", "Keep", not "Added", "Adding", "Adds".
NOT_IMPERATIVE = re.compile(r"^(\w+(ed|ing)|Adds|Fixes|Makes|Uses|Moves|Removes|Updates|Changes|Keeps|Puts|"
                            r"Gives|Runs|Tests|Checks|Sets|Lets|Reads|Writes|Counts|Refuses|Answers)\b")


def problems(message: str) -> list[str]:
    """What is wrong with one commit message (empty when nothing is)."""
    lines = message.rstrip("\n").split("\n")
    subject = lines[0]
    out = []
    if not subject.strip():
        return ["empty subject"]
    if len(subject) > MAX_SUBJECT:
        out.append(f"subject is {len(subject)} characters (at most {MAX_SUBJECT})")
    if subject.endswith("."):
        out.append("subject ends with a period")
    if not subject[0].isupper():
        out.append("subject does not start with a capital letter")
    if NOT_IMPERATIVE.match(subject):
        out.append(f"subject is not in the imperative ({subject.split()[0]!r}: write the verb's base form)")
    if len(lines) < 3 or lines[1].strip() or not any(line.strip() for line in lines[2:]):
        out.append("no body after a blank line (the reasons and the figures)")
    return out


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], check=True, capture_output=True, text=True).stdout


def commits(revision_range: str) -> list[tuple[str, str]]:
    """(sha, message) of the non-merge commits in the range, oldest first."""
    out = _git("log", "--no-merges", "--reverse", "--format=%H%x00%B%x1e", revision_range)
    return [tuple(entry.strip("\n").split("\0", 1)) for entry in out.split("\x1e") if entry.strip()]


def default_range() -> str:
    try:
        _git("cat-file", "-e", f"{BASELINE}^{{commit}}")
    except subprocess.CalledProcessError:   # a shallow clone without the baseline: what it holds
        return "HEAD"
    return f"{BASELINE}..HEAD"


def main(argv: list[str]) -> int:
    revision_range = argv[0] if argv else default_range()
    bad = 0
    checked = commits(revision_range)
    for sha, message in checked:
        for problem in problems(message):
            bad += 1
            print(f"{sha[:12]} {message.splitlines()[0][:80]!r}: {problem}", file=sys.stderr)
    print(f"check_commits: {len(checked)} commit(s) in {revision_range}, {bad} problem(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
