"""Each tenant sees only what is its own, tried as an attacker through the real gateway (NGINX,
hotpath.gateway) in front of a real tritonserver, the real OpenAI API and a real redis-server:

- a call outside the tenant's scopes is PERMISSION_DENIED / 403 on every door (gRPC, HTTP, HTTP
  generate_stream, gRPC stream messages, the OpenAI door), before any model runs;
- the tenant and collection a model sees are the gateway's, whatever a client sent as headers (any letter
  case, twice) — a model in this file (tenant_echo) answers with the request parameters Triton gave it;
- body parameters named x-hotpath-* are refused (400 / INVALID_ARGUMENT);
- the exact cache (gateway) and the answer cache (OpenAI API) never answer one tenant with another's entry;
- retrieval: what alpha writes beta never reads, deletes or replaces, and a write by one tenant leaves the
  others' cached searches alone (hotpath/retrieval: collections per tenant, "shared" for an admin).
"""

import contextlib
import http.client
import json
import os
import queue
import time

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath.client import RetrievalClient, text_input
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import public_models
from hotpath.gateway.openai_door import openai_config
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import new_token, parse_tenants
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.runtime.tenancy import COLLECTION_HEADER, TENANT_HEADER
from hotpath.server.ports import free_ports
from hotpath.server.subset import linked
from hotpath.shared_state.cache_key import HIT_HEADER, NAMESPACE_HEADER, STORE_VERSION_PREFIX, repository_build
from hotpath.shared_state.server import LocalRedis
from hotpath.specs.repository import Repository
from tests.transcript import Transcript

EMBED, STORE, ECHO, ECHO_STREAM = "text_embedding", "retrieval", "tenant_echo", "tenant_echo_stream"

ECHO_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: {batch}
{policy}
input [ {{ name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] }}{extra} ]
output [ {{ name: "PARAMS" data_type: TYPE_STRING dims: [ 1 ] }} ]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""
# Answers with the request's parameters as Triton gave them (JSON text): what the gateway let through.
ECHO_MODEL = '''
import numpy as np
import triton_python_backend_utils as pb_utils

DECOUPLED = {decoupled}


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            shape = pb_utils.get_input_tensor_by_name(r, "TEXT").as_numpy().shape
            params = np.full(shape, r.parameters().encode(), dtype=np.object_)
            response = pb_utils.InferenceResponse([pb_utils.Tensor("PARAMS", params)])
            if DECOUPLED:
                sender = r.get_response_sender()
                sender.send(response)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            else:
                out.append(response)
        return None if DECOUPLED else out
'''

TENANTS = {
    "alpha": {"scopes": {"endpoints": ["*"], "stores": {STORE: "write"}}},
    "beta": {"scopes": {"endpoints": ["*"], "stores": {STORE: "write"}}},
    "reader": {"scopes": {"endpoints": [ECHO], "stores": {STORE: "read"}}},
    "admin": {"scopes": {"stores": {STORE: "admin"}}},
    "outsider": {"scopes": {"endpoints": []}},
    # one namespace: they share cached answers of plain endpoints, never of a store
    "team1": {"cache_namespace": "team", "scopes": {"endpoints": ["*"], "stores": {STORE: "write"}}},
    "team2": {"cache_namespace": "team", "scopes": {"endpoints": ["*"], "stores": {STORE: "write"}}},
    # nothing cached for either: the API must not pool them under its own namespace
    "quiet1": {"cache_namespace": "", "scopes": {"endpoints": [EMBED]}},
    "quiet2": {"cache_namespace": "", "scopes": {"endpoints": [EMBED]}},
}
TOKENS = {name: new_token() for name in TENANTS}
SEEN = Transcript("tenant_isolation", "Cross-tenant attempts through the gateway, and what each got",
                  ("path", "tenant tried", "answer"))


@pytest.fixture(scope="module", autouse=True)
def _transcript():
    yield
    SEEN.write("tests/integration/test_tenant_isolation.py")


def _bearer(tenant):
    return {"authorization": f"Bearer {TOKENS[tenant]}"}


@pytest.fixture(scope="module")
def repository(built_repository, tmp_path_factory):
    target = linked((EMBED, "sentence_embedder", STORE), tmp_path_factory.mktemp("isolation"), built_repository)
    for name, decoupled in ((ECHO, False), (ECHO_STREAM, True)):
        (target / name / "1").mkdir(parents=True)
        policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
        # the stream stand-in takes text_generation's token-count flag, which the stream admission sets
        extra = ', { name: "return_num_output_tokens" data_type: TYPE_BOOL dims: [ 1 ] optional: true }' \
            if decoupled else ""
        (target / name / "config.pbtxt").write_text(ECHO_CONFIG.format(name=name, batch=0 if decoupled else 8,
                                                                       policy=policy, extra=extra))
        (target / name / "1" / "model.py").write_text(ECHO_MODEL.format(decoupled=decoupled))
    return target


@pytest.fixture(scope="module")
def stack(repository):
    """tritonserver, the OpenAI API and the gateway (exact cache on), sharing one redis-server."""
    from conftest import _serve

    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(LocalRedis())
        triton = _serve(repository, log=lambda m: None)
        triton.start()
        stack.callback(triton.stop)
        env = {**os.environ, "HOTPATH_REDIS_URL": redis.target.url}
        api = stack.enter_context(OpenAIServer(triton.grpc_url, free_ports(1)[0], repository, env=env))
        tenants = parse_tenants({"tenants": {n: {"token": TOKENS[n], **t} for n, t in TENANTS.items()}}, "test")
        grpc_port, http_port, openai_port = free_ports(3)
        served = Repository(repository)
        settings = TenantGatewaySettings(
            grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), tenants, max_streams=4,
            models=public_models(served), redis=redis.target, cache_build=repository_build(served),
            openai_port=openai_port, openai_upstreams=(f"{api.host}:{api.port}",), openai=openai_config(repository))
        gateway = stack.enter_context(TenantGateway(settings))
        yield gateway, triton, api, redis


def _request(host_port, method, path, tenant, body=None, headers=()):
    """(status, {header: value}, body bytes); `headers` are pairs sent as given (a name twice, any case)."""
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        data = b"" if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        conn.putrequest(method, path)
        for k, v in [("Authorization", f"Bearer {TOKENS[tenant]}"), ("Content-Type", "application/json"),
                     ("Content-Length", str(len(data))), *headers]:
            conn.putheader(k, v)
        conn.endheaders(data)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _kserve(name, text, **extra):
    return {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [text]}], **extra}


def _pairs(params_json: str) -> list[tuple[str, object]]:
    return [(k.lower(), v) for k, v in json.loads(params_json or "{}", object_pairs_hook=lambda p: p)]


def _tenancy(pairs):
    return ([v for k, v in pairs if k == TENANT_HEADER], [v for k, v in pairs if k == COLLECTION_HEADER])


def _grpc_status(url, model, inputs, tenant, headers=None, parameters=None):
    with grpcclient.InferenceServerClient(url) as client:
        try:
            result = client.infer(model, inputs, headers={**_bearer(tenant), **(headers or {})}, parameters=parameters)
            return "OK", result
        except InferenceServerException as exc:
            return str(exc.status()).removeprefix("StatusCode."), exc.message()


def _stream(url, model, tenant, text="x", headers=None, parameters=None):
    """The results (or errors) of one stream message."""
    answers = queue.Queue()
    client = grpcclient.InferenceServerClient(url)
    try:
        client.start_stream(lambda result, error: answers.put(error or result),
                            headers={**_bearer(tenant), **(headers or {})})
        tensor = grpcclient.InferInput("TEXT", [1], "BYTES")   # tenant_echo_stream: not batched
        tensor.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
        client.async_stream_infer(model, [tensor], parameters=parameters)
        return answers.get(timeout=60)
    finally:
        client.stop_stream()
        client.close()


SPOOF_HTTP = [("X-Hotpath-Tenant", "beta"), ("x-hotpath-collection", "shared"), ("X-HOTPATH-TENANT", "local"),
              ("X-Hotpath-Collection", "beta")]
SPOOF_GRPC = {"x-hotpath-tenant": "beta", "x-hotpath-collection": "shared"}


# -- scopes ---------------------------------------------------------------------------------------------

def test_a_tenant_without_the_scope_is_denied_on_every_door(stack):
    gw, _, _, _ = stack
    inputs = [text_input("TEXT", ["who may call this"])]
    status, message = _grpc_status(gw.grpc_url, EMBED, inputs, "outsider")
    assert status == "PERMISSION_DENIED" and EMBED in message, (status, message)
    SEEN.row("gRPC infer", f"outsider (no endpoint) calls {EMBED}", f"{status}: {message}")
    status, message = _grpc_status(gw.grpc_url, EMBED, inputs, "reader")
    assert status == "PERMISSION_DENIED", (status, message)
    SEEN.row("gRPC infer", f"reader (scope {ECHO} only) calls {EMBED}", f"{status}: {message}")
    with grpcclient.InferenceServerClient(gw.grpc_url) as client:
        for call in (client.is_model_ready, client.get_model_config, client.get_model_metadata):
            with pytest.raises(InferenceServerException) as refused:
                call(EMBED, headers=_bearer("outsider"))
            assert "PERMISSION_DENIED" in str(refused.value.status()), call
            SEEN.row("gRPC metadata", f"outsider asks {call.__name__}({EMBED})", refused.value.status())
        assert client.get_model_config(EMBED, headers=_bearer("alpha")).config.name == EMBED
    for path in (f"/v2/models/{EMBED}", f"/v2/models/{EMBED}/ready", f"/v2/models/{EMBED}/config"):
        status, _, body = _request(gw.http_url, "GET", path, "outsider")
        assert status == 403 and "do not grant" in json.loads(body)["error"], (path, status, body)
        SEEN.row("HTTP GET", f"outsider reads {path}", f"{status} {json.loads(body)['error']}")
    status, _, body = _request(gw.http_url, "POST", f"/v2/models/{EMBED}/infer", "outsider", _kserve(EMBED, "x"))
    assert status == 403, body
    SEEN.row("HTTP infer", f"outsider posts to {EMBED}", f"{status} {body.decode()}")
    status, _, body = _request(gw.http_url, "POST", f"/v2/models/{ECHO_STREAM}/generate_stream", "outsider",
                               {"TEXT": "x"})
    assert status == 403, body
    SEEN.row("HTTP generate_stream", f"outsider streams {ECHO_STREAM}", f"{status} {body.decode()}")
    answer = _stream(gw.grpc_url, ECHO_STREAM, "outsider")
    assert isinstance(answer, InferenceServerException) and "PERMISSION_DENIED" in str(answer), answer
    SEEN.row("gRPC stream message", f"outsider sends a message to {ECHO_STREAM}", answer)
    # the OpenAI door: the OpenAI error shape
    status, _, body = _request(f"127.0.0.1:{gw.settings.openai_port}", "POST", "/v1/embeddings", "outsider",
                               {"model": EMBED, "input": "x"})
    error = json.loads(body)["error"]
    assert status == 403 and (error["type"], error["param"], error["code"]) == \
        ("permission_error", "model", "permission_denied"), body
    SEEN.row("OpenAI /v1/embeddings", f"outsider asks model {EMBED}", f"{status} {body.decode()}")
    # a store only through `stores`, a read scope only searches
    status, message = _grpc_status(gw.grpc_url, STORE, inputs, "outsider")
    assert status == "PERMISSION_DENIED", message
    SEEN.row("gRPC retrieval", "outsider (no store scope) searches", f"{status}: {message}")
    with RetrievalClient(gw.grpc_url, token=TOKENS["reader"]) as rc:
        hits = rc.search(["anything at all"], k=1)
        SEEN.row("gRPC retrieval", "reader (read scope) searches", f"OK, {len(hits[0])} hit")
        for op, call in (("upsert", lambda: rc.upsert(["reader-doc"], ["a reader may not write"])),
                         ("delete", lambda: rc.delete(["reader-doc"]))):
            with pytest.raises(Exception, match="PERMISSION_DENIED|may only search") as refused:
                call()
            SEEN.row("gRPC retrieval", f"reader (read scope) tries {op}", refused.value)
    delete = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [""]},
                         {"name": "OP", "datatype": "BYTES", "shape": [1, 1], "data": ["delete"]},
                         {"name": "ID", "datatype": "BYTES", "shape": [1, 1], "data": ["x"]}]}
    status, _, body = _request(gw.http_url, "POST", f"/v2/models/{STORE}/infer", "reader", delete)
    assert status == 403 and "may only search" in json.loads(body)["error"], body
    SEEN.row("HTTP retrieval", "reader (read scope) posts OP=delete", f"{status} {json.loads(body)['error']}")
    refused = [e for e in gw.log() if e.tenant in ("outsider", "reader") and (e.status == 403 or e.grpc_status == "7")]
    assert refused and not [e for e in refused if e.upstream], "a refused call reached a replica"
    SEEN.row("gateway access log", "every refusal above", f"{len(refused)} refused, 0 reached a replica")


# -- the tenant and collection a model sees -------------------------------------------------------------

def test_a_client_sent_tenant_or_collection_never_reaches_the_model(stack):
    gw, _, _, _ = stack
    for headers in (None, SPOOF_GRPC):
        status, result = _grpc_status(gw.grpc_url, ECHO, [text_input("TEXT", ["x"])], "alpha", headers)
        assert status == "OK", result
        pairs = _pairs(result.as_numpy("PARAMS")[0][0].decode())
        assert _tenancy(pairs) == (["alpha"], ["alpha"]), pairs
        SEEN.row("gRPC infer", f"alpha sends headers {headers}", f"model saw tenant, collection {_tenancy(pairs)}")
    for headers in ((), SPOOF_HTTP, SPOOF_HTTP[::-1] + SPOOF_HTTP):
        status, _, body = _request(gw.http_url, "POST", f"/v2/models/{ECHO}/infer", "beta", _kserve(ECHO, "x"),
                                   headers)
        assert status == 200, body
        pairs = _pairs(json.loads(body)["outputs"][0]["data"][0])
        assert _tenancy(pairs) == (["beta"], ["beta"]), (headers, pairs)
        SEEN.row("HTTP infer", f"beta sends headers {list(headers)}", f"model saw {_tenancy(pairs)}")
        status, _, body = _request(gw.http_url, "POST", f"/v2/models/{ECHO_STREAM}/generate_stream", "alpha",
                                   {"TEXT": "x"}, headers)
        assert status == 200, body
        event = json.loads(body.decode().split("data:", 1)[1].strip().splitlines()[0])
        assert _tenancy(_pairs(event["PARAMS"])) == (["alpha"], ["alpha"]), (headers, event)
        SEEN.row("HTTP generate_stream", f"alpha sends headers {list(headers)}",
                 f"model saw {_tenancy(_pairs(event['PARAMS']))}")


def test_a_stream_message_reaches_the_model_with_the_gateways_tenant(stack):
    gw, _, _, _ = stack
    for headers in (None, SPOOF_GRPC):
        answer = _stream(gw.grpc_url, ECHO_STREAM, "beta", headers=headers)
        assert not isinstance(answer, Exception), str(answer)
        pairs = _pairs(answer.as_numpy("PARAMS")[0].decode())
        assert _tenancy(pairs) == (["beta"], ["beta"]), (headers, pairs)
        SEEN.row("gRPC stream message", f"beta sends headers {headers}", f"model saw {_tenancy(pairs)}")


@pytest.mark.parametrize("key", ["x-hotpath-tenant", "X-Hotpath-Collection", "X-HOTPATH-TENANT"])
def test_body_parameters_named_x_hotpath_are_refused(stack, key):
    gw, _, _, _ = stack
    status, message = _grpc_status(gw.grpc_url, ECHO, [text_input("TEXT", ["x"])], "alpha",
                                   parameters={key: "beta"})
    assert status == "INVALID_ARGUMENT" and key in message, (status, message)
    SEEN.row("gRPC infer", f"alpha sends body parameter {key}=beta", f"{status}: {message}")
    status, _, body = _request(gw.http_url, "POST", f"/v2/models/{ECHO}/infer", "alpha",
                               _kserve(ECHO, "x", parameters={key: "beta"}))
    assert status == 400 and key in json.loads(body)["error"], body
    SEEN.row("HTTP infer", f"alpha sends body parameter {key}=beta", f"{status} {json.loads(body)['error']}")
    status, _, body = _request(gw.http_url, "POST", f"/v2/models/{ECHO_STREAM}/generate_stream", "alpha",
                               {"TEXT": "x", "parameters": {key: "shared"}})
    assert status == 400, body
    SEEN.row("HTTP generate_stream", f"alpha sends parameter {key}=shared", f"{status} {body.decode()}")
    answer = _stream(gw.grpc_url, ECHO_STREAM, "alpha", parameters={key: "beta"})
    assert isinstance(answer, InferenceServerException) and "INVALID_ARGUMENT" in str(answer), answer
    SEEN.row("gRPC stream message", f"alpha sends parameter {key}=beta", answer)


# -- caches ---------------------------------------------------------------------------------------------

def _wait(check, what, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for: {what}")
        time.sleep(0.05)


def _embed_http(gw, tenant, text, headers=()):
    status, got, body = _request(gw.http_url, "POST", f"/v2/models/{EMBED}/infer", tenant, _kserve(EMBED, text),
                                 headers)
    assert status == 200, body
    return got.get(HIT_HEADER.lower()), body


def _cached(gw, tenant, text, expect="hit"):
    """Repeat until the answer stored after the first call is served (the store runs after the answer)."""
    deadline = time.monotonic() + 30
    while True:
        hit, body = _embed_http(gw, tenant, text)
        if hit == expect or time.monotonic() > deadline:
            return hit, body
        time.sleep(0.1)


def test_the_exact_cache_never_answers_one_tenant_from_anothers_entry(stack):
    gw, _, _, _ = stack
    text = f"cache isolation {time.time_ns()}"
    assert _embed_http(gw, "alpha", text)[0] == "miss"
    assert _cached(gw, "alpha", text)[0] == "hit"
    # beta asks the same, byte for byte, even naming alpha's namespace: computed for beta
    hit = _embed_http(gw, "beta", text, [(NAMESPACE_HEADER, "alpha"), ("X-Hotpath-Tenant", "alpha")])[0]
    assert hit == "miss", hit
    SEEN.row("exact cache (HTTP)", "beta repeats alpha's cached request, naming alpha's namespace and tenant",
             f"cache {hit}: computed for beta")
    # tenants that chose one namespace share plain endpoints' answers
    text = f"team cache {time.time_ns()}"
    assert _embed_http(gw, "team1", text)[0] == "miss"
    assert _cached(gw, "team2", text)[0] == "hit"


def test_the_openai_answer_cache_never_crosses_tenants(stack):
    gw, _, _, _ = stack
    door = f"127.0.0.1:{gw.settings.openai_port}"

    def embed(tenant, text, headers=()):
        status, got, body = _request(door, "POST", "/v1/embeddings", tenant, {"model": EMBED, "input": text}, headers)
        assert status == 200, body
        return got.get(HIT_HEADER.lower())

    def until_hit(tenant, text):
        deadline = time.monotonic() + 30
        while (hit := embed(tenant, text)) != "hit" and time.monotonic() < deadline:
            time.sleep(0.1)
        return hit

    text = f"openai isolation {time.time_ns()}"
    assert embed("alpha", text) == "miss"
    assert until_hit("alpha", text) == "hit"
    hit = embed("beta", text, [(NAMESPACE_HEADER, "alpha"), (NAMESPACE_HEADER.lower(), "alpha")])
    assert hit == "miss", hit
    SEEN.row("OpenAI answer cache", "beta repeats alpha's cached /v1/embeddings, naming alpha's namespace twice",
             f"cache {hit}")
    # tenants that cache nothing: never a hit, not from each other either
    text = f"quiet {time.time_ns()}"
    answers = []
    for tenant in ("quiet1", "quiet2", "quiet1", "quiet2"):
        answers.append(embed(tenant, text, [(NAMESPACE_HEADER, "quiet1")]))
        assert answers[-1] != "hit", tenant
        time.sleep(0.2)
    SEEN.row("OpenAI answer cache", "two tenants without a cache namespace repeat one request 4 times",
             f"cache {answers}")


# -- retrieval: collections per tenant ------------------------------------------------------------------

def _search(gw, tenant, query, k=5):
    body = {"inputs": [{"name": "TEXT", "datatype": "BYTES", "shape": [1, 1], "data": [query]},
                       {"name": "TOP_K", "datatype": "INT64", "shape": [1, 1], "data": [k]}]}
    status, got, answer = _request(gw.http_url, "POST", f"/v2/models/{STORE}/infer", tenant, body)
    assert status == 200, answer
    outputs = {o["name"]: o["data"] for o in json.loads(answer)["outputs"]}
    return got.get(HIT_HEADER.lower()), dict(zip(outputs["IDS"], outputs["DOCUMENTS"]))


def _grpc_search(gw, tenant, query):
    with RetrievalClient(gw.grpc_url, token=TOKENS[tenant]) as rc:
        return {h.id: h.document for h in rc.search([query], k=5)[0]}


def _write(gw, tenant, op, ids, docs=None):
    with RetrievalClient(gw.grpc_url, token=TOKENS[tenant]) as rc:
        return rc.upsert(ids, docs) if op == "upsert" else rc.delete(ids)


def test_retrieval_what_alpha_writes_beta_never_reads_deletes_or_replaces(stack):
    gw, _, _, _ = stack
    tag = time.time_ns()
    doc_id, text = f"alpha-secret-{tag}", f"alpha's quarterly zorblax figures {tag}"
    assert _write(gw, "alpha", "upsert", [doc_id], [text]) == [False]
    assert _grpc_search(gw, "alpha", text).get(doc_id) == text
    assert doc_id not in (seen := _grpc_search(gw, "beta", text))
    SEEN.row("retrieval search (gRPC)", "beta searches alpha's document's exact text",
             f"top 5 without it: {list(seen)}")
    assert doc_id not in (seen := _search(gw, "beta", text)[1])
    SEEN.row("retrieval search (HTTP)", "beta searches alpha's document's exact text",
             f"top 5 without it: {list(seen)}")
    assert doc_id not in (seen := _search(gw, "team1", text)[1])
    SEEN.row("retrieval search (HTTP)", "team1 searches it", f"top 5 without it: {list(seen)}")
    # beta deletes alpha's id: it deletes nothing of alpha's
    assert (existed := _write(gw, "beta", "delete", [doc_id])) == [False]
    assert _grpc_search(gw, "alpha", text).get(doc_id) == text
    SEEN.row("retrieval delete", "beta deletes alpha's id", f"existed {existed}; alpha still finds it")
    # beta writes the same id: its own document, alpha still reads its own
    assert (existed := _write(gw, "beta", "upsert", [doc_id], [f"beta's forgery {tag}"])) == [False]
    assert _grpc_search(gw, "alpha", text).get(doc_id) == text
    SEEN.row("retrieval upsert", "beta upserts alpha's id", f"existed {existed}; alpha still reads its own text")
    assert _grpc_search(gw, "beta", f"beta's forgery {tag}").get(doc_id) == f"beta's forgery {tag}"


def test_retrieval_the_shared_corpus_is_the_admins_to_write(stack):
    gw, _, _, redis = stack
    tag = time.time_ns()
    shared_id, text = f"shared-{tag}", f"the handbook's chapter on flux calibration {tag}"
    assert _write(gw, "admin", "upsert", [shared_id], [text]) == [False]
    for tenant in ("alpha", "beta", "reader"):
        assert _grpc_search(gw, tenant, text).get(shared_id) == text, tenant
    # beta "replaces" the shared id: in its own collection only
    existed = _write(gw, "beta", "upsert", [shared_id], [f"beta's version {tag}"])
    assert _grpc_search(gw, "alpha", text).get(shared_id) == text
    SEEN.row("retrieval upsert", "beta upserts an id of the shared corpus",
             f"existed {existed} (its own collection); alpha reads the admin's text")
    existed = _write(gw, "beta", "delete", [shared_id])
    assert _grpc_search(gw, "alpha", text).get(shared_id) == text
    SEEN.row("retrieval delete", "beta deletes that shared id (its copy exists)",
             f"existed {existed}: its own copy went; alpha still finds the admin's")
    client = redis.target.client()
    assert int(client.get(STORE_VERSION_PREFIX + f"{STORE}:shared") or 0) >= 2, "the admin's write moved 'shared'"


def test_retrieval_cached_searches_stay_in_their_collection(stack):
    """A search cached for alpha is alpha's: beta (even in alpha's cache namespace) computes its own; a write by
    beta leaves alpha's cached search a hit, a write by alpha or the admin ends it."""
    gw, _, _, redis = stack
    client = redis.target.client()
    tag = time.time_ns()
    query = f"isolation of cached searches {tag}"
    assert _search(gw, "alpha", query)[0] == "miss"
    _wait(lambda: _search(gw, "alpha", query)[0] == "hit", "alpha's search is cached")
    assert (hit := _search(gw, "beta", query)[0]) == "miss"
    SEEN.row("retrieval cache", "beta repeats alpha's cached search", f"cache {hit}")
    assert _search(gw, "team1", query)[0] == "miss"
    _wait(lambda: _search(gw, "team1", query)[0] == "hit", "team1's search is cached")
    assert (hit := _search(gw, "team2", query)[0]) == "miss", "a store's answers are never shared by a cache namespace"
    SEEN.row("retrieval cache", "team2 repeats team1's cached search (one cache namespace)", f"cache {hit}")
    alpha_version = client.get(STORE_VERSION_PREFIX + f"{STORE}:alpha")
    _write(gw, "beta", "upsert", [f"beta-{tag}"], [query])
    _wait(lambda: int(client.get(STORE_VERSION_PREFIX + f"{STORE}:beta") or 0) >= 2, "beta's write moved beta's")
    assert client.get(STORE_VERSION_PREFIX + f"{STORE}:alpha") == alpha_version
    hit, seen = _search(gw, "alpha", query)
    assert hit == "hit" and f"beta-{tag}" not in seen, (hit, seen)
    SEEN.row("retrieval cache", "beta writes a matching document; alpha repeats its search",
             f"cache {hit}, beta's document absent")
    hit, seen = _search(gw, "beta", query)
    assert f"beta-{tag}" in seen, seen   # beta's own write, not a stale answer
    _write(gw, "admin", "upsert", [f"shared-{tag}"], [query])
    hit, seen = _search(gw, "alpha", query)
    assert hit == "miss" and f"shared-{tag}" in seen, (hit, seen)
    assert {f"beta-{tag}", f"shared-{tag}"} <= set(_search(gw, "beta", query)[1])


# -- the OpenAI API's semantic cache (chat): text_generation on vLLM ---------------------------------------

@pytest.fixture(scope="module")
def chat_stack(built_repository, tmp_path_factory):
    """text_generation (the suite's test settings) beside text_embedding, the API and the gateway, one Redis."""
    from conftest import GENERATION_TEST_PARAMETERS, _serve, generation_repository

    target = generation_repository(tmp_path_factory.mktemp("isolation-chat"), built_repository,
                                   **GENERATION_TEST_PARAMETERS)
    linked((EMBED, "sentence_embedder"), target, built_repository)
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(LocalRedis())
        triton = _serve(target, log=lambda m: None)
        triton.start(timeout=600)
        stack.callback(triton.stop)
        env = {**os.environ, "HOTPATH_REDIS_URL": redis.target.url}
        api = stack.enter_context(OpenAIServer(triton.grpc_url, free_ports(1)[0], target, env=env))
        tenants = parse_tenants({"tenants": {n: {"token": TOKENS[n], **TENANTS[n]} for n in ("alpha", "beta")}},
                                "test")
        grpc_port, http_port, openai_port = free_ports(3)
        settings = TenantGatewaySettings(
            grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), tenants, max_streams=4,
            models=public_models(Repository(target)), openai_port=openai_port,
            openai_upstreams=(f"{api.host}:{api.port}",), openai=openai_config(target))
        yield stack.enter_context(TenantGateway(settings))


@pytest.mark.timeout(1800)   # loads vLLM: minutes on a busy host
def test_the_semantic_and_exact_chat_caches_never_cross_tenants(chat_stack):
    door = f"127.0.0.1:{chat_stack.settings.openai_port}"
    system = {"role": "system", "content": f"Answer briefly. ({time.time_ns()})"}   # a context of its own

    def chat(tenant, question, temperature=0.7, headers=()):
        body = {"model": "text_generation", "temperature": temperature, "max_tokens": 12,
                "messages": [system, {"role": "user", "content": question}]}
        status, got, answer = _request(door, "POST", "/v1/chat/completions", tenant, body,
                                       [("X-Hotpath-Semantic-Cache", "on"), *headers])
        assert status == 200, answer
        return got.get(HIT_HEADER.lower()), json.loads(answer)["choices"][0]["message"]["content"]

    assert chat("alpha", "What is the capital of France?")[0] == "miss"
    deadline = time.monotonic() + 60
    while (hit := chat("alpha", "WHAT is the capital of  FRANCE?"))[0] != "semantic-hit":
        assert time.monotonic() < deadline, f"alpha's answer was never served to alpha again: {hit}"
        time.sleep(0.2)
    spoof = [(NAMESPACE_HEADER, "alpha"), ("X-Hotpath-Tenant", "alpha")]
    assert (hit := chat("beta", "WHAT is the capital of  FRANCE?", headers=spoof)[0]) == "miss"
    SEEN.row("OpenAI semantic cache", "beta asks alpha's cached chat question, naming alpha's namespace",
             f"cache {hit}")
    # greedy: the exact cache
    question = f"Name a colour. ({time.time_ns()})"
    assert chat("alpha", question, 0)[0] == "miss"
    deadline = time.monotonic() + 60
    while chat("alpha", question, 0)[0] != "hit":
        assert time.monotonic() < deadline, "alpha's greedy answer was never served to alpha again"
        time.sleep(0.2)
    assert (hit := chat("beta", question, 0, spoof)[0]) == "miss"
    SEEN.row("OpenAI exact chat cache", "beta repeats alpha's cached greedy chat", f"cache {hit}")
