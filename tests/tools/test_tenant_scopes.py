"""Tenant scopes: the tenants file's [tenants.<name>.scopes], every malformed one refused with the
tenant and key named; the warnings the gateway logs; and the gateway (real NGINX) in front of real loopback
servers that answer with what reached them: a call the scopes do not grant is PERMISSION_DENIED / 403 before
any upstream, and every call passed on carries the gateway's x-hotpath-tenant and x-hotpath-collection,
whatever a client sent under those names (any letter case) or as body parameters."""

import asyncio
import http.client
import http.server
import json
import threading
import tomllib
from concurrent import futures

import grpc
import pytest
from tritonclient.grpc import service_pb2

from hotpath.errors import HotpathError
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import (
    CHARGE_SOCKET,
    CONFIG_FILE,
    NO_CACHE_NAMESPACE,
    REFUSED_PARAMETERS,
    PublicModel,
    callable_names,
    scope_warnings,
)
from hotpath.gateway.streams import Charger
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import Scopes, Tenant, new_token, parse_tenants
from hotpath.runtime.tenancy import COLLECTION_HEADER, RESERVED, TENANT_HEADER
from hotpath.server.ports import free_ports
from hotpath.shared_state.cache_key import NAMESPACE_HEADER

TOKEN = new_token()


def _parse(scopes: str, name: str = "acme"):
    return parse_tenants(tomllib.loads(f'[tenants.{name}]\ntoken = "{TOKEN}"\n{scopes}\n'), "t.toml")


def test_scopes_parse():
    (acme,) = _parse('[tenants.acme.scopes]\nendpoints = ["text_embedding", "hotpath-embed"]\n'
                     'stores = { retrieval = "admin" }')
    assert acme.scopes == Scopes(("text_embedding", "hotpath-embed"), (("retrieval", "admin"),))
    assert acme.scopes.grants("text_embedding") and not acme.scopes.grants("image_classification")
    assert acme.scopes.store_level("retrieval") == "admin" and acme.scopes.store_level("other") is None
    (everything,) = _parse('scopes = { endpoints = ["*"] }')
    assert everything.scopes.grants("anything") and everything.scopes.stores == ()
    (nothing,) = _parse("[tenants.acme.scopes]")
    assert nothing.scopes == Scopes() and not nothing.scopes.grants("text_embedding")
    (legacy,) = _parse("")
    assert legacy.scopes is None


@pytest.mark.parametrize("scopes,fragment", [
    ('scopes = "all"', "tenants.acme.scopes must be a table"),
    ('scopes = ["text_embedding"]', "tenants.acme.scopes must be a table"),
    ('[tenants.acme.scopes]\nendpoint = ["text_embedding"]', "tenants.acme.scopes: unknown key(s) ['endpoint']"),
    ('[tenants.acme.scopes]\nendpoints = ["x"]\nmodels = ["y"]', "unknown key(s) ['models']"),
    ('[tenants.acme.scopes]\nendpoints = "text_embedding"', "tenants.acme.scopes.endpoints must be a list"),
    ('[tenants.acme.scopes]\nendpoints = "*"', "tenants.acme.scopes.endpoints must be a list"),
    ('[tenants.acme.scopes]\nendpoints = [1, 2]', "tenants.acme.scopes.endpoints must be a list"),
    ('[tenants.acme.scopes]\nendpoints = [""]', "tenants.acme.scopes.endpoints must be a list"),
    ('[tenants.acme.scopes]\nendpoints = { a = 1 }', "tenants.acme.scopes.endpoints must be a list"),
    ('[tenants.acme.scopes]\nstores = ["retrieval"]', "tenants.acme.scopes.stores must be a table"),
    ('[tenants.acme.scopes]\nstores = { retrieval = "owner" }', "tenants.acme.scopes.stores.retrieval must be one of"),
    ('[tenants.acme.scopes]\nstores = { retrieval = "WRITE" }', "tenants.acme.scopes.stores.retrieval must be one of"),
    ('[tenants.acme.scopes]\nstores = { retrieval = true }', "tenants.acme.scopes.stores.retrieval must be one of"),
    ('[tenants.acme.scopes]\nstores = { retrieval = { level = "read" } }', "stores.retrieval must be one of"),
    ('scope = { endpoints = ["*"] }', "tenants.acme: expected a table"),
])
def test_bad_scopes_name_the_tenant_and_the_key_never_the_token(scopes, fragment):
    with pytest.raises(HotpathError) as err:
        _parse(scopes)
    assert fragment in str(err.value) and TOKEN not in str(err.value), str(err.value)


@pytest.mark.parametrize("name", RESERVED)
def test_the_collections_names_are_no_tenants(name):
    with pytest.raises(HotpathError, match="tenant name"):
        _parse("", name)


STORE = PublicModel("store", {"TEXT": ("BYTES", False), "OP": ("BYTES", True), "ID": ("BYTES", True)},
                    ("IDS",), 8, False, cacheable=True, store=True)
PLAIN = PublicModel("m", {"TEXT": ("BYTES", False)}, ("OUT",), 8, False)
STREAMED = PublicModel("gen", {"TEXT": ("BYTES", False)}, ("OUT",), 0, True)
MODELS = (PLAIN, STORE, STREAMED)
OPENAI = {"models": {"hotpath-embed": {"kind": "embedding", "default_max_tokens": 1, "endpoint": "m"},
                     "hotpath-chat": {"kind": "generation", "default_max_tokens": 16, "endpoint": "gen"}}}


def _tenants(entries: dict) -> tuple[Tenant, ...]:
    return parse_tenants({"tenants": {n: {"token": TOKENS[n], **e} for n, e in entries.items()}}, "test")


TENANTS = {
    "alpha": {"scopes": {"endpoints": ["m", "gen"], "stores": {"store": "write"}}},
    "reader": {"scopes": {"endpoints": ["*"], "stores": {"store": "read"}}},
    "admin": {"scopes": {"endpoints": [], "stores": {"store": "admin"}}},
    "nobody": {"scopes": {}},
    "chatty": {"scopes": {"endpoints": ["hotpath-chat"]}, "cache_namespace": ""},
    "legacy": {},
}
TOKENS = {n: new_token() for n in (*TENANTS, "typo")}


def test_what_each_tenant_may_call():
    tenants = {t.name: t for t in _tenants(TENANTS)}

    def names(name):
        return callable_names(tenants[name], MODELS, OPENAI)

    assert names("alpha") == {"calls": {"m": "call", "gen": "call", "store": "write"},
                              "openai": {"hotpath-embed": True, "hotpath-chat": True}}   # by their endpoints
    assert names("reader") == {"calls": {"m": "call", "gen": "call", "store": "read"},
                               "openai": {"hotpath-embed": True, "hotpath-chat": True}}
    assert names("admin") == {"calls": {"store": "admin"}, "openai": {}}
    assert names("nobody") == {"calls": {}, "openai": {}}
    assert names("chatty") == {"calls": {}, "openai": {"hotpath-chat": True}}   # the OpenAI name only
    assert names("legacy") == {"calls": {"m": "call", "gen": "call", "store": "write"},
                               "openai": {"hotpath-embed": True, "hotpath-chat": True}}
    # "*" never grants a store
    star = Tenant("star", TOKEN, scopes=Scopes(("*",)))
    assert callable_names(star, MODELS, OPENAI)["calls"] == {"m": "call", "gen": "call"}


def test_warnings_name_unscoped_tenants_and_names_nothing_serves():
    tenants = _tenants({**TENANTS, "typo": {"scopes": {"endpoints": ["text_embeding", "store", "*"],
                                                      "stores": {"m": "read", "nope": "write"}}}})
    warnings = scope_warnings(tenants, MODELS, OPENAI)
    assert any("legacy" in w and "no [tenants.<name>.scopes]" in w for w in warnings), warnings
    assert not any("alpha" in w for w in warnings), warnings
    typo = [w for w in warnings if "tenants.typo" in w]
    assert len(typo) == 4, typo
    assert any("'text_embeding' is not served here" in w for w in typo)
    assert any("'store' is a store, callable only through scopes.stores" in w for w in typo)
    assert any("stores: 'm' is not a store endpoint" in w for w in typo)
    assert any("stores: 'nope' is not a store endpoint" in w for w in typo)
    # without the OpenAI door an OpenAI name is served by nothing here
    assert any("'hotpath-chat' is not served here" in w for w in scope_warnings(tenants, MODELS, None))
    assert scope_warnings(_tenants({"alpha": TENANTS["alpha"]}), MODELS, OPENAI) == []


def test_refused_parameters_include_the_gateways_headers_in_any_case():
    for key in ("x-hotpath-tenant", "X-Hotpath-Collection", "X-HOTPATH-TENANT", "x-hotpath-anything",
                "shared_memory_region", "classification"):
        assert key in REFUSED_PARAMETERS, key
    for key in ("x-hotpath", "hotpath-tenant", "sequence_id", "tenant", 5):
        assert key not in REFUSED_PARAMETERS, key
    assert json.loads(json.dumps(REFUSED_PARAMETERS)) == list(REFUSED_PARAMETERS)


def test_the_no_cache_namespace_is_the_apis_and_no_tenants():
    from hotpath.gateway.tenants import NAMESPACE_PATTERN
    from hotpath.openai_api.answer_cache import NO_CACHE_NAMESPACE as API_NO_CACHE

    assert NO_CACHE_NAMESPACE == API_NO_CACHE and not NAMESPACE_PATTERN.fullmatch(NO_CACHE_NAMESPACE)


# Real loopback servers standing in for the replicas: each answers with the headers that reached it.
class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        headers = [[k.lower(), v] for k, v in self.headers.items()]
        body = json.dumps({"path": self.path, "headers": headers}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


def _echo_grpc(port):
    """A gRPC server answering ModelInfer / ModelReady / ModelConfig with the metadata it got, as JSON in a
    ModelInferResponse's model_name (the raw bytes: no schema for the others)."""
    def answer(request, context):
        metadata = [[k, v] for k, v in context.invocation_metadata()]
        return service_pb2.ModelInferResponse(model_name=json.dumps(metadata)).SerializeToString()

    methods = {m: grpc.unary_unary_rpc_method_handler(answer) for m in ("ModelInfer", "ModelReady", "ModelConfig",
                                                                        "ModelMetadata", "ServerReady")}
    server = grpc.server(futures.ThreadPoolExecutor(4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("inference.GRPCInferenceService",
                                                                          methods),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


@pytest.fixture(scope="module")
def echo_gateway():
    grpc_port, http_port, openai_port, up_grpc, up_http, up_openai = free_ports(6)
    servers = [http.server.ThreadingHTTPServer(("127.0.0.1", p), _Echo) for p in (up_http, up_openai)]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    grpc_server = _echo_grpc(up_grpc)
    settings = TenantGatewaySettings(grpc_port, http_port, (f"127.0.0.1:{up_grpc}",), (f"127.0.0.1:{up_http}",),
                                     _tenants(TENANTS), models=MODELS, openai_port=openai_port,
                                     openai_upstreams=(f"127.0.0.1:{up_openai}",), openai=OPENAI)
    try:
        with TenantGateway(settings) as gateway:
            yield gateway
    finally:
        grpc_server.stop(0)
        for s in servers:
            s.shutdown()
            s.server_close()


def _infer_message(model="m", op=False, parameters=None, where="request"):
    r = service_pb2.ModelInferRequest(model_name=model)
    tensor = r.inputs.add(name="TEXT", datatype="BYTES", shape=[1, 1])
    out = r.outputs.add(name="OUT")
    if op:
        r.inputs.add(name="OP", datatype="BYTES", shape=[1, 1])
    for key, value in (parameters or {}).items():
        target = {"request": r.parameters, "input": tensor.parameters, "output": out.parameters}[where]
        target[key].string_param = value
    return r.SerializeToString()


def _grpc(gateway, tenant, body, method="ModelInfer", metadata=()):
    """("OK", the metadata that reached the replica) or (status name, message)."""
    with grpc.insecure_channel(gateway.grpc_url) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}")
        try:
            raw = call(body, metadata=[("authorization", f"Bearer {TOKENS[tenant]}"), *metadata], timeout=10)
        except grpc.RpcError as exc:
            return exc.code().name, exc.details()
    return "OK", json.loads(service_pb2.ModelInferResponse.FromString(raw).model_name)


def _named(model):
    return b"\x0a" + bytes([len(model)]) + model.encode()


def _http(url, tenant, path, body=None, headers=()):
    """(status, JSON answer); headers: pairs sent as given, so a name may come twice, in any letter case."""
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.putrequest("POST" if body is not None else "GET", path)
        data = b"" if body is None else json.dumps(body).encode()
        for k, v in [("Authorization", f"Bearer {TOKENS[tenant]}"), ("Content-Length", str(len(data))),
                     *headers]:
            conn.putheader(k, v)
        conn.endheaders(data)
        r = conn.getresponse()
        return r.status, json.loads(r.read())
    finally:
        conn.close()


def _values(pairs, name):
    return [v for k, v in pairs if k.lower() == name]


def _infer_body(op=None, parameters=None):
    inputs = [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]
    if op:
        inputs.append({"name": "OP", "datatype": "BYTES", "shape": [1, 1], "data": [op]})
    return {"inputs": inputs, **({"parameters": parameters} if parameters else {})}


def test_grpc_calls_outside_the_scopes_are_permission_denied(echo_gateway):
    gw = echo_gateway
    denied = "PERMISSION_DENIED"
    assert _grpc(gw, "nobody", _infer_message())[0] == denied
    assert _grpc(gw, "admin", _infer_message())[0] == denied            # a store scope grants no endpoint
    for method in ("ModelReady", "ModelConfig", "ModelMetadata"):
        assert _grpc(gw, "nobody", _named("m"), method)[0] == denied, method
        assert _grpc(gw, "alpha", _named("m"), method)[0] == "OK", method
    assert _grpc(gw, "alpha", _infer_message())[0] == "OK"
    # a store only through `stores`; "read" may search (no OP input) and nothing more
    assert _grpc(gw, "reader", _infer_message("store"))[0] == "OK"
    status, message = _grpc(gw, "reader", _infer_message("store", op=True))
    assert status == denied and "may only search" in message, message
    assert _grpc(gw, "alpha", _infer_message("store", op=True))[0] == "OK"
    assert _grpc(gw, "nobody", _infer_message("store"))[0] == denied
    # an unknown model stays NOT_FOUND, naming only what the tenant may call
    status, message = _grpc(gw, "admin", _infer_message("nope"))
    assert status == "NOT_FOUND" and message.endswith("public endpoints: store"), message
    assert _grpc(gw, "legacy", _infer_message("store", op=True))[0] == "OK"   # no scopes: as before
    refused = [e for e in gw.log() if e.grpc_status == "7"]
    assert refused and not [e for e in refused if e.upstream], "a refused call reached a replica"


def test_http_calls_outside_the_scopes_are_403(echo_gateway):
    gw = echo_gateway
    for path in ("/v2/models/m", "/v2/models/m/ready", "/v2/models/m/config", "/v2/models/m/versions/1"):
        status, answer = _http(gw.http_url, "nobody", path)
        assert status == 403 and "do not grant 'm'" in answer["error"], (path, status, answer)
        assert _http(gw.http_url, "alpha", path)[0] == 200, path
    assert _http(gw.http_url, "nobody", "/v2/models/m/infer", _infer_body())[0] == 403
    assert _http(gw.http_url, "alpha", "/v2/models/m/infer", _infer_body())[0] == 200
    assert _http(gw.http_url, "nobody", "/v2/models/gen/generate_stream", {"TEXT": "x"})[0] == 403
    assert _http(gw.http_url, "alpha", "/v2/models/gen/generate_stream", {"TEXT": "x"})[0] == 200
    assert _http(gw.http_url, "reader", "/v2/models/store/infer", _infer_body())[0] == 200
    assert _http(gw.http_url, "reader", "/v2/models/store/infer", _infer_body("search"))[0] == 200
    status, answer = _http(gw.http_url, "reader", "/v2/models/store/infer", _infer_body("upsert"))
    assert status == 403 and "may only search" in answer["error"], answer
    assert _http(gw.http_url, "alpha", "/v2/models/store/infer", _infer_body("delete"))[0] == 200
    assert _http(gw.http_url, "alpha", "/v2/health/ready")[0] == 200      # no model named: every tenant
    assert _http(gw.http_url, "nobody", "/v2")[0] == 200


def test_stream_messages_are_charged_only_when_granted(echo_gateway):
    gw = echo_gateway
    charger = Charger(gw.nginx.dir / CHARGE_SOCKET, gw.settings.charge_key)
    refused = asyncio.run(charger("nobody", "gen", 1))
    assert refused and refused[0] == "PERMISSION_DENIED", refused
    assert asyncio.run(charger("alpha", "gen", 1)) is None


def test_openai_door_refuses_ungranted_models_in_the_openai_shape(echo_gateway):
    gw = echo_gateway
    url = f"127.0.0.1:{gw.settings.openai_port}"
    status, answer = _http(url, "alpha", "/v1/embeddings", {"model": "hotpath-embed", "input": "x"})
    assert status == 200, answer
    for tenant, model, path in (("chatty", "hotpath-embed", "/v1/embeddings"),
                                ("admin", "hotpath-chat", "/v1/chat/completions")):
        body = {"model": model, "input": "x"} if "embed" in path else {"model": model, "messages": []}
        status, answer = _http(url, tenant, path, body)
        assert status == 403, (tenant, model, answer)
        error = answer["error"]
        assert (error["type"], error["param"], error["code"]) == ("permission_error", "model", "permission_denied")
        assert model in error["message"]
    assert _http(url, "chatty", "/v1/models/hotpath-embed")[0] == 403
    assert _http(url, "chatty", "/v1/models/hotpath-chat")[0] == 200
    assert _http(url, "chatty", "/v1/models/not-served")[0] == 200   # the API's own answer (a 404 there)
    assert _http(url, "chatty", "/v1/models")[0] == 200


SPOOFS = [("X-Hotpath-Tenant", "beta"), ("x-hotpath-collection", "shared"), ("X-HOTPATH-TENANT", "shared"),
          ("X-Hotpath-Collection", "beta"), (NAMESPACE_HEADER, "alpha"), (NAMESPACE_HEADER.upper(), "beta")]


def test_http_upstreams_get_the_gateways_tenant_and_collection_only(echo_gateway):
    gw = echo_gateway
    cases = [("alpha", "/v2/models/m/infer", _infer_body(), "alpha"),
             ("alpha", "/v2/models/store/infer", _infer_body("upsert"), "alpha"),
             ("reader", "/v2/models/store/infer", _infer_body(), "reader"),
             ("admin", "/v2/models/store/infer", _infer_body("upsert"), "shared"),   # admin: the shared corpus
             ("alpha", "/v2/models/gen/generate_stream", {"TEXT": "x"}, "alpha"),
             ("legacy", "/v2/models/store/infer", _infer_body("delete"), "legacy"),
             ("nobody", "/v2/health/ready", None, "nobody"),
             ("alpha", "/v2/models/m/config", None, "alpha")]
    for tenant, path, body, collection in cases:
        for spoof in ([], SPOOFS, SPOOFS[1::2], SPOOFS[::-1]):
            status, answer = _http(gw.http_url, tenant, path, body, spoof)
            assert status == 200, (tenant, path, answer)
            got = answer["headers"]
            assert _values(got, TENANT_HEADER) == [tenant], (tenant, path, spoof, got)
            assert _values(got, COLLECTION_HEADER) == [collection], (tenant, path, spoof, got)
            assert _values(got, NAMESPACE_HEADER.lower()) == [], (tenant, path, got)   # only the OpenAI door's


def test_grpc_upstreams_get_the_gateways_tenant_and_collection_only(echo_gateway):
    gw = echo_gateway
    spoofs = [("x-hotpath-tenant", "beta"), ("x-hotpath-collection", "shared")]
    for tenant, body, method, collection in (("alpha", _infer_message(), "ModelInfer", "alpha"),
                                             ("alpha", _infer_message("store", op=True), "ModelInfer", "alpha"),
                                             ("admin", _infer_message("store", op=True), "ModelInfer", "shared"),
                                             ("reader", _infer_message("store"), "ModelInfer", "reader"),
                                             ("alpha", _named("m"), "ModelConfig", "alpha"),
                                             ("nobody", b"", "ServerReady", "nobody")):
        for metadata in ([], spoofs, spoofs * 2):
            status, got = _grpc(gw, tenant, body, method, metadata)
            assert status == "OK", (tenant, method, got)
            assert _values(got, TENANT_HEADER) == [tenant], (tenant, method, metadata, got)
            assert _values(got, COLLECTION_HEADER) == [collection], (tenant, method, metadata, got)


def test_the_openai_api_gets_the_gateways_headers_and_namespace_only(echo_gateway):
    gw = echo_gateway
    url = f"127.0.0.1:{gw.settings.openai_port}"
    for tenant, model, path, namespace in (("alpha", "hotpath-embed", "/v1/embeddings", "alpha"),
                                           ("chatty", "hotpath-chat", "/v1/chat/completions", NO_CACHE_NAMESPACE)):
        body = {"model": model, "input": "x"} if "embed" in path else {"model": model, "messages": []}
        for spoof in ([], SPOOFS):
            status, answer = _http(url, tenant, path, body, spoof)
            assert status == 200, answer
            got = answer["headers"]
            assert _values(got, TENANT_HEADER) == [tenant], got
            assert _values(got, COLLECTION_HEADER) == [tenant], got
            assert _values(got, NAMESPACE_HEADER.lower()) == [namespace], got


@pytest.mark.parametrize("key", ["x-hotpath-tenant", "X-Hotpath-Collection", "X-HOTPATH-TENANT", "x-hotpath-other"])
def test_body_parameters_named_like_the_gateways_headers_are_refused(echo_gateway, key):
    gw = echo_gateway
    for where in ("request", "input", "output"):
        status, message = _grpc(gw, "alpha", _infer_message(parameters={key: "beta"}, where=where))
        assert status == "INVALID_ARGUMENT" and key in message, (where, status, message)
    body = _infer_body(parameters={key: "beta"})
    status, answer = _http(gw.http_url, "alpha", "/v2/models/m/infer", body)
    assert status == 400 and key in answer["error"], answer
    body = _infer_body()
    body["inputs"][0]["parameters"] = {key: "beta"}
    assert _http(gw.http_url, "alpha", "/v2/models/m/infer", body)[0] == 400
    body = {"inputs": _infer_body()["inputs"], "outputs": [{"name": "OUT", "parameters": {key: "shared"}}]}
    assert _http(gw.http_url, "alpha", "/v2/models/m/infer", body)[0] == 400
    status, answer = _http(gw.http_url, "alpha", "/v2/models/gen/generate_stream",
                           {"TEXT": "x", "parameters": {key: "beta"}})
    assert status == 400 and key in answer["error"], answer
    assert not [e for e in gw.log() if e.status == 400 and e.upstream]


def test_front_door_json_carries_each_tenants_grants(echo_gateway):
    door = json.loads((echo_gateway.nginx.dir / CONFIG_FILE).read_text())
    assert door["tenants"]["admin"]["calls"] == {"store": "admin"}
    assert door["tenants"]["admin"]["public_list"] == "store"
    assert door["tenants"]["nobody"]["public_list"] == "none"
    assert door["shared_collection"] == "shared" and door["collection_variable"] == "hotpath_collection"
