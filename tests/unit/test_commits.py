"""scripts/check_commits.py: the commit-message rule .ci/run applies to every commit after the baseline."""

import importlib.util
import subprocess
import sys

import pytest

from hotpath import paths

SCRIPT = paths.ROOT / "scripts" / "check_commits.py"
spec = importlib.util.spec_from_file_location("check_commits", SCRIPT)
check_commits = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_commits)

GOOD = "Keep encoded paths out of the exact cache\n\nA gzip body was stored under its plain key (2 of 2 runs).\n"


def test_a_good_message_passes():
    assert check_commits.problems(GOOD) == []


@pytest.mark.parametrize("message, rule", [
    ("K" + "x" * 72 + "\n\nbody\n", "characters"),
    ("Keep the cache.\n\nbody\n", "period"),
    ("keep the cache\n\nbody\n", "capital"),
    ("Added the cache\n\nbody\n", "imperative"),
    ("Adding the cache\n\nbody\n", "imperative"),
    ("Fixes the cache\n\nbody\n", "imperative"),
    ("Keep the cache\n", "no body"),
    ("Keep the cache\nbody without a blank line\n", "no body"),
    ("Keep the cache\n\n\n", "no body"),
    ("\n\nbody\n", "empty subject"),
])
def test_each_rule_names_its_fault(message, rule):
    assert any(rule in p for p in check_commits.problems(message))


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


def test_the_script_fails_on_a_bad_commit_in_its_range(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "an old, long subject that predates the rule " * 3)
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", GOOD)
    run = lambda rng: subprocess.run([sys.executable, str(SCRIPT), rng], cwd=tmp_path, capture_output=True, text=True)
    assert run("HEAD~1..HEAD").returncode == 0
    _git(tmp_path, "commit", "-q", "--allow-empty", "-m", "Fixed things")
    bad = run("HEAD~2..HEAD")
    assert bad.returncode == 1 and "imperative" in bad.stderr and "no body" in bad.stderr


def test_the_commits_after_the_baseline_follow_the_rule():
    """This repository's own history after the baseline (the check .ci/run makes, here for make test too)."""
    run = subprocess.run([sys.executable, str(SCRIPT)], cwd=paths.ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
