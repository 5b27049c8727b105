"""The production shape: the stack started from what docker/compose.yaml and the rendered
Kubernetes manifests (deploy/overlays/cpu with deploy/redis) name, each container a local process
(tests/stack.py: the loaders, and every substitution a container runtime would not make), then called on the
published ports only.

compose: triton (docker/entrypoint.sh), redis, openai and gateway (docker/gateway/entrypoint.sh), each on its own
loopback address (ADDRESSES), ports as the artifacts give them. The tests connect to the gateway's published
doors alone: (a) a tenant is served on each door and a call without a token refused; (b) the published ports
are the gateway's doors and nothing else, and the published address answers on no internal port; (c) the
malformed-request corpus (tests/malformed.py, judged by tests/integration/test_malformed_corpus.py's Runner,
every case through the gateway), the server alive after each; (d) 1,000 half-sent requests and 1,000 idle
connections held on each door while a normal client's calls succeed (p50/p95 printed), all cut within the
bounds the running gateway's NGINX config sets; a 150,000-deep JSON body to the HTTP door refused 4xx, triton
still ready. Kubernetes: the gateway Deployment, the triton pod's two containers and Redis's StatefulSet, Service
names resolved to the pods their selectors pick; (a), (b) and every tenth corpus case (and those that crash
Triton 2.51) through the gateway.

Substitutions this module chooses (tests/stack.py lists the rest): the model repository is the built one
without text_generation (vLLM's load costs minutes and GBs: tests/integration/conftest.py's
all_but_generation()); tritonserver serves that repository staged as `hotpath serve` stages it
(hotpath.server.staging: the wheel's tritonserver has no onnxruntime backend, the NGC image has; the configs
the other containers read are the repository's own); the tenants file (a bind mount in compose, the Secret
`hotpath-tenants` in Kubernetes) is generated: the corpus's tenant, a normal client, and attacker tenants for the
half-sent requests (each tenant may hold only the gateway's bound of open requests). The two stacks start
separately, one after the other: their triton containers differ in argv and environment (compose's
HOTPATH_ON_INCOMPATIBLE / HOTPATH_EXIT_TIMEOUT_SECS, the manifests' MODEL_REPOSITORY / HOTPATH_CACHE_DIR /
HOTPATH_PERF_PROFILE), so neither can stand in for the other.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import re
import socket
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import crossplane
import grpc
import numpy as np
import psutil
import pytest
import test_malformed_corpus as corpus  # tests/integration, on sys.path as pytest imports this folder

from hotpath import settings
from hotpath.client import connect, text_input
from hotpath.gateway.config import GRPC_INFER
from hotpath.gateway.tenants import new_token
from hotpath.server.staging import stage_repository
from tests import manifests, stack
from tests.slow_clients import HalfSent, hold, raise_open_files

# Each compose service / Kubernetes pod on its own loopback address; ports stay the artifacts' own.
COMPOSE_ADDRESSES = {"triton": "127.0.0.2", "openai": "127.0.0.3", "redis": "127.0.0.4", "gateway": "127.0.0.5"}
K8S_ADDRESSES = {"hotpath": "127.0.0.6", "hotpath-gateway": "127.0.0.7", "hotpath-redis": "127.0.0.8"}
DOORS = {"http": settings.gateway_http_port.default, "grpc": settings.gateway_grpc_port.default,
         "openai": settings.gateway_openai_port.default}   # docs/configuration.md's ports table
MODEL = "text_embedding"
NORMAL = new_token()
HALF_SENT, IDLE = 1000, 1000       # held on each door at once
NORMAL_CALLS = 60                  # per door, without and with them held
MIN_TENANT_BOUND = 64              # hotpath.gateway.client_bounds.tenant_bound: never fewer open requests per tenant
ATTACKERS = [new_token() for _ in range(math.ceil(HALF_SENT * len(DOORS) / MIN_TENANT_BOUND))]
MAX_CLIENT_TIMEOUT_S = 60          # a public listener's header/body/keepalive timeout must not exceed it
DEPTH = 150_000
REPORT_DIR = Path("/tmp")


# ------------------------------------------------------------------------------------------------ the stacks

@dataclass
class Files:
    models: Path       # /models of the openai and gateway containers: the repository's configs and files
    staged: Path       # /models of the triton container: the same, staged for the wheel's tritonserver
    tenants: Path      # the folder mounted at /etc/hotpath/tenants


def _tenants_toml() -> str:
    lines = [f'[tenants.corpus]\ntoken = "{corpus.TOKEN}"\nrequests_per_s = 100000\nburst = 100000\n'
             "tokens_per_min = 100000000\n",
             f'[tenants.normal]\ntoken = "{NORMAL}"\nrequests_per_s = 100000\nburst = 100000\n']
    lines += [f'[tenants.attacker{i}]\ntoken = "{t}"\nrequests_per_s = 100000\nburst = 100000\n'
              for i, t in enumerate(ATTACKERS)]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def files(built_repository, tmp_path_factory) -> Files:
    from conftest import all_but_generation

    root = tmp_path_factory.mktemp("production-shape")
    (root / "models").mkdir()
    models = all_but_generation(built_repository, root / "models")
    stage_repository(models, root / "staged", tuned={})   # the container applies this host's tuned values itself
    tenants = root / "tenants"
    tenants.mkdir()
    (tenants / "tenants.toml").write_text(_tenants_toml())
    (tenants / "tenants.toml").chmod(0o600)
    return Files(models, root / "staged", tenants)


def _start(deployment: stack.Deployment, addresses: dict[str, str], files: Files, workdir: Path) -> stack.Stack:
    for address in set(addresses.values()):   # 127.0.0.0/8 is loopback on Linux: each address binds
        with socket.socket() as s:
            s.bind((address, 0))
    (workdir / "cache").mkdir(parents=True)
    (workdir / "data").mkdir()
    s = stack.Stack(deployment, addresses,
                    {"/models": files.models, "/cache": workdir / "cache", "/data": workdir / "data",
                     "/etc/hotpath/tenants": files.tenants},
                    workdir, image_paths={"hotpath-triton": {"/models": files.staged}})
    t0 = time.monotonic()
    s.start(timeout_s=300)
    print(f"\n[production-shape] {deployment.kind} stack ready in {time.monotonic() - t0:.1f}s")
    return s


@pytest.fixture(scope="class")
def compose_stack(files, tmp_path_factory):
    s = _start(stack.compose(), COMPOSE_ADDRESSES, files, tmp_path_factory.mktemp("compose"))
    yield s
    s.stop()


def kubernetes_docs() -> list[dict]:
    """What a Kubernetes deployment applies (tests/tools/test_public_doors.py): the cpu overlay and Redis."""
    return manifests.kustomize(manifests.DEPLOY / "overlays" / "cpu") + manifests.kustomize(manifests.DEPLOY / "redis")


@pytest.fixture(scope="class")
def k8s_stack(files, tmp_path_factory):
    s = _start(stack.kubernetes(kubernetes_docs()), K8S_ADDRESSES, files, tmp_path_factory.mktemp("kubernetes"))
    yield s
    s.stop()


def _door(s: stack.Stack, door: str) -> tuple[str, int]:
    address, port = s.published()[DOORS[door]]
    return address, port


def _gateway_host(s: stack.Stack) -> str:
    (host,) = {host for host, _ in s.deployment.published.values()}
    return host


def _container(s: stack.Stack, image: str) -> str:
    (name,) = [c.name for c in s.deployment.containers if c.image.name == image]
    return name


# ------------------------------------------------------------------------------------------------ calls

def _post(address: tuple[str, int], path: str, body: bytes, token: str | None, timeout: float = 30) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection(*address, timeout=timeout)
    try:
        headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
        conn.request("POST", path, body, headers)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def _get(address: tuple[str, int], path: str, token: str | None) -> int:
    conn = http.client.HTTPConnection(*address, timeout=10)
    try:
        conn.request("GET", path, headers={"authorization": f"Bearer {token}"} if token else {})
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def _kserve(text: str) -> bytes:
    return json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}]}).encode()


class Caller:
    """A normal client of the published doors: one call embeds a text; raises when it is not served."""

    def __init__(self, s: stack.Stack, token: str | None):
        self.s, self.token = s, token
        address, port = _door(s, "grpc")
        self.grpc = connect(f"{address}:{port}", token)

    def close(self) -> None:
        self.grpc.close()

    def call(self, door: str, text: str) -> np.ndarray:
        if door == "grpc":
            return self.grpc.infer(MODEL, [text_input("TEXT", [text])]).as_numpy("EMBEDDING").reshape(-1)
        if door == "http":
            status, body = _post(_door(self.s, "http"), f"/v2/models/{MODEL}/infer", _kserve(text), self.token)
            assert status == 200, (status, body[:300])
            (out,) = [o for o in json.loads(body)["outputs"] if o["name"] == "EMBEDDING"]
            return np.array(out["data"], dtype=np.float32)
        status, body = _post(_door(self.s, "openai"), "/v1/embeddings",
                             json.dumps({"model": MODEL, "input": text}).encode(), self.token)
        assert status == 200, (status, body[:300])
        return np.array(json.loads(body)["data"][0]["embedding"], dtype=np.float32)


def _assert_doors_published_only(s: stack.Stack) -> None:
    """(b): what the artifact publishes is the gateway's doors; here, the gateway's address answers on them
    and on no internal port, and each internal service listens on its own address alone."""
    published = s.deployment.published
    assert set(published) == set(DOORS.values()), f"published ports {sorted(published)}"
    gateway = _gateway_host(s)
    assert {host for host, _ in published.values()} == {gateway}
    assert all(c.image.name == "hotpath-gateway" for c in s.deployment.containers if c.host == gateway)
    status = settings.gateway_status_port.default
    assert status not in published, "the gateway's status port is for probes and Prometheus only"
    internal = {p for c in s.deployment.containers if c.host != gateway for p in c.ports}
    assert internal >= {8000, 8001, 8080, 6379}, internal
    public_address = s.address(gateway)
    for port in sorted(internal - set(DOORS.values())):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((public_address, port), timeout=2).close()
    for name, sockets in s.listening().items():
        own = s.address(s.deployment.container(name).host)
        addresses = {ip.removeprefix("::ffff:") for ip, _ in sockets}
        # 127.0.0.1: a container's own loopback (the gateway's stream admission, which only its NGINX calls)
        assert addresses <= {own, "127.0.0.1"}, (name, sockets)
        if s.deployment.container(name).host == gateway:
            assert {p for ip, p in sockets if ip.removeprefix("::ffff:") == own} == {*DOORS.values(), status}


def _assert_served_on_every_door(s: stack.Stack) -> None:
    """(a): a tenant's call succeeds on each door, the same embedding on each; without a token, refused."""
    caller = Caller(s, NORMAL)
    try:
        got = {door: caller.call(door, "a cat sits on the mat") for door in DOORS}
    finally:
        caller.close()
    for door in ("http", "openai"):
        np.testing.assert_allclose(got[door], got["grpc"], atol=1e-4, err_msg=door)
    for door, path, body in (("http", f"/v2/models/{MODEL}/infer", _kserve("x")),
                             ("openai", "/v1/embeddings", json.dumps({"model": MODEL, "input": "x"}).encode())):
        assert _post(_door(s, door), path, body, None)[0] == 401, door
        assert _post(_door(s, door), path, body, new_token())[0] == 401, door
    address, port = _door(s, "grpc")
    with grpc.insecure_channel(f"{address}:{port}") as channel, pytest.raises(grpc.RpcError) as refused:
        channel.unary_unary(GRPC_INFER)(b"", timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


# ------------------------------------------------------------------------------------------------ the corpus

class TritonInStack:
    """What the corpus Runner needs of tritonserver, for the triton container of a Stack: its process
    (tritonserver under hotpath.server.supervise), and a restart of the container. No direct door."""

    grpc_url = http_url = None

    def __init__(self, s: stack.Stack, name: str):
        self.s, self.name = s, name

    @property
    def process(self) -> TritonInStack:
        return self

    @property
    def main(self):
        return self.s.process(self.name)

    @property
    def pid(self) -> int:
        with contextlib.suppress(psutil.NoSuchProcess):
            for p in psutil.Process(self.main.pid).children(recursive=True):
                with contextlib.suppress(psutil.NoSuchProcess):
                    if p.name() == "tritonserver" and p.status() != psutil.STATUS_ZOMBIE:
                        return p.pid
        return self.main.pid

    def poll(self) -> int | None:
        code = self.main.poll()
        if code is None and self.pid == self.main.pid:
            return -1   # tritonserver is gone and the supervisor has not exited yet
        return code

    @property
    def returncode(self) -> int | None:
        return self.main.returncode if self.main.returncode is not None else -1

    def stop(self) -> None:
        self.s.stop_container(self.name)

    def start(self) -> None:
        self.s.start_container(self.name)


class GatewayInStack:
    """What the Runner needs of the gateway: the published doors, its process, NGINX's folder (error log)."""

    def __init__(self, s: stack.Stack, name: str):
        self.s, self.name = s, name
        self.grpc_url = "{}:{}".format(*_door(s, "grpc"))
        self.http_url = "{}:{}".format(*_door(s, "http"))

    @property
    def process(self):
        return self.s.process(self.name)

    @property
    def dir(self) -> Path | None:
        return nginx_dir(self.s, self.name)


def nginx_dir(s: stack.Stack, name: str) -> Path | None:
    """The folder of the gateway's NGINX master (its -p), whose nginx.conf the gateway rendered."""
    with contextlib.suppress(psutil.NoSuchProcess):
        for p in psutil.Process(s.process(name).pid).children(recursive=True):
            with contextlib.suppress(psutil.NoSuchProcess):
                argv = p.cmdline()
                if p.name() == "nginx" and "-p" in argv:
                    return Path(argv[argv.index("-p") + 1])
    return None


def run_corpus(s: stack.Stack, cases: list, report: Path) -> dict[str, int]:
    """Every case through the gateway, judged by the corpus Runner; the counts, printed."""
    triton = TritonInStack(s, _container(s, "hotpath-triton"))
    gateway = GatewayInStack(s, _container(s, "hotpath-gateway"))
    runner = corpus.Runner(triton, gateway, reference="gateway", report=report)
    runner.planned, runner.test_file = len(cases), "tests/integration/test_production_shape.py"
    t0 = time.monotonic()
    try:
        for case in sorted(cases, key=lambda c: bool(c.crashes_triton)):   # as test_malformed_corpus orders them
            runner.run(case, "gateway")
    finally:
        runner.write_report()
        for channel in runner.channels.values():
            channel.close()
    answers = [v.answer.kind if v.answer else "none" for v in runner.verdicts]
    failed = [v for v in runner.verdicts if not v.ok]
    counts = {"cases": len(runner.verdicts), "refused": answers.count("refused"),
              "succeeded": answers.count("success"), "failures": len(failed), "restarts": len(runner.restarts)}
    print(f"[production-shape] {s.deployment.kind} corpus through the published doors: {counts} in "
          f"{time.monotonic() - t0:.0f}s; report {report}")
    assert not failed, f"{len(failed)} of {len(runner.verdicts)} cases failed (report {report}):" + "".join(
        v.report() for v in failed[:15])
    assert not runner.restarts, runner.restarts
    return counts


# ------------------------------------------------------------------------------------------------ slow clients

def public_bounds(s: stack.Stack) -> dict[str, dict[str, list[str]]]:
    """Per published door, the directives of its server block in the running gateway's nginx.conf."""
    folder = nginx_dir(s, _container(s, "hotpath-gateway"))
    assert folder, "no NGINX under the gateway"
    parsed = crossplane.parse(str(folder / "nginx.conf"), comments=False, single=True)["config"][0]["parsed"]
    (block,) = [d for d in parsed if d["directive"] == "http"]
    servers = [d["block"] for d in block["block"] if d["directive"] == "server"]
    out = {}
    for door, port in DOORS.items():
        address, target = s.published()[port]
        (server,) = [b for b in servers if any(d["directive"] == "listen" and d["args"][0] in
                                               (f"{address}:{target}", str(target), f"0.0.0.0:{target}")
                                               for d in b)]
        out[door] = {d["directive"]: d["args"] for d in server}
    return out


def _seconds(value: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    number, unit = (value[:-2], "ms") if value.endswith("ms") else \
        ((value[:-1], value[-1]) if value[-1] in units else (value, "s"))
    return float(number) * units[unit]


def _half_sent(door: str, index: int, bound: int) -> HalfSent:
    token = ATTACKERS[(list(DOORS).index(door) * HALF_SENT + index) // bound]
    auth = (("authorization", f"Bearer {token}"),)
    if door == "grpc":
        from tritonclient.grpc import service_pb2

        r = service_pb2.ModelInferRequest(model_name=MODEL)
        r.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(b"half sent")
        return HalfSent(GRPC_INFER, r.SerializeToString(), auth, http2=True)
    if door == "http":
        return HalfSent(f"/v2/models/{MODEL}/infer", _kserve("half sent"), auth)
    return HalfSent("/v1/embeddings", json.dumps({"model": MODEL, "input": "half sent"}).encode(), auth)


def _p(values: list[float], q: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1)] if ordered else math.nan


def _calls(caller: Caller, door: str, tag: str) -> tuple[list[float], list[str]]:
    latencies, errors = [], []
    for i in range(NORMAL_CALLS):
        start = time.perf_counter()
        try:
            caller.call(door, f"production shape {tag} {door} {i}: a unique text, never a cache hit")
        except Exception as exc:   # noqa: BLE001 - a failed normal call is what the test counts
            errors.append(f"{door}: {exc}"[:300])
            continue
        latencies.append((time.perf_counter() - start) * 1e3)
    return latencies, errors


def slow_clients(s: stack.Stack) -> None:
    bounds = public_bounds(s)
    limits = {}
    for door, got in bounds.items():
        timeouts = {k: _seconds(got[k][0]) for k in ("client_header_timeout", "client_body_timeout",
                                                     "keepalive_timeout", "send_timeout")}
        assert max(timeouts.values()) <= MAX_CLIENT_TIMEOUT_S, (door, timeouts)
        limits[door] = (timeouts, int(got["limit_conn"][1]))
    bound = min(b for _, b in limits.values())
    assert bound >= MIN_TENANT_BOUND, bound   # ATTACKERS is sized for at least this many per tenant
    cut_within = max(max(t["client_header_timeout"], t["client_body_timeout"]) for t, _ in limits.values())

    raise_open_files(len(DOORS) * (HALF_SENT + IDLE) + 512)   # an error saying so when this host allows fewer
    caller = Caller(s, NORMAL)
    try:
        for door in DOORS:
            _calls(caller, door, "warm")
        without = {door: _calls(caller, door, "without") for door in DOORS}
        with contextlib.ExitStack() as held_stack:
            held = {}
            for door in DOORS:
                address, port = _door(s, door)
                held[door] = held_stack.enter_context(hold(
                    address, port, HALF_SENT, IDLE, lambda i, door=door: _half_sent(door, i, bound), door == "grpc"))
            opened = {door: h.counts() for door, h in held.items()}
            t0 = time.monotonic()
            with_held = {door: _calls(caller, door, "with") for door in DOORS}
            end = {door: h.counts() for door, h in held.items()}
            released = {}
            for door, h in held.items():   # seconds from the first normal call until none is held (at most)
                released[door] = None if h.wait_released(cut_within * 2 + 30) is None else time.monotonic() - t0
    finally:
        caller.close()
    lines = ["[production-shape] slow clients at the published doors (compose stack): "
             f"{HALF_SENT} half-sent + {IDLE} idle held on each door at once; timeouts and bounds from the running "
             f"NGINX config: " + "; ".join(f"{d} {t} bound {b}" for d, (t, b) in limits.items())]
    for door in DOORS:
        (w, _), (h, _) = without[door], with_held[door]
        lines.append(f"  {door:6s} normal p50/p95 ms without {_p(w, 50):.1f}/{_p(w, 95):.1f}, with them held "
                     f"{_p(h, 50):.1f}/{_p(h, 95):.1f} (means {statistics.fmean(w or [0]):.1f} -> "
                     f"{statistics.fmean(h or [0]):.1f}); held when opened {opened[door]['half_sent']}/"
                     f"{opened[door]['idle']}, after the calls {end[door]['half_sent']}/{end[door]['idle']}; "
                     f"all cut within {released[door]:.1f}s" if released[door] is not None else "still held")
    print("\n".join(lines))
    errors = [e for door in DOORS for e in without[door][1] + with_held[door][1]]
    assert not errors, errors[:10]
    for door in DOORS:
        assert opened[door]["refused"] == 0 and opened[door]["half_sent"] == HALF_SENT \
            and opened[door]["idle"] == IDLE, (door, opened[door], "the gateway did not hold them: the test proves nothing")
        assert released[door] is not None, (door, end[door], f"still held {cut_within * 2 + 30:.0f}s after the calls")


# ------------------------------------------------------------------------------------------------ the tests

# Container paths left as the image has them: what only text_generation's engine reads (not served here).
UNUSED_PATHS = {"/opt/vllm-venv/bin/python"}


@pytest.mark.parametrize("kind", ["compose", "kubernetes"])
def test_every_name_address_and_container_path_is_substituted(kind, files, tmp_path):
    """No process would start with a host name of the artifact, a bind-all address, or a container path that
    does not exist here: every one of them is rewritten (tests/stack.py), without starting anything."""
    if kind == "compose":
        deployment, addresses = stack.compose(), COMPOSE_ADDRESSES
    else:
        deployment, addresses = stack.kubernetes(kubernetes_docs()), K8S_ADDRESSES
    s = stack.Stack(deployment, addresses, {"/models": files.models, "/cache": tmp_path, "/data": tmp_path,
                                            "/etc/hotpath/tenants": files.tenants},
                    tmp_path, image_paths={"hotpath-triton": {"/models": files.staged}})
    names = "|".join(re.escape(n) for n in deployment.names)
    for c in deployment.containers:
        argv, env, cwd = s.command(c)
        values = argv + [v for k, v in env.items() if k not in ("PATH", "LD_LIBRARY_PATH", "HOME")]
        for value in values:
            assert value not in deployment.names and not re.search(rf"(?<![\w.-])({names}):\d+", value), (c.name, value)
            assert not re.search(r"(?<![\w.])(localhost|127\.0\.0\.1|0\.0\.0\.0)(?![\w.])", value), (c.name, value)
            for path in re.findall(r"(?<![\w.])/[\w./-]+", value):
                assert path in UNUSED_PATHS or Path(path).exists() or Path(path).parent.exists(), (c.name, path)
        assert cwd.is_dir() and str(cwd) != c.image.workdir, (c.name, cwd)
        assert any(a.endswith(s.address(c.host)) for a in argv), f"{c.name} is told no address to listen on: {argv}"


class TestCompose:
    """docker/compose.yaml's services, called on the gateway's published ports only."""

    @pytest.mark.timeout(420)
    def test_only_the_gateways_doors_are_published(self, compose_stack):
        _assert_doors_published_only(compose_stack)

    @pytest.mark.timeout(120)
    def test_a_tenant_is_served_on_every_door(self, compose_stack):
        _assert_served_on_every_door(compose_stack)

    @pytest.mark.timeout(900)
    def test_the_malformed_corpus_through_the_published_doors(self, compose_stack):
        run_corpus(compose_stack, list(corpus.CASES), REPORT_DIR / "corpus-production-compose.md")

    @pytest.mark.timeout(300)
    def test_slow_and_idle_clients_cannot_hold_the_doors(self, compose_stack):
        slow_clients(compose_stack)

    @pytest.mark.timeout(120)
    def test_a_150000_deep_json_body_is_refused_and_triton_stays_ready(self, compose_stack):
        triton = TritonInStack(compose_stack, _container(compose_stack, "hotpath-triton"))
        before = triton.pid
        text = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]})
        body = text.replace('["x"]', "[" * DEPTH + '"x"' + "]" * DEPTH).encode()
        status, answer = _post(_door(compose_stack, "http"), f"/v2/models/{MODEL}/infer", body, NORMAL)
        print(f"[production-shape] a {DEPTH}-deep JSON body ({len(body)} bytes) to the HTTP door: {status} "
              f"{answer[:120]!r}")
        assert 400 <= status < 500, (status, answer[:300])
        assert triton.poll() is None and triton.pid == before, "tritonserver died or was restarted"
        assert _get(_door(compose_stack, "http"), "/v2/health/ready", NORMAL) == 200
        caller = Caller(compose_stack, NORMAL)
        try:
            assert caller.call("http", "still serving").size > 0
        finally:
            caller.close()


class TestKubernetes:
    """deploy/overlays/cpu and deploy/redis rendered by kustomize: one pod per workload, Services to pods."""

    @pytest.mark.timeout(420)
    def test_only_the_gateways_doors_are_published(self, k8s_stack):
        _assert_doors_published_only(k8s_stack)

    @pytest.mark.timeout(120)
    def test_a_tenant_is_served_on_every_door(self, k8s_stack):
        _assert_served_on_every_door(k8s_stack)

    @pytest.mark.timeout(300)
    def test_a_slice_of_the_malformed_corpus(self, k8s_stack):
        ordered = sorted(corpus.CASES, key=lambda c: c.id)
        cases = [c for i, c in enumerate(ordered) if i % 10 == 0 or c.crashes_triton]
        run_corpus(k8s_stack, cases, REPORT_DIR / "corpus-production-kubernetes.md")
