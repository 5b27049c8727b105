"""docker/gateway/: the tenant gateway's image, checked without a Docker engine. hadolint and shellcheck; the
contract it keeps (entrypoint, ports, health check, user); its Debian packages pinned to bookworm's versions
and resolvable there; its Python requirements, the whole closure pinned, resolved for the image's CPython 3.11;
and the image's tree (what its COPY lines put where, the model repository stripped as its first stage strips
it) running the gateway through the entrypoint with only those requirements installed, as the image's user."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from hotpath import paths, settings
from hotpath.gateway.tenants import new_token
from hotpath.server.ports import free_ports
from hotpath.shared_state.server import LocalRedis

BIN = Path(sys.executable).parent
HERE = paths.ROOT / "docker" / "gateway"
DOCKERFILE = HERE / "Dockerfile"
ENTRYPOINT = HERE / "entrypoint.sh"
REQUIREMENTS = HERE / "requirements.txt"
IMAGE_USER = 10001
# python:3.11.7-slim-bookworm: CPython 3.11 on Debian 12 (glibc 2.36), x86_64.
IMAGE_PYTHON = ["--python-version", "3.11", "--implementation", "cp", "--abi", "cp311", "--abi", "abi3", "--abi", "none",
                *[a for m in range(36, 16, -1) for a in ("--platform", f"manylinux_2_{m}_x86_64")],
                "--platform", "manylinux2014_x86_64"]


def _logical_lines(text: str) -> list[str]:
    """The Dockerfile's instructions, one line each (continuations joined, comments dropped)."""
    lines, pending = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1].strip() + " "
        else:
            lines.append(pending + line)
            pending = ""
    return lines


def _instructions(name: str) -> list[str]:
    return [line.split(None, 1)[1] for line in _logical_lines(DOCKERFILE.read_text()) if line.split()[0] == name]


def _pins() -> dict[str, str]:
    pins = [line.split("#")[0].strip() for line in REQUIREMENTS.read_text().splitlines()]
    pins = [p for p in pins if p]
    assert all(re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[a-z,]+\])?==[^=\s]+", p) for p in pins), pins
    return {re.sub(r"\[.*\]", "", p.split("==")[0]).lower().replace("_", "-"): p.split("==")[1] for p in pins}


def test_gateway_dockerfile_passes_hadolint_and_entrypoint_shellcheck():
    run = subprocess.run([str(BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    run = subprocess.run([str(BIN / "shellcheck"), str(ENTRYPOINT)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert os.access(ENTRYPOINT, os.X_OK)


def test_the_image_keeps_the_gateway_contract():
    """Non-root; the entrypoint installed under the name ENTRYPOINT runs; the upstreams as CMD; the default ports
    (hotpath.settings) exposed; HEALTHCHECK on the status port's /health; the repository and tenants paths."""
    assert _instructions("USER") == [str(IMAGE_USER)]
    assert f"useradd --uid {IMAGE_USER}" in _instructions("RUN")[-1]
    assert json.loads(_instructions("ENTRYPOINT")[0]) == ["hotpath-gateway-entrypoint"]
    assert "COPY docker/gateway/entrypoint.sh /usr/local/bin/hotpath-gateway-entrypoint" in \
        [f"COPY {c}" for c in _instructions("COPY")]
    assert json.loads(_instructions("CMD")[0]) == ["--grpc-upstream", "triton:8001", "--http-upstream", "triton:8000",
                                                  "--openai-upstream", "openai:8080"]
    ports = [settings.gateway_http_port.default, settings.gateway_grpc_port.default,
             settings.gateway_openai_port.default, settings.gateway_status_port.default]
    assert _instructions("EXPOSE") == [" ".join(map(str, ports))]
    health, = _instructions("HEALTHCHECK")
    assert f"http://127.0.0.1:{settings.gateway_status_port.default}/health" in health
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(_instructions("ENV"))))
    assert env["HOTPATH_MODEL_REPOSITORY"] == "/models" and env["PYTHONPATH"] == "/opt/hotpath"
    script = ENTRYPOINT.read_text()
    assert f'TENANTS_FILE=${{HOTPATH_TENANTS_FILE:-{env["HOTPATH_TENANTS_FILE"]}}}' in script
    # exec: the gateway itself is the container's process, so SIGHUP and SIGTERM reach it
    assert re.search(r'^exec python3 -m hotpath\.gateway serve --listen 0\.0\.0\.0 --tenants "\$TENANTS_FILE" "\$@"$',
                     script, re.M)
    assert all(line.startswith("python:3.11.7-slim-bookworm") for line in _instructions("FROM"))


# --- Debian packages ------------------------------------------------------------------------------------------

def _apt_pins() -> dict[str, str]:
    install = next(r for r in _instructions("RUN") if "apt-get install" in r)
    return dict(re.findall(r"\b([a-z0-9][a-z0-9.+-]+)=(\S+)", install.split("apt-get install", 1)[1]))


def _is_bookworm() -> bool:
    try:
        return "VERSION_CODENAME=bookworm" in Path("/etc/os-release").read_text().split()
    except OSError:
        return False


def test_the_images_debian_packages_are_setup_shs_and_pinned():
    """The image installs the NGINX and Lua packages scripts/setup.sh installs on the hosts the tests run on."""
    setup = re.search(r"^APT_PACKAGES=\(([^)]*)\)", (paths.ROOT / "scripts" / "setup.sh").read_text(), re.M).group(1)
    wanted = [p for p in setup.split() if "nginx" in p or p.startswith("lua-")]
    assert sorted(_apt_pins()) == sorted(wanted), (_apt_pins(), wanted)


@pytest.mark.skipif(not _is_bookworm() or not shutil.which("apt-cache"), reason="apt's bookworm lists are needed")
def test_the_apt_pins_are_bookworms_candidates_and_resolve(tmp_path):
    """Each pin is the version apt installs on bookworm now, as this host's apt lists say (each suite of the archive
    keeps only its current version: when Debian ships a fix, this fails after `apt-get update` until the pin
    follows, as `docker build` would), and the pinned set resolves on a bookworm system with nothing installed:
    apt's simulation installs exactly those versions."""
    pins = _apt_pins()
    policy = subprocess.run(["apt-cache", "policy", *pins], capture_output=True, text=True, check=True).stdout
    candidates = dict(re.findall(r"^(\S+):\n\s+Installed: .*\n\s+Candidate: (\S+)", policy, re.M))
    assert candidates == pins
    status = tmp_path / "status"
    status.write_text("")
    run = subprocess.run(["apt-get", "-s", "-o", f"Dir::State::status={status}", "install", "--no-install-recommends",
                          *[f"{name}={version}" for name, version in pins.items()]], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr
    installed = dict(re.findall(r"^Inst (\S+) \((\S+) ", run.stdout, re.M))
    assert {name: installed.get(name) for name in pins} == pins
    assert "libnginx-mod-http-ndk" in installed and installed["nginx-extras"] == pins["nginx"]


# --- Python: the requirements and the image's tree -------------------------------------------------------------

@pytest.fixture(scope="module")
def image_root():
    """A folder standing for the image's /, readable by the image's user (pytest's tmp_path is root's alone)."""
    root = Path(tempfile.mkdtemp(prefix="hotpath-gateway-image-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def site_packages(image_root):
    """docker/gateway/requirements.txt installed as the image's `pip install` does, for its CPython 3.11 on x86_64
    (binary wheels only), with pip's report of what it resolved."""
    target = image_root / "site-packages"
    report = image_root / "pip-report.json"
    run = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--ignore-installed", "--only-binary=:all:",
                          *IMAGE_PYTHON, "--target", str(target), "--report", str(report), "-r", str(REQUIREMENTS)],
                         capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    return target, json.loads(report.read_text())


def test_the_requirements_resolve_for_the_images_python_and_are_pinned_whole(site_packages):
    """Exact pins, the whole closure: pip installs for CPython 3.11 exactly the pinned set, and each is the dev venv's
    version (the one the tests run)."""
    from importlib.metadata import version

    pins = _pins()
    installed = {i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
                 for i in site_packages[1]["install"]}
    assert installed == pins
    assert {name: version(name) for name in pins} == pins


BIG_FILE_BYTES = 1 << 20


def _copy(src: str, dst: str) -> None:
    """shutil.copy2, except that a file over BIG_FILE_BYTES (weights: the built repository holds ~900 MB) becomes an
    empty file of the same name: nothing here reads their bytes, and the image's stage drops them by name."""
    if os.path.getsize(src) > BIG_FILE_BYTES:
        Path(dst).touch()
        shutil.copymode(src, dst)
    else:
        shutil.copy2(src, dst)


def _image_tree(root: Path) -> tuple[dict[str, str], Path]:
    """The Dockerfile's COPY lines played under `root` (the image's /) from the checkout, its `configs` stage's
    RUN included (the model repository without weights); the image's ENV with its paths under `root`, and its
    WORKDIR there (the folder `python3 -m` runs in: the first on sys.path)."""
    stages: dict[str, Path] = {}
    stage, workdir = root, Path("/")
    for line in _logical_lines(DOCKERFILE.read_text()):
        word, _, rest = line.partition(" ")
        if word == "FROM":
            name = rest.split(" AS ")[1].strip() if " AS " in rest else ""
            stage = stages.setdefault(name, root / "stages" / name) if name else root
            workdir = Path("/")
        elif word == "WORKDIR":
            workdir = workdir / rest
        elif word == "COPY":
            args = rest.split()
            source_root = stages[args.pop(0).removeprefix("--from=")] if args[0].startswith("--from=") else paths.ROOT
            *sources, dest = args
            dest_path = stage / (workdir / dest).relative_to("/")
            for src in sources:
                from_path = source_root / src.lstrip("/")
                into = dest_path / from_path.name if dest.endswith("/") else dest_path
                into.parent.mkdir(parents=True, exist_ok=True)
                if from_path.is_dir():
                    shutil.copytree(from_path, into, copy_function=_copy, dirs_exist_ok=True,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                else:
                    _copy(from_path, into)
        elif word == "RUN" and stage is not root:   # a build stage's RUN, on its own paths
            assert rest.startswith("find /models "), rest
            subprocess.run(["bash", "-c", rest.replace("/models", str(stage / "models"))], check=True)
    env = dict(re.findall(r"(\w+)=(\S+)", " ".join(_instructions("ENV"))))
    return {k: str(root / v.lstrip("/")) if v.startswith("/") else v for k, v in env.items()}, \
        root / workdir.relative_to("/")


@pytest.fixture(scope="module")
def image_tree(image_root, built_repository):
    """The image's tree under image_root (after `make engines`: the repository's configs); its ENV and WORKDIR."""
    return _image_tree(image_root)


def test_the_image_strips_the_repository_to_configs(image_tree, built_repository):
    """/models holds every model's config.pbtxt and build stamp and its version folders (the OpenAI catalog looks
    for them), no weight, engine or code."""
    models = Path(image_tree[0]["HOTPATH_MODEL_REPOSITORY"])
    assert {p.name for p in models.rglob("*") if p.is_file()} == {"config.pbtxt", ".hotpath-build.json"}
    built = sorted(p.relative_to(built_repository) for p in built_repository.glob("*/*")
                   if p.name == "config.pbtxt" or p.name.isdigit())
    assert built and set(built) <= {p.relative_to(models) for p in models.glob("*/*")}


def _python_for_the_image(root: Path) -> Path:
    """`python3` on the image's PATH: this host's CPython 3.11 (Debian's), without its site-packages (-S: only what
    requirements.txt installed is importable, as in the image)."""
    python = next((p for p in ("/usr/local/bin/python3.11", "/usr/bin/python3.11") if os.access(p, os.X_OK)), None)
    if python is None:
        pytest.skip("no system CPython 3.11 to stand in for the image's")
    bin_dir = root / "hostbin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "python3"
    wrapper.write_text(f'#!/bin/sh\nexec {python} -S "$@"\n')
    wrapper.chmod(0o755)
    return bin_dir


def _as_image_user() -> list[str]:
    """Run as the image's uid when these tests run as root; else as the caller (also not root)."""
    if os.geteuid() != 0:
        return []
    return ["setpriv", f"--reuid={IMAGE_USER}", f"--regid={IMAGE_USER}", "--clear-groups"]


def _wait_for(process: subprocess.Popen, url: str, timeout_s: float) -> bytes:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.read()
        except OSError:
            if process.poll() is not None:
                break
            time.sleep(0.2)
    out = process.stdout.read() if process.poll() is not None else "(still running)"
    raise AssertionError(f"{url} never answered (exit {process.poll()}):\n{out[-4000:]}")


@pytest.mark.timeout(600)
def test_the_image_tree_runs_the_gateway_as_its_user(image_root, image_tree, site_packages):
    """The entrypoint as the image installs it, `python3` seeing only the image's tree and requirements, NGINX and
    the Python side as uid 10001, the fleet's Redis from HOTPATH_REDIS_URL: the gateway starts, /health says Redis
    is up, SIGTERM stops it with nothing left behind. A missing or unreadable tenants file exits 2 first."""
    env, workdir = image_tree
    tenants = Path(env["HOTPATH_TENANTS_FILE"])
    tenants.parent.mkdir(parents=True, exist_ok=True)
    for folder in (image_root / "etc", image_root / "etc" / "hotpath", tenants.parent):
        folder.chmod(0o755)
    entrypoint = image_root / "usr" / "local" / "bin" / "hotpath-gateway-entrypoint"
    assert entrypoint.read_bytes() == ENTRYPOINT.read_bytes()
    entrypoint.chmod(0o755)   # the Dockerfile's chmod
    bin_dir = _python_for_the_image(image_root)
    ports = dict(zip(("HTTP", "GRPC", "OPENAI", "STATUS"), free_ports(4)))
    base_env = {"PATH": f"{image_root / 'usr/local/bin'}:{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/tmp",
                **env, "PYTHONPATH": f"{env['PYTHONPATH']}:{site_packages[0]}",
                **{f"HOTPATH_GATEWAY_{k}_PORT": str(v) for k, v in ports.items()}}
    argv = [*_as_image_user(), str(entrypoint), "--listen", "127.0.0.1", "--grpc-upstream", "127.0.0.1:1",
            "--http-upstream", "127.0.0.1:1", "--openai-upstream", "127.0.0.1:1"]

    missing = subprocess.run(argv, env=base_env, cwd=workdir, capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and f"no readable tenants file at {tenants}" in missing.stderr, missing.stderr
    tenants.write_text(f'[tenants.acme]\ntoken = "{new_token()}"\n')
    tenants.chmod(0o400)   # a Secret's file, the user's alone
    if os.geteuid() == 0:
        os.chown(tenants, IMAGE_USER, IMAGE_USER)
        tenants.chmod(0)
        unreadable = subprocess.run(argv, env=base_env, cwd=workdir, capture_output=True, text=True, timeout=60)
        assert unreadable.returncode == 2 and "no readable tenants file" in unreadable.stderr
        tenants.chmod(0o400)

    with LocalRedis() as redis:
        process = subprocess.Popen(argv, env={**base_env, "HOTPATH_REDIS_URL": redis.target.url}, cwd=workdir,
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            health = json.loads(_wait_for(process, f"http://127.0.0.1:{ports['STATUS']}/health", 120))
            assert health == {"status": "ok", "redis": "up"}
            gateway = psutil.Process(process.pid)   # exec: bash became the gateway
            assert "hotpath.gateway" in gateway.cmdline() and Path(gateway.cwd()) == workdir
            assert gateway.uids().real == (IMAGE_USER if _as_image_user() else os.geteuid())
            children = gateway.children(recursive=True)
            assert any(p.name() == "nginx" for p in children)
            assert all(p.uids().real == gateway.uids().real for p in children)
            process.send_signal(signal.SIGTERM)
            assert process.wait(timeout=60) == 0, process.stdout.read()[-4000:]
            _, alive = psutil.wait_procs(children, timeout=10)
            assert not alive, alive
            out = process.stdout.read()
            assert f"shared in {redis.target.url}" in out and "Traceback" not in out, out[-4000:]
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
