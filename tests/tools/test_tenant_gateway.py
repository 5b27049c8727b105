"""The tenant gateway: tenants file, limits sized from the specs and the SLOs, and the NGINX config
(built with crossplane, parsed back, accepted by nginx -t; tokens only in the 0600 map file)."""

import json
import shutil
import signal
import socket
import stat
import subprocess
import sys
import urllib.error
import urllib.request

import crossplane
import grpc
import pytest
from tritonclient.utils import InferenceServerException

from hotpath.client import (
    TOKEN_ENV,
    ClientError,
    EmbeddingClient,
    InvalidInputError,
    ServerFaultError,
    ServerUnavailableError,
    UnauthenticatedError,
    client_error,
    connect,
)
from hotpath.errors import HotpathError
from hotpath.gateway.__main__ import main as gateway_main
from hotpath.gateway.config import (
    ADMIN_ONLY,
    GRPC_INFER,
    GRPC_STREAM,
    HTTP_INFER,
    HTTP_STREAM,
    LOG_FIELDS,
    TOKEN_MAP,
    UNAUTHENTICATED,
    UNREACHABLE,
    TenantGatewaySettings,
    config,
)
from hotpath.gateway.front_door import CONFIG_FILE, PublicModel
from hotpath.gateway.limits import BODY_OVERHEAD_BYTES, admission_cap, little_cap, max_body_bytes, stream_cap
from hotpath.gateway.tenants import Tenant, load_tenants, new_token, parse_tenants
from hotpath.nginx.access_log import parse_access_log
from hotpath.nginx.directives import TEMP_KINDS, render
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.server.ports import free_ports
from hotpath.shutdown import stop_process
from hotpath.specs.repository import Repository

TOKENS = [new_token() for _ in range(3)]
TENANTS = (Tenant("alpha", TOKENS[0], 500, 100), Tenant("beta", TOKENS[1], 2, 3), Tenant("gamma", TOKENS[2], 500, 100))


def _find(directives, name):
    for d in directives:
        if d["directive"] == name:
            yield d
        yield from _find(d.get("block", []), name)


def _settings(replicas=1, cap=8):
    return TenantGatewaySettings(8443, 8080, tuple(f"127.0.0.1:{9001 + 10 * i}" for i in range(replicas)),
                                 tuple(f"127.0.0.1:{9000 + 10 * i}" for i in range(replicas)), TENANTS, cap, 5 << 20,
                                 max_streams=4, stream_port=9999)


def test_tenants_file_with_defaults(tmp_path):
    path = tmp_path / "tenants.toml"
    path.write_text(f'[defaults]\nrequests_per_s = 7\nburst = 0\n[tenants.acme]\ntoken = "{TOKENS[0]}"\n'
                    f'[tenants.big]\ntoken = "{TOKENS[1]}"\nrequests_per_s = 900\nburst = 90\n')
    acme, big = load_tenants(path)
    assert (acme.name, acme.token, acme.requests_per_s, acme.burst) == ("acme", TOKENS[0], 7, 0)
    assert (big.requests_per_s, big.burst) == (900, 90)
    assert TOKENS[0] not in repr(acme) and TOKENS[0] not in repr(_settings())


@pytest.mark.parametrize("entry,expected", [
    ('token = "short"', "token missing or malformed"),
    (f'token = "{TOKENS[0].upper()}"', "token missing or malformed"),   # NGINX would match it case-insensitively
    ("requests_per_s = 5", "token missing or malformed"),
    (f'token = "{TOKENS[0]}"\nrequests_per_s = 0', "requests_per_s must be an integer >= 1"),
    (f'token = "{TOKENS[0]}"\nburst = 1.5', "burst must be an integer >= 0"),
    (f'token = "{TOKENS[0]}"\nrate = 5', "expected a table"),
])
def test_bad_tenant_entries_are_named_without_the_token(entry, expected):
    with pytest.raises(HotpathError, match=expected) as err:
        parse_tenants(__import__("tomllib").loads(f"[tenants.acme]\n{entry}\n"), "t.toml")
    assert "tenants.acme" in str(err.value) and TOKENS[0] not in str(err.value).lower()


def test_tenant_names_tokens_and_files_that_cannot_work():
    with pytest.raises(HotpathError, match="same token as tenants.a"):
        parse_tenants({"tenants": {"a": {"token": TOKENS[0]}, "b": {"token": TOKENS[0]}}}, "t")
    for name in ("default", "Acme", "a b"):   # a special word of NGINX's map; case-folded; a space
        with pytest.raises(HotpathError, match="tenant name"):
            parse_tenants({"tenants": {name: {"token": TOKENS[0]}}}, "t")
    with pytest.raises(HotpathError, match="no \\[tenants"):
        parse_tenants({"defaults": {"burst": 1}}, "t")
    with pytest.raises(HotpathError, match="unknown key"):
        parse_tenants({"tenant": {}}, "t")


def test_body_limit_is_the_largest_item_limit_of_the_specs(tmp_path):
    for name, params in (("img", "max_bytes = 8388608\nmax_pixels = 99999999999"), ("txt", "max_text_bytes = 32768")):
        (tmp_path / f"{name}.toml").write_text(
            f'backend = "python"\nmax_batch_size = 4\n[hotpath]\nkind = "python"\npython_backend = "{name}"\n'
            f'[[input]]\nname = "X"\ndata_type = "TYPE_STRING"\ndims = [1]\n'
            f'[[output]]\nname = "Y"\ndata_type = "TYPE_FP32"\ndims = [1]\n[parameters]\n{params}\n')
    assert max_body_bytes(tmp_path) == 8388608 + BODY_OVERHEAD_BYTES
    (tmp_path / "img.toml").unlink()
    assert max_body_bytes(tmp_path) == 32768 + BODY_OVERHEAD_BYTES


def test_stream_cap_is_the_fewest_decoding_slots_of_a_decoupled_spec(tmp_path):
    def spec(name, decoupled, slots, instances):
        (tmp_path / f"{name}.toml").write_text(
            f'backend = "python"\nmax_batch_size = 0\n[hotpath]\nkind = "python"\npython_backend = "{name}"\n'
            f'[model_transaction_policy]\ndecoupled = {str(decoupled).lower()}\n'
            f'[[input]]\nname = "X"\ndata_type = "TYPE_STRING"\ndims = [1]\n'
            f'[[output]]\nname = "Y"\ndata_type = "TYPE_STRING"\ndims = [1]\n'
            f'[[instance_group]]\ncount = {instances}\nkind = "KIND_CPU"\n[parameters]\nmax_num_seqs = {slots}\n')
    spec("a", False, 2, 1)   # not decoupled: its max_num_seqs is no stream slot
    with pytest.raises(HotpathError, match="no decoupled spec"):
        stream_cap(tmp_path)
    spec("b", True, 16, 2)
    spec("c", True, 12, 1)
    assert stream_cap(tmp_path) == 12
    assert stream_cap() == 16   # build/text_generation.toml: max_num_seqs 16, one instance

def test_admission_cap_is_littles_law_held_to_the_measured_concurrency(tmp_path):
    assert little_cap(466.9, 25.0) == 11 and little_cap(212.0, 60.0) == 12 and little_cap(10, 1) == 1
    slo = tmp_path / "slo.toml"
    common = 'input_data = "x.json"\n'

    def endpoint(name, p95_ms, concurrency, capacity=None):
        return (f"[profiles.cpu.endpoints.{name}]\np95_ms = {p95_ms}\nconcurrency = {concurrency}\n{common}"
                + (f"capacity_per_s = {capacity}\n" if capacity else ""))
    # a: Little's law 10 (< its concurrency 16); b: 18, held to its concurrency 12; c: no capacity, not counted.
    slo.write_text(endpoint("a", 25.0, 16, 400.0) + endpoint("b", 60.0, 12, 300.0) + endpoint("c", 5.0, 1))
    assert admission_cap("cpu", slo) == 10
    slo.write_text(endpoint("a", 25.0, 16, 400.0) + endpoint("b", 60.0, 6, 300.0))
    assert admission_cap("cpu", slo) == 6
    slo.write_text(endpoint("c", 5.0, 1))
    with pytest.raises(HotpathError, match="capacity_per_s"):
        admission_cap("cpu", slo)
    assert admission_cap("cpu") == 8   # perf/slo.toml: text_embedding 466.9/s (11 by Little's law) at concurrency 8


def _written(tmp_path, settings):
    for kind in TEMP_KINDS:
        (tmp_path / "tmp" / kind).mkdir(parents=True)
    for name, text in settings.private_files().items():
        (tmp_path / name).write_text(text)
    path = tmp_path / "nginx.conf"
    path.write_text(render(config(settings, tmp_path)))
    return path


def _nginx_t(tmp_path, path):
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    return subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(path), "-e", str(tmp_path / "e.log")],
                          capture_output=True, text=True)


@pytest.mark.parametrize("replicas", [1, 2])
def test_config_parses_back_and_nginx_accepts_it(tmp_path, replicas):
    settings = _settings(replicas)
    path = _written(tmp_path, settings)
    assert not any(t in path.read_text() for t in TOKENS), "tokens belong in the map file only"
    check = _nginx_t(tmp_path, path)
    assert check.returncode == 0, check.stderr
    parsed = crossplane.parse(str(path), comments=False, single=True)
    assert parsed["status"] == "ok", parsed["errors"]
    top = parsed["config"][0]["parsed"]
    token_maps = [m for m in _find(top, "map") if m["args"] == ["$http_authorization", "$hotpath_tenant"]]
    assert [d["args"] for d in token_maps[0]["block"]] == [[""], [str(tmp_path / TOKEN_MAP)]]
    # not the upstreams' `server` lines; the third server is the stream admission's unix socket
    grpc, http, charge = [s for s in _find(top, "server") if "block" in s]
    assert [d["args"] for d in charge["block"] if d["directive"] == "listen"] == [[f"unix:{tmp_path}/charge.sock"]]
    for server in (grpc, http):
        (check_token,) = [d for d in server["block"] if d["directive"] == "if"]
        assert check_token["args"] == ["$hotpath_tenant", "=", ""] and check_token["block"][0]["args"] == ["401"]
        assert any(d["directive"].endswith("_set_header") and d["args"] == ["Authorization", ""]
                   for d in server["block"]), "the token is not passed to Triton"
        # limit_conn where streams go, capped per replica; inference calls are admitted by front_door.lua.
        limited = {loc["args"][-1]: next(_find(loc["block"], "limit_conn"))["args"]
                   for loc in _find(server["block"], "location") if any(_find(loc["block"], "limit_conn"))}
        assert sorted(limited.values()) == [["streams", str(4 * replicas)]]
        assert set(limited) <= {GRPC_STREAM, HTTP_STREAM}
        checked = {loc["args"][-1]: next(_find(loc["block"], "access_by_lua"))["args"][0]
                   for loc in _find(server["block"], "location") if any(_find(loc["block"], "access_by_lua"))}
        infer = GRPC_INFER if server is grpc else HTTP_INFER
        assert "grpc_infer()" in checked[infer] or "http_infer(ngx.var[1])" in checked[infer]
        # Everything not allow-listed is refused in the catch-all location.
        (catch_all,) = [loc for loc in _find(server["block"], "location") if loc["args"] == ["/"]]
        assert catch_all["block"] == [{"directive": "return", "args": ["403"], "line": catch_all["block"][0]["line"]}]
    door = json.loads((tmp_path / CONFIG_FILE).read_text())
    assert door["max_calls"] == 8 * replicas and door["weights"] == {"alpha": 1, "beta": 1, "gamma": 1}
    # Each tenant has its own rate and burst (front_door.lua's GCRA), and a tokens-per-minute budget.
    assert {n: (t["requests_per_s"], t["burst"]) for n, t in door["tenants"].items()} == \
        {"alpha": (500, 100), "gamma": (500, 100), "beta": (2, 3)}
    assert all(t["tokens_per_min"] > 0 for t in door["tenants"].values())
    assert set(door["models"]) == {e.name for e in Repository().endpoints()}, "only the public endpoints"
    assert "tokenizer" not in door["models"] and "text_encoder" not in door["models"]
    assert [d["args"] for d in _find(top, "client_max_body_size")] == [[str(5 << 20)]]
    answers = {}
    for loc in _find(grpc["block"], "location"):
        if loc["args"][0].startswith("@"):
            answers[loc["args"][0]] = {d["args"][1] for d in loc["block"] if d["args"][:1] == ["grpc-status"]}
    assert answers == {"@unauthenticated": {"16"}, "@admin_only": {"7"}, "@no_streams": {"14"},
                       "@too_large": {"3"}, "@overloaded": {"14"}, "@streams_full": {"14"}, "@unreachable": {"14"},
                       "@tenant_busy": {"8"}}
    http_codes = {loc["args"][0]: [d["args"][0] for d in loc["block"] if d["directive"] == "return"][0]
                  for loc in _find(http["block"], "location") if loc["args"][0].startswith("@")}
    assert http_codes == {"@unauthenticated": "401", "@admin_only": "403", "@no_streams": "503",
                          "@too_large": "413", "@overloaded": "503", "@streams_full": "503", "@unreachable": "502",
                          "@tenant_busy": "429"}
    pages = {tuple(d["args"]) for d in grpc["block"] if d["directive"] == "error_page"}
    assert pages == {("401", "=", "@unauthenticated"), ("403", "=", "@admin_only"),
                     ("413", "=", "@too_large"), ("503", "=", "@overloaded"), ("502", "504", "=", "@unreachable"),
                     ("429", "=", "@tenant_busy")}
    # The failover policy of the replica balancer (hotpath.nginx.upstreams): inference, health and metadata
    # go to another replica when one fails; streams never do (a replayed stream would repeat its tokens).
    for server, protocol in ((grpc, "grpc"), (http, "proxy")):
        retried = {loc["args"][-1]: [d["args"] for d in loc["block"] if d["directive"].startswith(f"{protocol}_next")]
                   for loc in _find(server["block"], "location") if any(_find(loc["block"], f"{protocol}_pass"))}
        for uri, policy in retried.items():
            expected = [["error", "timeout", "http_502", "http_503", "non_idempotent"], [str(replicas)]]
            assert policy == ([] if uri in (GRPC_STREAM, HTTP_STREAM) else expected), (uri, policy)
    assert all(s["args"][1:] == ["max_fails=1", "fail_timeout=10s"]
               for u in _find(top, "upstream") for s in u["block"] if s["directive"] == "server")
    # A stream location answers a full cap with its own message, and keeps every other answer.
    (stream,) = [loc for loc in _find(grpc["block"], "location") if loc["args"][-1] == GRPC_STREAM]
    stream_pages = {tuple(d["args"]) for d in stream["block"] if d["directive"] == "error_page"}
    assert stream_pages == pages - {("401", "=", "@unauthenticated"), ("403", "=", "@admin_only"),
                                    ("503", "=", "@overloaded"), ("429", "=", "@tenant_busy")} | {("503", "=", "@streams_full")}


def test_nginx_rejects_a_config_whose_token_map_is_missing(tmp_path):
    path = _written(tmp_path, _settings())
    (tmp_path / TOKEN_MAP).unlink()
    assert _nginx_t(tmp_path, path).returncode != 0


def test_local_gateway_writes_the_token_map_private(tmp_path):
    gateway = LocalNginx(_settings())
    try:
        text = gateway.write_config()
        mode = stat.S_IMODE((gateway.dir / TOKEN_MAP).stat().st_mode)
        assert mode == 0o600, oct(mode)
        assert all(f"Bearer {t.token}" in (gateway.dir / TOKEN_MAP).read_text() for t in TENANTS)
        assert not any(t in text for t in TOKENS)
    finally:
        shutil.rmtree(gateway.dir)



def test_a_gateway_that_cannot_start_removes_its_token_map():
    grpc_port, http_port = free_ports(2)
    settings = TenantGatewaySettings(grpc_port, http_port, ("127.0.0.1:9001",), ("127.0.0.1:9000",), TENANTS)
    gateway = LocalNginx(settings)
    with socket.create_server(("127.0.0.1", http_port)), pytest.raises(HotpathError, match="already in use"):
        with gateway:
            pass
    assert gateway.process is None and not gateway.dir.exists(), "the token map outlived a failed start"


GRPC_ALLOWED = [*(f"/inference.GRPCInferenceService/{m}" for m in (
    "ModelInfer", "ModelStreamInfer", "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
    "ModelConfig")), "/grpc.health.v1.Health/Check"]
GRPC_ADMIN = [*(f"/inference.GRPCInferenceService/{m}" for m in (
    "RepositoryIndex", "RepositoryModelLoad", "RepositoryModelUnload", "SystemSharedMemoryStatus",
    "SystemSharedMemoryRegister", "SystemSharedMemoryUnregister", "CudaSharedMemoryStatus", "CudaSharedMemoryRegister",
    "CudaSharedMemoryUnregister", "TraceSetting", "LogSettings", "ModelStatistics")), "/other.Service/Call"]
HTTP_ALLOWED = [("GET", p) for p in ("/v2", "/v2/health/live", "/v2/health/ready", "/v2/models/m", "/v2/models/m/ready",
                                     "/v2/models/m/versions/1", "/v2/models/m/versions/1/ready", "/v2/models/m/config")] + \
    [("POST", f"/v2/models/m{v}/{call}") for v in ("", "/versions/2") for call in ("infer", "generate", "generate_stream")]
HTTP_ADMIN = [("POST", p) for p in ("/v2/repository/index", "/v2/repository/models/m/load",
                                    "/v2/repository/models/m/unload", "/v2/systemsharedmemory/region/r/register",
                                    "/v2/cudasharedmemory/region/r/register", "/v2/trace/setting",
                                    "/v2/models/m/trace/setting", "/v2/logging")] + \
    [("GET", p) for p in ("/v2/systemsharedmemory/status", "/v2/cudasharedmemory/status", "/v2/trace/setting",
                          "/v2/logging", "/v2/models/stats", "/v2/models/m/stats", "/v2/models/m/versions/1/stats",
                          "/v2/models/m/infer/../../stats", "/v2/models/%73tats", "/metrics", "/v2/health/other")]


# One public endpoint "m"; "step" stands for an ensemble's internal step, which is not public.
PUBLIC = (PublicModel("m", {"TEXT": ("BYTES", False), "K": ("INT32", True), "T": ("FP32", True)}, ("OUT",), 8,
                      True),)
NOT_PUBLIC = ("step", "stats", "", "m/../step", "M")


def _named(name: str) -> bytes:
    """A gRPC-framed request message whose field 1 is `name` (ModelInfer, ModelReady, ModelConfig, ...)."""
    message = b"\x0a" + bytes([len(name.encode())]) + name.encode()
    return b"\x00" + len(message).to_bytes(4, "big") + message


def _http_body(path: str, model: str = "m") -> bytes:
    if path.endswith("/infer"):
        return json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]}).encode()
    return json.dumps({"TEXT": "x"}).encode()


@pytest.fixture
def bare_gateway():
    """The gateway with no server behind it: a call passed on meets no upstream (gRPC UNAVAILABLE / HTTP 502)."""
    grpc_port, http_port, dead_grpc, dead_http, dead_streams = free_ports(5)
    settings = TenantGatewaySettings(grpc_port, http_port, (f"127.0.0.1:{dead_grpc}",), (f"127.0.0.1:{dead_http}",),
                                     TENANTS, models=PUBLIC, stream_port=dead_streams)
    with LocalNginx(settings) as gateway, grpc.insecure_channel(gateway.grpc_url) as channel:
        def grpc_answer(path, model="m"):
            call = channel.stream_stream(path) if path.endswith("StreamInfer") else channel.unary_unary(path)
            with pytest.raises(grpc.RpcError) as err:
                # a raw channel frames what it sends itself: pass the message without the 5-byte prefix
                body = _named(model)[5:]
                response = call(iter([body]) if path.endswith("StreamInfer") else body,
                                metadata=[("authorization", f"Bearer {TOKENS[0]}")], timeout=10)
                list(response) if path.endswith("StreamInfer") else None
            return err.value.code(), err.value.details()

        def http_answer(method, path, body=None):
            data = (body if body is not None else _http_body(path)) if method == "POST" else None
            request = urllib.request.Request(f"http://{gateway.http_url}{path}", method=method, data=data,
                                             headers={"Authorization": f"Bearer {TOKENS[0]}"})
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(request, timeout=10)
            return err.value.code, json.loads(err.value.read())["error"]

        yield gateway, grpc_answer, http_answer


def test_tenants_reach_only_the_allow_listed_apis(bare_gateway):
    """NGINX's own location matching: a refused call is answered PERMISSION_DENIED / 403 and never passed on."""
    gateway, grpc_answer, http_answer = bare_gateway
    for path in GRPC_ALLOWED:
        assert grpc_answer(path) == (grpc.StatusCode.UNAVAILABLE, UNREACHABLE), path
    for path in GRPC_ADMIN:
        assert grpc_answer(path) == (grpc.StatusCode.PERMISSION_DENIED, ADMIN_ONLY), path
    for method, path in HTTP_ALLOWED:
        if path.endswith("/generate"):   # Triton's /generate wants exactly one response: a stream never gives it
            status, message = http_answer(method, path)
            assert status == 400 and "generate_stream" in message, (method, path, status, message)
        else:
            assert http_answer(method, path) == (502, UNREACHABLE), (method, path)
    for method, path in HTTP_ADMIN:
        assert http_answer(method, path) == (403, ADMIN_ONLY), (method, path)
    # NGINX logs a call after answering it: wait for every line.
    logged = gateway.log(count=len(GRPC_ALLOWED) + len(GRPC_ADMIN) + len(HTTP_ALLOWED) + len(HTTP_ADMIN))
    refused = [e for e in logged if e.status in (403, 204) and e.grpc_status in ("7", "")]
    assert len(refused) == len(GRPC_ADMIN) + len(HTTP_ADMIN) and not [e for e in refused if e.upstream], refused


def test_only_public_endpoints_are_reachable(bare_gateway):
    """Internal step models and unknown names are NOT_FOUND / 404 at the gateway, never passed on."""
    gateway, grpc_answer, http_answer = bare_gateway
    named = [p for p in GRPC_ALLOWED if p.rsplit("/", 1)[1] in ("ModelInfer", "ModelReady", "ModelMetadata",
                                                                 "ModelConfig")]
    for model in NOT_PUBLIC:
        for path in named:
            code, message = grpc_answer(path, model)
            assert code == grpc.StatusCode.NOT_FOUND and "public endpoints: m" in message, (path, model)
    for model in ("step", "stats", "M", "%73tep"):
        for method, path in HTTP_ALLOWED:
            if "/models/m" in path:
                path = path.replace("/models/m", f"/models/{model}")
                status, message = http_answer(method, path)
                # /v2/models/stats is the statistics API: refused as an admin API
                assert (status, message) == (403, ADMIN_ONLY) if path == "/v2/models/stats" else \
                    (status == 404 and "public endpoints: m" in message), (path, status, message)
    logged = gateway.log()
    assert not [e for e in logged if e.upstream and e.status in (404, 204) and e.grpc_status in ("5", "")]

def test_access_log_lines():
    log = ("1796020000.1|204|-|-|-|0.000|-||16|/inference.GRPCInferenceService/ModelInfer\n"
           "1796020000.2|200|127.0.0.1:9001|200|0|0.012|0.011|alpha|-|/inference.GRPCInferenceService/ModelInfer\n"
           "1796020000.3|429|-|-|-|0.000|-|beta|-|/v2/models/m/infer\n"
           "1796020000.4|401|-|-|-|0.000|-||-|/v2/models/a|b/infer?x=|\nnot a log line\n")
    refused, served, limited, piped = parse_access_log(log, LOG_FIELDS)
    assert (refused.upstream, refused.grpc_status, refused.tenant) == ("", "16", "")
    assert (served.upstream, served.grpc_status, served.tenant, served.seconds, served.upstream_seconds) == \
        ("127.0.0.1:9001", "0", "alpha", 0.012, 0.011)
    assert (limited.status, limited.grpc_status) == (429, "")
    assert (piped.uri, piped.status, piped.tenant) == ("/v2/models/a|b/infer?x=|", 401, ""), "a `|` in the URI"

@pytest.mark.parametrize("status,kind", [("StatusCode.UNAUTHENTICATED", UnauthenticatedError),
                                         ("401", UnauthenticatedError), ("413", InvalidInputError),
                                         ("StatusCode.RESOURCE_EXHAUSTED", ServerUnavailableError),
                                         ("429", ServerUnavailableError)])
def test_gateway_refusals_map_to_client_errors(status, kind):
    error = client_error("m at h", InferenceServerException("refused", status=status))
    assert type(error) is kind and error.retryable == (kind is ServerUnavailableError)
    assert UnauthenticatedError.exit_code not in {c.exit_code for c in (InvalidInputError, ServerUnavailableError,
                                                                         ServerFaultError, ClientError)}


class _Request:
    def __init__(self):
        self.headers = {}


def test_clients_send_the_token_from_the_argument_or_the_environment(monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    assert connect("127.0.0.1:1").plugin() is None, "no token, no header"
    monkeypatch.setenv(TOKEN_ENV, TOKENS[0])
    for client, token in ((connect("127.0.0.1:1"), TOKENS[0]), (connect("127.0.0.1:1", TOKENS[1]), TOKENS[1]),
                          (EmbeddingClient("127.0.0.1:1")._client, TOKENS[0])):
        request = _Request()
        client.plugin()(request)
        assert request.headers == {"authorization": f"Bearer {token}"}
        client.close()


def test_token_command_makes_tokens_the_tenants_file_accepts(capsys):
    assert gateway_main(["token"]) == 0
    token = capsys.readouterr().out.strip()
    assert parse_tenants({"tenants": {"acme": {"token": token}}}, "t")[0].token == token


def test_serve_command_refuses_unknown_tokens_without_any_server(tmp_path):
    """Authentication happens before any upstream is chosen: no tritonserver is needed to see a 401."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\ntoken = "{TOKENS[0]}"\n')
    grpc_port, http_port, upstream = free_ports(3)
    cmd = [sys.executable, "-m", "hotpath.gateway", "serve", "--tenants", str(tenants), "--grpc-port", str(grpc_port),
           "--http-port", str(http_port), "--http-upstream", f"127.0.0.1:{upstream}"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert "[gateway] gRPC" in process.stdout.readline()
        url = f"http://127.0.0.1:{http_port}/v2/health/ready"
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + TOKENS[1]}))
        assert refused.value.code == 401 and refused.value.headers["WWW-Authenticate"] == "Bearer"
        assert json.loads(refused.value.read()) == {"error": UNAUTHENTICATED}
        with pytest.raises(urllib.error.HTTPError) as passed:   # a known token goes on: no server there (502)
            urllib.request.urlopen(urllib.request.Request(url, headers={"Authorization": "Bearer " + TOKENS[0]}))
        assert passed.value.code == 502
    finally:
        stop_process(process, signal.SIGTERM, 10)
    assert process.returncode == 0


def test_sighup_reads_the_tenants_file_again_and_a_broken_file_keeps_the_tenants(tmp_path):
    """A tenant added to the file is served after SIGHUP, without a restart; a file that does not parse
    changes nothing."""
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\ntoken = "{TOKENS[0]}"\n')
    grpc_port, http_port, upstream = free_ports(3)
    cmd = [sys.executable, "-m", "hotpath.gateway", "serve", "--tenants", str(tenants), "--grpc-port", str(grpc_port),
           "--http-port", str(http_port), "--http-upstream", f"127.0.0.1:{upstream}"]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)

    def status(token):
        request = urllib.request.Request(f"http://127.0.0.1:{http_port}/v2/health/ready",
                                         headers={"Authorization": "Bearer " + token})
        with pytest.raises(urllib.error.HTTPError) as answer:   # 401 refused, 502 passed on (no server there)
            urllib.request.urlopen(request, timeout=10)
        return answer.value.code

    try:
        assert "[gateway] gRPC" in process.stdout.readline()
        assert (status(TOKENS[0]), status(TOKENS[1])) == (502, 401)
        tenants.write_text(f'[tenants.acme]\ntoken = "{TOKENS[0]}"\n[tenants.beta]\ntoken = "{TOKENS[1]}"\n')
        process.send_signal(signal.SIGHUP)
        assert "[gateway] reloaded: 2 tenant(s)" in process.stdout.readline()
        assert (status(TOKENS[0]), status(TOKENS[1])) == (502, 502)
        tenants.write_text("[tenants.beta\n")
        process.send_signal(signal.SIGHUP)
        line = process.stderr.readline()
        while "[gateway] scopes:" in line:   # the warning about tenants without scopes (start, reload)
            line = process.stderr.readline()
        assert "reload refused" in line
        assert (status(TOKENS[0]), status(TOKENS[1])) == (502, 502)
    finally:
        stop_process(process, signal.SIGTERM, 10)
    assert process.returncode == 0


def _infer(*inputs, **extra) -> bytes:
    return json.dumps({"inputs": list(inputs), **extra}).encode()


def _text(data=("x",), shape=(1, 1), **fields):
    return {"name": "TEXT", "datatype": "BYTES", "shape": list(shape), "data": list(data), **fields}


# Bodies Triton 2.51's HTTP frontend crashes on, answers 500 for, or narrows silently: each is a 400 naming
# the rule at the gateway, and never reaches an upstream.
BAD_HTTP_BODIES = {
    "nested 100,000 deep": (b"[" * 100_000 + b"]" * 100_000, "nesting"),
    "nested objects": (b'{"a":' * 50_000 + b"1" + b"}" * 50_000, "nesting"),
    "deep inside inputs": (_infer(_text(data=[[[[[[[[[["x"]]]]]]]]]] * 1)).replace(b'"x"', b"[" * 40 + b'"x"' + b"]" * 40),
                           "nesting"),
    "empty": (b"", "empty"),
    "open brace": (b"{", "does not parse"),
    "not an object": (b"[1, 2]", "JSON object"),
    "no inputs": (b"{}", "'inputs'"),
    "inputs not a list": (_infer().replace(b"[]", b'"TEXT"'), "'inputs'"),
    "number for BYTES": (_infer(_text(data=[5])), "BYTES data must be strings"),
    "float for INT32": (_infer(_text(), {"name": "K", "datatype": "INT32", "shape": [1, 1], "data": [1.5]}),
                        "INT32 data must be integers"),
    "INT32 past 2^32": (_infer(_text(), {"name": "K", "datatype": "INT32", "shape": [1, 1], "data": [2**32 + 5]}),
                        "within"),
    "INT32 past 2^31": (_infer(_text(), {"name": "K", "datatype": "INT32", "shape": [1, 1], "data": [2**31]}),
                        "within"),
    "wrong datatype": (_infer(_text(), {"name": "K", "datatype": "INT64", "shape": [1, 1], "data": [1]}),
                       "datatype must be INT32"),
    "unknown input": (_infer(_text(), {"name": "X", "datatype": "BYTES", "shape": [1], "data": ["y"]}),
                      "no such input"),
    "required missing": (_infer({"name": "K", "datatype": "INT32", "shape": [1, 1], "data": [1]}),
                         "required input 'TEXT'"),
    "twice": (_infer(_text(), _text()), "given twice"),
    "count vs shape": (_infer(_text(data=["a", "b"])), "data holds 2 elements"),
    "nested deeper than the shape": (_infer(_text(data=[[["x"]]])), "nested as its shape"),
    "zero dim": (_infer(_text(data=[], shape=(0, 1))), "1..2^31-1"),
    "INT64-sized past what the gateway writes": (_infer(_text(), {"name": "K", "datatype": "INT32", "shape": [1, 1],
                                                                   "data": [2**53]}), "within"),
    "negative dim": (_infer(_text(shape=(-1, 1))), "shape"),
    "huge dim": (_infer(_text(shape=(2**40, 1))), "shape"),
    "no data": (_infer({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1]}), "no data"),
    "negative binary_data_size": (_infer({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                          "parameters": {"binary_data_size": -4}}), "binary_data_size"),
    "binary past the body": (_infer({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                     "parameters": {"binary_data_size": 99}}), "binary_data_size"),
    "unknown output": (_infer(_text(), outputs=[{"name": "NOPE"}]), "names no output"),
    "id not a string": (_infer(_text(), id=5), "'id'"),
    "request parameter of the wrong type": (_infer(_text(), parameters={"sequence_id": -1}), "sequence_id"),
    "priority not a count": (_infer(_text(), parameters={"priority": "high"}), "priority"),
    "nested request parameter": (_infer(_text(), parameters={"x": {"y": 1}}), "'x'"),
    "shared memory input": (_infer({"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "parameters": {
        "shared_memory_region": "operators", "shared_memory_byte_size": 64}}), "shared_memory"),
    "classification output": (_infer(_text(), outputs=[{"name": "OUT", "parameters": {"classification": 3}}]),
                              "'classification' is not accepted"),
    "binary_data not bool": (_infer(_text(), outputs=[{"name": "OUT", "parameters": {"binary_data": 1}}]),
                             "binary_data"),
    "infinite parameter": (_infer(_text(), parameters={"x": 1e400}).replace(b"Infinity", b"1e400"), "'x'"),
    "infinite float": (_infer(_text(), {"name": "T", "datatype": "FP32", "shape": [1, 1], "data": [1e400]})
                       .replace(b"Infinity", b"1e400"), "finite"),
    "empty list inside data": (_infer(_text(data=[[], ["a"]])), "empty list"),
    "ragged nesting": (_infer(_text(data=[["a", "b"], ["c"]], shape=(3, 1))), "nested as its shape"),
    "NaN": (_infer(_text()).replace(b'"x"', b'"x"], "parameters": {"p": NaN}, "z": [1'), "does not parse"),
}


@pytest.mark.parametrize("case", sorted(BAD_HTTP_BODIES))
def test_malformed_http_bodies_are_400_at_the_gateway(bare_gateway, case):
    gateway, _, http_answer = bare_gateway
    body, fragment = BAD_HTTP_BODIES[case]
    status, message = http_answer("POST", "/v2/models/m/infer", body)
    assert status == 400 and fragment in message, (status, message)
    assert not [e for e in gateway.log(count=1) if e.upstream], "a refused body reached an upstream"


def test_calls_that_meet_no_replica_give_their_slot_back(bare_gateway):
    """An admitted call answered by error_page (502: no replica) released nothing: after 8 (the cap)
    every later call was refused 'at capacity' for good."""
    _, _, http_answer = bare_gateway
    for _ in range(20):
        assert http_answer("POST", "/v2/models/m/infer") == (502, UNREACHABLE)


def test_generate_values_are_a_value_or_a_flat_list(bare_gateway):
    """The model reads [[1024]] as 1024 tokens where the gateway charged the default."""
    _, _, http_answer = bare_gateway
    stream = "/v2/models/m/generate_stream"
    for body in (b'{"TEXT": "hi", "K": [[5]]}', b'{"TEXT": "hi", "K": []}', b'{"TEXT": [["hi"]]}',
                 b'{"TEXT": "hi", "T": 1e999}'):
        status, message = http_answer("POST", stream, body)
        assert status == 400, (body, status, message)
    assert http_answer("POST", stream, b'{"TEXT": ["a/b"], "K": [5], "T": 0.5}')[0] == 502


def test_a_request_message_with_fields_the_gateway_cannot_read_is_refused(bare_gateway):
    """A protobuf group or unknown field stopped the reader while Triton's parser skips it: what came after
    (a 'classification' parameter, a 2^32+1 batch) reached Triton unchecked."""
    from tritonclient.grpc import service_pb2

    gateway, _, _ = bare_gateway
    clean = service_pb2.ModelInferRequest(model_name="m")
    clean.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    out = clean.outputs.add(name="OUT")
    hidden = service_pb2.ModelInferRequest().outputs.add(name="OUT")
    hidden.parameters["classification"].int64_param = 3
    group, unknown = b"\x7b\x7c", b"\x78\x01"   # field 15 as an empty group; field 15 as a varint
    bodies = []
    for prefix in (group, unknown):
        inner = b"\x0a\x03OUT" + prefix + hidden.SerializeToString()[5:]
        bodies.append(clean.SerializeToString() + b"\x32" + bytes([len(inner)]) + inner)
    bodies.append(clean.SerializeToString() + unknown)
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for body in bodies:
            with pytest.raises(grpc.RpcError) as err:
                call(body, metadata=[("authorization", f"Bearer {TOKENS[0]}")], timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "malformed" in err.value.details()
        with pytest.raises(grpc.RpcError) as err:   # the clean message passes on (no replica behind)
            call(clean.SerializeToString(), metadata=[("authorization", f"Bearer {TOKENS[0]}")], timeout=10)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert out.name == "OUT"


def test_a_compressed_body_is_refused(bare_gateway):
    """Triton decoded a body sent as gzip that was none into another text and answered 200 with its vector."""
    gateway, _, _ = bare_gateway
    request = urllib.request.Request(f"http://{gateway.http_url}/v2/models/m/infer", data=_infer(_text()),
                                     method="POST", headers={"Authorization": f"Bearer {TOKENS[0]}",
                                                             "Content-Encoding": "gzip"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=10)
    assert err.value.code == 400 and b"Content-Encoding" in err.value.read()


def test_grpc_parameters_that_reach_past_the_request_are_refused(bare_gateway):
    """Shared-memory references (another client's region) and `classification` (SIGFPE in Triton 2.51 on a
    BYTES output) in a ModelInfer message, at the request, input or output level."""
    from tritonclient.grpc import service_pb2

    gateway, _, _ = bare_gateway
    cases = []
    for where in ("request", "input", "output"):
        for key in ("shared_memory_region", "classification"):
            r = service_pb2.ModelInferRequest(model_name="m")
            tensor = r.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
            out = r.outputs.add(name="OUT")
            target = {"request": r.parameters, "input": tensor.parameters, "output": out.parameters}[where]
            target[key].string_param = "x"
            cases.append((where, key, r.SerializeToString()))
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        for where, key, body in cases:
            with pytest.raises(grpc.RpcError) as err:
                call(body, metadata=[("authorization", f"Bearer {TOKENS[0]}")], timeout=10)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and key in err.value.details(), (where, key)


def test_inference_header_length_is_checked_and_a_valid_binary_body_passes(bare_gateway):
    gateway, _, http_answer = bare_gateway
    header = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1],
                                     "parameters": {"binary_data_size": 5}}]}).encode()
    body = header + b"\x01\x00\x00\x00x"
    url = f"http://{gateway.http_url}/v2/models/m/infer"
    for declared, expected in (("abc", 400), ("-1", 400), (str(len(body) + 1), 400), ("0", 400),
                               (str(len(header) + 1), 400), (str(len(header)), 502)):
        request = urllib.request.Request(url, data=body, method="POST", headers={
            "Authorization": f"Bearer {TOKENS[0]}", "Inference-Header-Content-Length": declared})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(request, timeout=10)
        assert err.value.code == expected, (declared, err.value.read())
    # a valid JSON body and a valid generate body pass on (no upstream: 502)
    assert http_answer("POST", "/v2/models/m/infer")[0] == 502
    stream = "/v2/models/m/generate_stream"
    assert http_answer("POST", stream, b'{"TEXT": "hi", "parameters": {"x": 1}}')[0] == 502
    assert http_answer("POST", stream, b'{"TEXT": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")[0] == 400
    assert http_answer("POST", stream, b'{"K": 2}')[0] == 400   # required TEXT missing
    assert http_answer("POST", stream, b'{"TEXT": "hi", "parameters": {"sequence_id": -1}}')[0] == 400
