"""Slow and idle clients at the tenant gateway's public doors (hotpath.gateway.client_bounds), on a real
NGINX with no server behind it (a call passed on meets no upstream: gRPC UNAVAILABLE / HTTP 502): a
half-sent body holds no in-flight place and is cut after the body timeout; idle connections are closed
after the header and keepalive timeouts; a tenant over its bound on open requests is refused while another
is served. The timeouts are set to seconds here; NGINX's own defaults (60 s, 75 s) fail the bounds."""

import dataclasses
import json
import time
import urllib.error
import urllib.request

import crossplane
import grpc
import pytest
from tritonclient.grpc import service_pb2

from hotpath.gateway import client_bounds
from hotpath.gateway.config import GRPC_INFER, GRPC_STREAM, HTTP_STREAM, UNREACHABLE, TenantGatewaySettings
from hotpath.gateway.front_door import PublicModel
from hotpath.gateway.tenants import Tenant, new_token
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.server.ports import free_ports
from tests.slow_clients import HalfSent, hold

TOKENS = [new_token() for _ in range(2)]
TENANTS = (Tenant("alpha", TOKENS[0], 1000, 1000), Tenant("beta", TOKENS[1], 1000, 1000))
PUBLIC = (PublicModel("m", {"TEXT": ("BYTES", False)}, ("OUT",), 8, False),)
TIMEOUTS = {"HOTPATH_CLIENT_HEADER_TIMEOUT_SECS": "2", "HOTPATH_CLIENT_BODY_TIMEOUT_SECS": "2",
            "HOTPATH_KEEPALIVE_TIMEOUT_SECS": "3"}
RELEASED_WITHIN_S = 30   # generous on a busy host; NGINX's defaults would hold them 60-75 s
INFER_BODY = json.dumps({"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]}).encode()
OPENAI_BODY = json.dumps({"model": "m", "input": "x"}).encode()


def _infer_message() -> bytes:
    r = service_pb2.ModelInferRequest(model_name="m")
    r.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1]).contents.bytes_contents.append(b"x")
    return r.SerializeToString()


def _auth(tenant: int) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {TOKENS[tenant]}"),)


def _half_sent(door: str, tenant: int = 0) -> HalfSent:
    return {"http": HalfSent("/v2/models/m/infer", INFER_BODY, _auth(tenant)),
            "openai": HalfSent("/v1/embeddings", OPENAI_BODY, _auth(tenant)),
            "grpc": HalfSent(GRPC_INFER, _infer_message(), _auth(tenant), http2=True)}[door]


@pytest.fixture
def gateway(monkeypatch, request):
    """The gateway on loopback with short timeouts; `max_tenant_requests` from the test's parameter (0: default)."""
    for name, value in TIMEOUTS.items():
        monkeypatch.setenv(name, value)
    grpc_port, http_port, openai_port, *dead = free_ports(6)
    settings = TenantGatewaySettings(
        grpc_port, http_port, (f"127.0.0.1:{dead[0]}",), (f"127.0.0.1:{dead[1]}",), TENANTS, max_in_flight=2,
        models=PUBLIC, stream_port=dead[2], openai_port=openai_port, openai_upstreams=(f"127.0.0.1:{dead[1]}",),
        openai={"models": {"m": {"kind": "embedding", "default_max_tokens": 1}}},
        max_tenant_requests=getattr(request, "param", 0))
    with LocalNginx(settings) as nginx:
        yield nginx


def _ports(nginx: LocalNginx) -> dict[str, int]:
    s = nginx.settings
    return {"http": s.http_port, "openai": s.openai_port, "grpc": s.grpc_port}


def _call(nginx: LocalNginx, door: str, tenant: int = 0) -> tuple[int | str, str]:
    """One normal call: (HTTP status or gRPC status name, error message)."""
    if door == "grpc":
        with grpc.insecure_channel(nginx.grpc_url) as channel, pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(GRPC_INFER)(_infer_message(), metadata=_auth(tenant), timeout=20)
        return err.value.code().name, err.value.details()
    path, body = ("/v2/models/m/infer", INFER_BODY) if door == "http" else ("/v1/embeddings", OPENAI_BODY)
    port = _ports(nginx)[door]
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST",
                                     headers={"Authorization": f"Bearer {TOKENS[tenant]}"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(request, timeout=20)
    error = json.loads(err.value.read())["error"]
    return err.value.code, error if isinstance(error, str) else f"{error['code']}: {error['message']}"


PASSED_ON = {"http": (502, UNREACHABLE), "grpc": ("UNAVAILABLE", UNREACHABLE)}   # admitted: no upstream behind


def _passed_on(door: str, answer: tuple) -> bool:
    return answer == PASSED_ON[door] if door in PASSED_ON else answer[0] == 502


def test_every_public_server_bounds_slow_and_idle_clients(gateway):
    parsed = crossplane.parse(str(gateway.dir / "nginx.conf"), comments=False, single=True)["config"][0]["parsed"]
    (http,) = [d for d in parsed if d["directive"] == "http"]
    zones = [d["args"] for d in http["block"] if d["directive"] == "limit_conn_zone"]
    assert ["$hotpath_tenant", f"zone={client_bounds.ZONE}:1m"] in zones
    servers = {tuple(next(x["args"] for x in s["block"] if x["directive"] == "listen")): s["block"]
               for s in http["block"] if s["directive"] == "server"}
    ports = _ports(gateway)
    public = {door: servers[next(k for k in servers if k[0].endswith(f":{port}"))] for door, port in ports.items()}
    for door, block in public.items():
        got = {d["directive"]: d["args"] for d in block}
        assert got["client_header_timeout"] == ["2s"] and got["client_body_timeout"] == ["2s"], door
        assert got["send_timeout"] == ["2s"] and got["keepalive_timeout"] == ["3s"], door
        assert got["limit_conn"] == [client_bounds.ZONE, "64"] and got["limit_conn_status"] == ["429"]
    # Stream locations keep their own cap, refused 503 (not the tenant bound's 429); a gRPC stream may stay
    # silent as long as before.
    for door, uri in (("grpc", GRPC_STREAM), ("http", HTTP_STREAM)):
        (location,) = [d for d in public[door] if d["directive"] == "location" and d["args"][-1] == uri]
        got = {d["directive"]: d["args"] for d in location["block"]}
        assert got["limit_conn"][0] == "streams" and got["limit_conn_status"] == ["503"], door
        assert got.get("client_body_timeout") == (["60s"] if door == "grpc" else None)
    events = next(d for d in parsed if d["directive"] == "events")["block"]
    assert int(events[0]["args"][0]) >= 8192, "thousands of held connections need worker connections"


@pytest.mark.parametrize("door", ["http", "openai", "grpc"])
def test_a_half_sent_body_holds_no_in_flight_place_and_is_cut(gateway, door):
    """Three times the in-flight cap (2) of half-sent bodies: calls are still admitted (passed on, not
    refused at capacity), and the bodies are cut after the body timeout (NGINX logs 408)."""
    count = 6
    with hold("127.0.0.1", _ports(gateway)[door], half_sent=count, idle=0, request=_half_sent(door)) as held:
        answer = _call(gateway, door)
        assert held.counts()["half_sent"] == count, "the gateway no longer holds them: the test proves nothing"
        assert _passed_on(door, answer), answer
        assert held.wait_released(RELEASED_WITHIN_S) is not None, held.counts()
        assert held.counts()["answered"] == 0 or door == "grpc", "a half-sent body is cut, not answered"
    cut = [e for e in gateway.log(count=count + 1) if e.status == 408]
    assert len(cut) == count, [(e.uri, e.status) for e in gateway.log()]


@pytest.mark.parametrize("door", ["http", "openai", "grpc"])
def test_idle_connections_are_closed(gateway, door):
    """Connections that never send a request (HTTP/2: only the preface) go after the header timeout; one
    idle after a call goes after the keepalive timeout."""
    with hold("127.0.0.1", _ports(gateway)[door], half_sent=0, idle=20, http2=door == "grpc") as held:
        assert held.counts()["idle"] == 20
        assert held.wait_released(RELEASED_WITHIN_S) is not None, held.counts()
    # After one answered call the connection idles between requests: keepalive_timeout.
    with hold("127.0.0.1", _ports(gateway)[door], half_sent=1, idle=0, request=_whole(door)) as held:
        assert held.wait_released(RELEASED_WITHIN_S, kinds=("half_sent",)) is not None
        assert held.counts()["answered"] == 1, "the call was not answered"
        assert _settled(held, lambda c: c["closed"] == 1)["closed"] == 1, "an idle keepalive connection stayed open"


def _whole(door: str) -> HalfSent:
    return dataclasses.replace(_half_sent(door), sent=1)


def _settled(held, done, timeout_s: float = RELEASED_WITHIN_S) -> dict[str, int]:
    """The counts once `done(counts)` (NGINX answers after the client's send returned), or at the timeout."""
    start = time.monotonic()
    while not done(counts := held.counts()) and time.monotonic() - start < timeout_s:
        time.sleep(0.05)
    return counts


@pytest.mark.parametrize("gateway", [4], indirect=True)
@pytest.mark.parametrize("door", ["http", "openai", "grpc"])
def test_a_tenant_over_its_bound_is_refused_while_another_is_served(gateway, door):
    """alpha holds 4 half-sent bodies (its bound) on one door and a fifth and sixth are refused; alpha's
    next call is refused on every door (one bound across the doors), beta's is served."""
    with hold("127.0.0.1", _ports(gateway)[door], half_sent=6, idle=0, request=_half_sent(door)) as held:
        counts = _settled(held, lambda c: c["answered"] >= 2)
        assert counts["half_sent"] == 4 and counts["answered"] == 2, counts
        for other in ("http", "openai", "grpc"):
            status, message = _call(gateway, other, tenant=0)
            expected = {"grpc": "RESOURCE_EXHAUSTED", "http": 429, "openai": 429}[other]
            assert status == expected and "4 requests open" in message, (other, status, message)
            assert _passed_on(other, _call(gateway, other, tenant=1)), other
    assert not [e for e in gateway.log() if e.status == 429 and e.upstreams], "a refusal reached an upstream"
