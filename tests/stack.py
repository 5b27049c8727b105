"""The deployment artifacts' services, run on this host as their containers would run them.

Two loaders read what an artifact says each container runs: `compose()` reads docker/compose.yaml and the
Dockerfiles its `build` sections name; `kubernetes(docs)` reads rendered manifests (tests/manifests.py) and
finds each container image's Dockerfile through the compose file's `image` + `build` pairs. For every
container they give:

- argv: the image's ENTRYPOINT (JSON form, parsed from its Dockerfile) followed by compose's `command` or the
  image's CMD; in Kubernetes `command` replaces the ENTRYPOINT and `args` the CMD (a `command` without `args`
  drops the CMD), as the two orchestrators define it;
- environment: the Dockerfile's ENV, then compose's `environment` / the container's `env` over it;
- mounts: compose `volumes` / Kubernetes `volumeMounts` (container path -> what is mounted there);
- names: which host names resolve to which container (compose service names; Kubernetes Service names, to the
  pod their selector picks, each Service port to its targetPort);
- published: the ports reachable from outside (compose `ports`; Services of type LoadBalancer or NodePort).

`Stack` starts those containers as local processes. What differs from a container runtime, and only this:

1. Addresses: each compose service / Kubernetes pod gets a loopback address of its own (127.0.0.x, given by the
   caller), and every port stays the artifact's own (8000, 8001, 8080, 6379, 9000, 9001, 9080, 9002): distinct
   addresses are what keeps them apart from each other and from other tests' 127.0.0.1 ports. In argv and
   environment values, `NAME:PORT` of a compose service or Kubernetes Service becomes `ADDRESS:TARGETPORT` of
   the container it reaches; `127.0.0.1:PORT` and `localhost:PORT` (a container's, or a pod's, own loopback)
   become its own address; an argument `0.0.0.0` (or `...=0.0.0.0`, `0.0.0.0:PORT`) becomes its own address.
2. Where an image binds every interface without saying so in argv, a listen flag for its own address is
   appended (LISTEN): tritonserver with no address flag (hotpath.server.command's container preset) gets
   `--http-address/--grpc-address/--metrics-address`; docker/gateway/entrypoint.sh's own `--listen 0.0.0.0` is
   followed by `--listen ADDRESS` (its argument order makes a later flag win); the redis image's
   redis-server gets `--bind ADDRESS`.
3. Container paths become local ones (the caller's `paths`: /models, /cache, /etc/hotpath/tenants, /data, or
   per image its `image_paths`; the images' WORKDIR /opt/hotpath, where the Dockerfiles copy the package, is
   this checkout), in argv and environment values and as the working directory (an unmapped WORKDIR: a scratch
   folder). A container path that only an installed script names,
   as the default of a variable (docker/entrypoint.sh's `MODEL_REPOSITORY=${MODEL_REPOSITORY:-/models}`,
   `${HOTPATH_CACHE_DIR:-/cache}`), is given as that variable, set to the local path (script_defaults).
4. Binaries the images have at fixed names are found on a PATH that puts a folder of stand-ins first:
   `python3` runs this interpreter (sys.executable, the image's python3 with its requirements installed);
   every `COPY <repo file> /usr/local/bin/NAME` of a Dockerfile (the entrypoints) is NAME running that file
   with bash; `tritonserver` is the nvidia-pytriton wheel's (hotpath.server.install, as
   tests/integration/test_entrypoint.py runs docker/entrypoint.sh), whose Python backend and stub come from
   appended `--backend-directory` / `--cache-directory` flags (the image's are at tritonserver's default
   paths) and whose libraries from LD_LIBRARY_PATH (server_environment; in that container this interpreter's
   folder comes first on PATH, so that the Python stubs find its packages, as `hotpath serve` does);
   `redis-server` is Debian's (7.0.15,
   the image's version) behind a stand-in for the redis image's docker-entrypoint.sh (EXTERNAL_IMAGES: an
   option as the first argument means `redis-server` options, and `--protected-mode no` is added unless given,
   as that script does; no gosu/chown: nothing runs as root here).
5. The environment a process starts with is the image's and the artifact's only, over a minimal base (PATH as
   above, HOME, LANG): nothing of the test process's own HOTPATH_* settings leaks in.
6. One replica per workload; processes run as the test's user, not uid 10001; no cgroup limits, no shm size;
   a process gets SIGTERM when the test process exits (PR_SET_PDEATHSIG), and `stop()` ends every process
   tree it started (SIGTERM as `docker stop` sends it, then SIGKILL).
   Readiness (the orchestrator's part, not a client's call): a healthcheck's or probe's HTTP URL when it has
   one (the Dockerfile's HEALTHCHECK, a Kubernetes httpGet startup/readiness probe), else a TCP connect to each
   port the image EXPOSEs / the container declares. compose's depends_on order and conditions are kept.

What the caller chooses and must say (tests/integration/test_production_shape.py): the addresses, the local
folders for the mounts (the model repository without text_generation: vLLM's load costs minutes and GBs).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shlex
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import yaml

from hotpath import paths
from hotpath.server.ports import port_is_free
from tests.manifests import COMPOSE, pod_templates, selects

ROOT = paths.ROOT
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
EXPOSED_SERVICE_TYPES = ("LoadBalancer", "NodePort")
PR_SET_PDEATHSIG = 1


# ------------------------------------------------------------------------------------------------ images

@dataclass
class Image:
    """What a Dockerfile's last stage says its container runs."""
    name: str
    dockerfile: Path | None = None
    entrypoint: list[str] = field(default_factory=list)
    cmd: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    expose: list[int] = field(default_factory=list)
    installed: dict[str, Path] = field(default_factory=dict)   # /usr/local/bin/NAME -> the repository file
    healthcheck: list[str] = field(default_factory=list)       # the HEALTHCHECK's CMD argv


# Images built elsewhere (no Dockerfile here): what their published Dockerfile says. redis:7.0.15-bookworm
# (docker-library/redis): ENTRYPOINT ["docker-entrypoint.sh"], CMD ["redis-server"], WORKDIR /data, EXPOSE 6379.
EXTERNAL_IMAGES = {"redis": Image("redis", entrypoint=["docker-entrypoint.sh"], cmd=["redis-server"], workdir="/data",
                                  expose=[6379])}
# The redis image's docker-entrypoint.sh as far as it matters here (no gosu, no chown: nothing runs as root).
REDIS_ENTRYPOINT = """#!/bin/sh
set -e
case "$1" in -*|*.conf) set -- redis-server "$@" ;; esac
if [ "$1" = redis-server ]; then
  case " $* " in *" --protected-mode "*) ;; *) set -- "$@" --protected-mode no ;; esac
fi
exec "$@"
"""


def _logical_lines(text: str) -> list[str]:
    """A Dockerfile's instructions: continuation lines joined, comment lines dropped."""
    out, current = [], ""
    for line in text.splitlines():
        if line.strip().startswith("#") or (not line.strip() and current):
            continue
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ""
    return out


def _exec_form(rest: str, what: str) -> list[str]:
    value = json.loads(rest)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), f"{what}: not the JSON exec form"
    return value


def dockerfile_image(name: str, dockerfile: Path) -> Image:
    """The last stage of `dockerfile`: ENTRYPOINT, CMD (JSON form), ENV, WORKDIR, EXPOSE, HEALTHCHECK, and the
    files COPY puts under /usr/local/bin (from the build context, the repository root)."""
    image = Image(name, dockerfile)
    for line in _logical_lines(dockerfile.read_text()):
        keyword, _, rest = line.partition(" ")
        keyword, rest = keyword.upper(), rest.strip()
        if keyword == "FROM":   # a new stage: what the one before said is not inherited
            image = Image(name, dockerfile)
        elif keyword in ("ENTRYPOINT", "CMD"):
            setattr(image, keyword.lower(), _exec_form(rest, f"{dockerfile} {keyword}"))
            if keyword == "ENTRYPOINT":
                image.cmd = []   # Docker: an ENTRYPOINT resets the CMD of the stage's base
        elif keyword == "ENV":
            words = shlex.split(rest)
            if all("=" in w for w in words):
                image.env.update(w.split("=", 1) for w in words)
            else:   # the legacy `ENV KEY value with spaces`
                image.env[words[0]] = " ".join(words[1:])
        elif keyword == "WORKDIR":
            image.workdir = rest if rest.startswith("/") else f"{image.workdir.rstrip('/')}/{rest}"
        elif keyword == "EXPOSE":
            image.expose += [int(p.split("/")[0]) for p in rest.split()]
        elif keyword == "HEALTHCHECK":
            _, _, command = rest.partition("CMD ")
            image.healthcheck = _exec_form(command.strip(), f"{dockerfile} HEALTHCHECK") if command else []
        elif keyword in ("COPY", "ADD"):
            words = [w for w in shlex.split(rest) if not w.startswith("--")]
            if any(w.startswith("--from") for w in shlex.split(rest)) or len(words) != 2:
                continue
            source, target = words
            if target.startswith("/usr/local/bin/"):
                image.installed[target.rsplit("/", 1)[1]] = ROOT / source
    return image


def script_defaults(image: Image) -> dict[str, str]:
    """`VAR=${VAR:-/a/container/path}` defaults in the scripts an image installs: container paths that its
    argv and environment do not name."""
    out = {}
    for script in image.installed.values():
        for var, default in re.findall(r"\$\{(\w+):-(/[^}]*)\}", script.read_text()):
            out.setdefault(var, default)
    return out


def _image_name(reference: str) -> str:
    """`registry/path/name:tag@digest` -> `name`."""
    reference = reference.split("@")[0]
    last = reference.rsplit("/", 1)[-1]
    return last.split(":")[0]


# ------------------------------------------------------------------------------------------------ deployments

@dataclass
class Container:
    name: str                          # compose: the service; Kubernetes: workload/container
    host: str                          # whose network it shares: the compose service, the Kubernetes pod
    image: Image
    argv: list[str]
    env: dict[str, str]
    mounts: dict[str, str] = field(default_factory=dict)     # container path -> what is mounted there
    ports: list[int] = field(default_factory=list)           # the ports it declares (EXPOSE, containerPort)
    probe_url: str = ""                                      # an HTTP readiness URL as the artifact gives it
    depends_on: dict[str, str] = field(default_factory=dict)  # compose: service -> condition


@dataclass
class Deployment:
    kind: str                                          # compose | kubernetes
    containers: list[Container]
    names: dict[str, tuple[str, dict[int, int]]]       # a host name -> (host, {port: container port})
    published: dict[int, tuple[str, int]]              # port reachable from outside -> (host, container port)

    def container(self, name: str) -> Container:
        (c,) = [c for c in self.containers if c.name == name]
        return c

    def hosts(self) -> list[str]:
        return list(dict.fromkeys(c.host for c in self.containers))


def _words(value) -> list[str]:
    return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]


def _compose_env(value) -> dict[str, str]:
    if isinstance(value, list):
        return dict(item.split("=", 1) if "=" in item else (item, os.environ.get(item, "")) for item in value)
    return {k: "" if v is None else str(v) for k, v in (value or {}).items()}


def _compose_port(spec) -> tuple[int, int]:
    """(published, container port) of a compose `ports` entry, short or long syntax."""
    if isinstance(spec, dict):
        return int(spec["published"]), int(spec["target"])
    parts = str(spec).split("/")[0].split(":")
    assert len(parts) >= 2, f"ports entry {spec!r} publishes a random host port"
    return int(parts[-2]), int(parts[-1])


def _compose_image(service: dict, base: Path) -> Image:
    if "build" in service:
        build = service["build"] if isinstance(service["build"], dict) else {"context": service["build"]}
        dockerfile = (base / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).resolve()
        return dockerfile_image(_image_name(service.get("image", dockerfile.parent.name)), dockerfile)
    return EXTERNAL_IMAGES[_image_name(service["image"])]


def compose_images(path: Path = COMPOSE) -> dict[str, Image]:
    """Image name -> Image, for the images the compose file builds."""
    doc = yaml.safe_load(path.read_text())
    return {_image_name(s["image"]): _compose_image(s, path.parent) for s in doc["services"].values()
            if "build" in s and "image" in s}


def compose(path: Path = COMPOSE) -> Deployment:
    doc = yaml.safe_load(path.read_text())
    containers, published = [], {}
    for name, s in doc["services"].items():
        image = _compose_image(s, path.parent)
        if "entrypoint" in s:   # compose: an entrypoint of the service's own drops the image's CMD
            argv = _words(s["entrypoint"]) + _words(s.get("command", []))
        else:
            argv = image.entrypoint + (_words(s["command"]) if "command" in s else image.cmd)
        mounts = {}
        for v in s.get("volumes", []):
            if isinstance(v, dict):
                mounts[v["target"]] = str(v.get("source", ""))
            else:
                source, target = str(v).split(":")[:2]
                mounts[target] = source
        health = s.get("healthcheck", {}).get("test") or (["CMD", *image.healthcheck] if image.healthcheck else [])
        for spec in s.get("ports", []):
            public, target = _compose_port(spec)
            published[public] = (name, target)
        depends = s.get("depends_on", {})
        depends = {d: "service_started" for d in depends} if isinstance(depends, list) else \
            {d: c.get("condition", "service_started") for d, c in depends.items()}
        containers.append(Container(name, name, image, argv, {**image.env, **_compose_env(s.get("environment"))},
                                    mounts, list(image.expose), _url_in(health), depends))
    names = {c.host: (c.host, {}) for c in containers}   # a service name reaches its container, ports as they are
    return Deployment("compose", containers, names, published)


def _url_in(argv: list[str]) -> str:
    found = re.search(r"https?://[^\s'\"]+", " ".join(argv))
    return found.group(0) if found else ""


def _probe_url(container: dict, ports: dict[str, int]) -> str:
    for key in ("startupProbe", "readinessProbe"):
        get = container.get(key, {}).get("httpGet")
        if get:
            port = ports.get(get["port"], get["port"]) if isinstance(get["port"], str) else get["port"]
            return f"http://127.0.0.1:{port}{get.get('path', '/')}"
    return ""


def kubernetes(docs: list[dict], images: dict[str, Image] | None = None) -> Deployment:
    """The pods of rendered manifests (one replica each) and their Services."""
    images = {**EXTERNAL_IMAGES, **(images if images is not None else compose_images())}
    containers, pods = [], {}
    for where, template in pod_templates(docs):
        host = where.split("/", 1)[1]
        pods[host] = template
        for c in template["spec"]["containers"]:
            image = images[_image_name(c["image"])]
            for key in ("command", "args"):
                assert not any("$(" in a for a in c.get(key, [])), f"{where}/{c['name']}: $(VAR) in {key}"
            if "command" in c:
                argv = list(c["command"]) + list(c.get("args", []))
            else:
                argv = image.entrypoint + (list(c["args"]) if "args" in c else image.cmd)
            env = dict(image.env)
            for e in c.get("env", []):
                assert "value" in e, f"{where}/{c['name']}: env {e['name']} from a source not supported here"
                env[e["name"]] = str(e["value"])
            ports = {p["name"]: p["containerPort"] for p in c.get("ports", []) if "name" in p}
            containers.append(Container(f"{where}/{c['name']}", host, image, argv, env,
                                        {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])},
                                        [p["containerPort"] for p in c.get("ports", [])], _probe_url(c, ports)))
    names, published = {}, {}
    for s in (d for d in docs if d["kind"] == "Service"):
        chosen = [h for h, t in pods.items() if s["spec"].get("selector")
                  and selects(s["spec"]["selector"], t["metadata"].get("labels", {}))]
        assert len(chosen) == 1, f"Service/{s['metadata']['name']} selects {chosen}: one workload expected"
        host = chosen[0]
        named = {p["name"]: p["containerPort"] for c in pods[host]["spec"]["containers"] for p in c.get("ports", [])
                 if "name" in p}
        ports = {}
        for p in s["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            ports[p["port"]] = named[target] if isinstance(target, str) else int(target)
        names[s["metadata"]["name"]] = (host, ports)
        if s["spec"].get("type") in EXPOSED_SERVICE_TYPES:
            published.update({port: (host, target) for port, target in ports.items()})
    return Deployment("kubernetes", containers, names, published)


# ------------------------------------------------------------------------------------------------ running

def _listen_triton(address: str) -> list[str]:
    return [f"--http-address={address}", f"--grpc-address={address}", f"--metrics-address={address}"]


# Images that bind every interface without an argument saying so: the flag that binds their own address
# instead (appended; see the module docstring, 2).
LISTEN: dict[str, Callable[[str], list[str]]] = {
    "hotpath-triton": _listen_triton,
    "hotpath-gateway": lambda address: ["--listen", address],
    "redis": lambda address: ["--bind", address],
}


def _triton_local() -> tuple[list[str], dict[str, str]]:
    """The flags and environment the wheel's tritonserver needs where the image has fixed paths."""
    from hotpath.server.install import TritonInstall, prepare_backend_dir, server_environment

    install = TritonInstall.find()
    backends = prepare_backend_dir(install, paths.work_dir() / "backends")
    env = server_environment(install)
    return ([f"--backend-directory={backends}", f"--cache-directory={install.root / 'caches'}"],
            {"LD_LIBRARY_PATH": env["LD_LIBRARY_PATH"], "TRITONSERVER_BINARY": str(install.binary)})


def _die_with_parent(owner: int):
    def preexec() -> None:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != owner:
            os._exit(1)
    return preexec


@dataclass
class Running:
    container: Container
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log: Path
    process: subprocess.Popen | None = None
    descendants: set[int] = field(default_factory=set)

    def tail(self, n: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


class Stack:
    """A Deployment's containers as local processes (the module docstring lists every substitution).

    addresses: host (compose service, Kubernetes pod) -> its loopback address; paths: container path -> local
    path (mounts and image paths alike; the images' /opt/hotpath is this checkout unless given); image_paths:
    image name -> paths that differ for that image's containers."""

    def __init__(self, deployment: Deployment, addresses: dict[str, str], paths_: dict[str, Path], workdir: Path,
                 image_paths: dict[str, dict[str, Path]] | None = None):
        self.deployment, self.addresses, self.workdir = deployment, addresses, workdir
        self.paths = {"/opt/hotpath": ROOT, **{k: Path(v) for k, v in paths_.items()}}
        self.image_paths = image_paths or {}
        missing = set(deployment.hosts()) - set(addresses)
        assert not missing, f"no address for {sorted(missing)}"
        self.bin = workdir / "bin"
        self.running: dict[str, Running] = {}
        self._triton: tuple[list[str], dict[str, str]] | None = None

    # -- substitutions
    def address(self, host: str) -> str:
        return self.addresses[host]

    def rewrite(self, text: str, container: Container) -> str:
        own = self.address(container.host)
        mapped = {**self.paths, **self.image_paths.get(container.image.name, {})}
        for cpath, local in sorted(mapped.items(), key=lambda kv: -len(kv[0])):
            text = re.sub(rf"(?<![\w./-]){re.escape(cpath)}(?![\w.-])", str(local), text)
        for name, (host, ports) in self.deployment.names.items():
            def to(m: re.Match, host: str = host, ports: dict[int, int] = ports) -> str:
                return f"{self.address(host)}:{ports.get(int(m.group(1)), int(m.group(1)))}"
            text = re.sub(rf"(?<![\w.-]){re.escape(name)}:(\d+)\b", to, text)
        text = re.sub(r"(?<![\w.-])(127\.0\.0\.1|localhost|0\.0\.0\.0):(\d+)\b", rf"{own}:\2", text)
        if text == "0.0.0.0" or text.endswith("=0.0.0.0"):
            text = text[:-len("0.0.0.0")] + own
        return text

    def command(self, container: Container) -> tuple[list[str], dict[str, str], Path]:
        """(argv, environment, working directory) the container's process starts with here."""
        own = self.address(container.host)
        argv = [self.rewrite(a, container) for a in container.argv]
        if container.image.name in LISTEN:
            argv += LISTEN[container.image.name](own)
        env = {"PATH": f"{self.bin}:{BASE_PATH}", "HOME": os.environ.get("HOME", "/tmp"), "LANG": "C.UTF-8"}
        env.update({k: self.rewrite(v, container) for k, v in container.env.items()})
        for var, default in script_defaults(container.image).items():   # module docstring, 3
            if var not in env and self.rewrite(default, container) != default:
                env[var] = self.rewrite(default, container)
        if container.image.name == "hotpath-triton":
            flags, extra = self._triton_flags()
            argv += flags
            env["LD_LIBRARY_PATH"] = extra["LD_LIBRARY_PATH"]
            # Python backend stubs take the environment of the first python3 on PATH: this interpreter's
            # (server_environment), found before the stand-in.
            env["PATH"] = f"{Path(sys.executable).parent}:{self.bin}:{BASE_PATH}"
        cwd = Path(self.rewrite(container.image.workdir, container))
        if str(cwd) == container.image.workdir:   # a folder of the image's own: a scratch one
            cwd = self.workdir / container.name.replace("/", "_")
            cwd.mkdir(parents=True, exist_ok=True)
        return argv, env, cwd

    def _triton_flags(self) -> tuple[list[str], dict[str, str]]:
        if self._triton is None:
            self._triton = _triton_local()
        return self._triton

    def _stand_ins(self) -> None:
        """The folder of fixed-name binaries (module docstring, 4)."""
        self.bin.mkdir(parents=True, exist_ok=True)
        scripts = {"python3": f'#!/bin/sh\nexec "{sys.executable}" "$@"\n',
                   "docker-entrypoint.sh": REDIS_ENTRYPOINT}
        for c in self.deployment.containers:
            for name, source in c.image.installed.items():
                scripts[name] = f'#!/bin/sh\nexec bash "{source}" "$@"\n'
        if any(c.image.name == "hotpath-triton" for c in self.deployment.containers):
            scripts["tritonserver"] = f'#!/bin/sh\nexec "{self._triton_flags()[1]["TRITONSERVER_BINARY"]}" "$@"\n'
        for name, text in scripts.items():
            path = self.bin / name
            path.write_text(text)
            path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)

    # -- start and stop
    def order(self) -> list[Container]:
        """compose's depends_on order; the manifests' order otherwise."""
        done: list[Container] = []
        pending = list(self.deployment.containers)
        while pending:
            ready = [c for c in pending if all(d in {x.host for x in done} for d in c.depends_on)]
            assert ready, f"depends_on cycle among {[c.name for c in pending]}"
            done.append(ready[0])
            pending.remove(ready[0])
        return done

    def start(self, timeout_s: float = 300) -> None:
        busy = [f"{self.address(c.host)}:{p} ({c.name})" for c in self.deployment.containers for p in c.ports
                if not port_is_free(p, self.address(c.host))]
        assert not busy, f"in use already (by another process, or on 0.0.0.0): {busy}"
        self._stand_ins()
        deadline = time.monotonic() + timeout_s
        try:
            for c in self.order():
                for dep, condition in c.depends_on.items():
                    if condition == "service_healthy":
                        self.wait_ready(dep, deadline - time.monotonic())
                self._start(c)
            for c in self.deployment.containers:
                self.wait_ready(c.name, deadline - time.monotonic())
        except BaseException:
            self.stop()
            raise

    def _start(self, c: Container) -> None:
        argv, env, cwd = self.command(c)
        log = self.workdir / "logs" / (c.name.replace("/", "_") + ".log")
        log.parent.mkdir(parents=True, exist_ok=True)
        r = Running(c, argv, env, cwd, log)
        with open(log, "wb") as out:
            r.process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent(os.getpid()))
        self.running[c.name] = r

    def _ready(self, c: Container) -> bool:
        own = self.address(c.host)
        if c.probe_url:
            url = self.rewrite(c.probe_url, c)
            try:
                with urllib.request.urlopen(url, timeout=3) as answer:
                    return 200 <= answer.status < 400
            except (urllib.error.URLError, OSError):
                return False
        for port in c.ports:
            try:
                socket.create_connection((own, port), timeout=1).close()
            except OSError:
                return False
        return True

    def wait_ready(self, name: str, timeout_s: float) -> None:
        c = next(c for c in self.deployment.containers if c.name == name or c.host == name)
        r = self.running[c.name]
        deadline = time.monotonic() + max(timeout_s, 1)
        while not self._ready(c):
            if r.process.poll() is not None:
                raise AssertionError(f"{c.name} exited with {r.process.returncode}: {r.argv}\n{r.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{c.name} not ready after {timeout_s:.0f}s: {r.argv}\n{r.tail()}")
            time.sleep(0.25)
            self._note_descendants(r)
        self._note_descendants(r)

    def _note_descendants(self, r: Running) -> None:
        with contextlib.suppress(psutil.NoSuchProcess):
            r.descendants |= {p.pid for p in psutil.Process(r.process.pid).children(recursive=True)}

    def stop_container(self, name: str) -> None:
        self._stop([self.running[name]])

    def start_container(self, name: str, timeout_s: float = 120) -> None:
        """One container started again with the same command (what a restart policy does)."""
        self._start(self.deployment.container(name))
        self.wait_ready(name, timeout_s)

    def stop(self, grace_s: float = 20) -> None:
        """SIGTERM to each main process (as `docker stop` / the kubelet send it), reverse start order; then
        SIGKILL to whatever of it, or of its process tree, is left."""
        self._stop(list(self.running.values()), grace_s)

    def _stop(self, running: list[Running], grace_s: float = 20) -> None:
        for r in reversed(running):
            if r.process.poll() is None:
                self._note_descendants(r)
                with contextlib.suppress(ProcessLookupError):
                    r.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for r in reversed(running):
            try:
                r.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(r.process.pid, signal.SIGKILL)
                r.process.wait()
            for pid in r.descendants:
                with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                    p = psutil.Process(pid)
                    if p.status() != psutil.STATUS_ZOMBIE:
                        p.kill()

    def __enter__(self) -> Stack:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what the tests read
    def published(self) -> dict[int, tuple[str, int]]:
        """Public port -> (address, port) where it is served here."""
        return {port: (self.address(host), target) for port, (host, target) in self.deployment.published.items()}

    def url(self, public_port: int) -> str:
        address, port = self.published()[public_port]
        return f"{address}:{port}"

    def process(self, name: str) -> subprocess.Popen:
        return self.running[name].process

    def listening(self) -> dict[str, set[tuple[str, int]]]:
        """Each container's listening TCP sockets (its whole process tree)."""
        out: dict[str, set[tuple[str, int]]] = {}
        for name, r in self.running.items():
            found = set()
            with contextlib.suppress(psutil.NoSuchProcess):
                root = psutil.Process(r.process.pid)
                for p in [root, *root.children(recursive=True)]:
                    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                        found |= {(s.laddr.ip, s.laddr.port) for s in p.net_connections("tcp")
                                  if s.status == psutil.CONN_LISTEN}
            out[name] = found
        return out
