"""ruff over the whole tree with the project's configuration (pyproject.toml [tool.ruff])."""

import subprocess
import sys
from pathlib import Path

from hotpath import paths


def test_ruff_passes():
    ruff = Path(sys.executable).parent / "ruff"
    run = subprocess.run([str(ruff), "check", "--no-cache", "hotpath", "tests", "perf", "scripts", "python_backends"],
                         cwd=paths.ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr
