"""docker/: hadolint on the Dockerfile, shellcheck on every shell script, the image's Python closure."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hotpath import paths

BIN = Path(sys.executable).parent
DOCKERFILE = paths.ROOT / "docker" / "Dockerfile"


def _shell_scripts() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files"], cwd=paths.ROOT, capture_output=True, text=True).stdout.split()
    scripts = []
    for name in tracked:
        path = paths.ROOT / name
        if path.is_file() and (name.endswith(".sh") or path.read_bytes()[:40].startswith(b"#!/usr/bin/env bash")):
            scripts.append(path)
    return scripts


def test_dockerfile_passes_hadolint():
    run = subprocess.run([str(BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_shell_scripts_pass_shellcheck():
    scripts = _shell_scripts()
    assert paths.ROOT / "docker" / "entrypoint.sh" in scripts and paths.ROOT / "scripts" / "setup.sh" in scripts
    run = subprocess.run([str(BIN / "shellcheck"), *map(str, scripts)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_compose_file_is_valid_yaml():
    run = subprocess.run([str(BIN / "yamllint"), "-d", "relaxed", str(paths.ROOT / "docker" / "compose.yaml")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_image_copies_only_the_runtime_and_the_checker_and_they_import_alone(tmp_path):
    """Copy what the Dockerfile copies of hotpath/ and import it without the rest of hotpath."""
    copies = re.findall(r"^COPY (hotpath\S*(?: hotpath\S*)*) (\S+)$", DOCKERFILE.read_text(), re.M)
    sources = [src for group, _ in copies for src in group.split()]
    assert sorted(sources) == ["hotpath/__init__.py", "hotpath/config.py", "hotpath/errors.py", "hotpath/health",
                               "hotpath/paths.py", "hotpath/preflight.py", "hotpath/runtime",
                               "hotpath/server/__init__.py", "hotpath/server/admin.py",
                               "hotpath/server/model_control.py", "hotpath/server/stubs.py",
                               "hotpath/server/supervise.py", "hotpath/server/watchdog.py", "hotpath/spec.py",
                               "hotpath/tensorrt"]
    for src in sources:
        dest = tmp_path / src
        if (paths.ROOT / src).is_dir():
            shutil.copytree(paths.ROOT / src, dest, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(paths.ROOT / src, dest)
    modules = ["hotpath.tensorrt.startup", "hotpath.preflight", "hotpath.health.__main__",
               "hotpath.server.supervise"] + [
        f"hotpath.runtime.{p.stem}" for p in (tmp_path / "hotpath" / "runtime").glob("*.py") if p.stem != "__init__"]
    # PYTHONPATH comes before the editable install, so the copied tree is the hotpath imported.
    probe = ("import importlib, sys; [importlib.import_module(m) for m in sys.argv[1:]]; "
             "import hotpath; print(hotpath.__file__)")
    run = subprocess.run([sys.executable, "-c", probe, *modules], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(tmp_path))



def test_healthcheck_probes_every_endpoint_within_its_timeout():
    """The HEALTHCHECK is the liveness probe (a dead stub keeps /v2/health/ready at 200); its endpoints
    are probed one after another, so their budgets must fit Docker's timeout."""
    from hotpath.health.probe import endpoints, read_configs

    text = DOCKERFILE.read_text()
    (options, command), = re.findall(r"^HEALTHCHECK (.*?)\s*\\?\n\s*CMD (\[.*\])$", text, re.M)
    argv = json.loads(command)
    assert argv[:3] == ["python3", "-m", "hotpath.health"] and "--liveness" in argv
    budget = float(argv[argv.index("--timeout") + 1])
    docker_timeout = float(re.search(r"--timeout=(\d+)s", options).group(1))
    assert docker_timeout >= len(endpoints(read_configs(paths.model_repository()))) * budget
