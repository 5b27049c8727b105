"""Usage metering against real servers.

The models: a real tritonserver (the session's, every model but text_generation) called with the gateway's
tenancy headers; its hotpath_usage_* counters equal what the test computes with the same tokenizer and
images, and `hotpath usage` reads the same figures back from a real Prometheus scraping it (over a window)
and from the metrics port itself (totals).

The give-back: the real tenant gateway (NGINX + Lua, hotpath.gateway) in front of a real HTTP server standing
in for the OpenAI API (it answers as hotpath.openai_api does behind the gateway: the tokens generated in the
x-hotpath-output-tokens header, or in a last SSE comment after [DONE]); the gateway gives the unused part of
max_tokens back, in its shared dict and in a real redis-server, so a tenant whose budget holds one call's
max_tokens makes many calls; the client never sees the header or the comment. The gateway's per-tenant
request counters are on its status port.
"""

import contextlib
import dataclasses
import http.client
import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from hotpath import paths
from hotpath.client import text_input
from hotpath.exporters.samples import jpeg_photo
from hotpath.gateway import openai_door
from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.front_door import lua_call
from hotpath.gateway.tenant_gateway import TenantGateway
from hotpath.gateway.tenants import new_token, parse_tenants
from hotpath.monitoring.local import LocalPrometheus
from hotpath.monitoring.usage_report import from_prometheus, scrape
from hotpath.nginx.directives import d
from hotpath.openai_api.generation import OUTPUT_TOKENS_HEADER, output_tokens_comment
from hotpath.runtime.text import load_tokenizer
from hotpath.server.ports import free_ports
from hotpath.shared_state.server import LocalRedis
from tests.transcript import Transcript

SEEN = Transcript("usage", "Usage metered per tenant beside the reference counts of the same run",
                  ("tenant", "path", "figure", "hotpath counted", "reference", "reference from"))


@pytest.fixture(scope="module", autouse=True)
def _transcript():
    yield
    SEEN.write("tests/integration/test_usage.py")

# ----------------------------------------------------------------------------------------------- the models

# Names no other test module uses: the session shares one tritonserver, whose counters outlive a module.
TENANTS_SEEN = ("meter-acme", "meter-beta")


def _tokens(texts: list[str]) -> int:
    """The tokens text_embedding_exact's tokenizer makes of `texts` (its config's tokenizer file and length)."""
    from hotpath.runtime.backend_args import parameters
    from hotpath.specs.repository import read_config
    from tests.pb_stand_in import initialize_args

    root = paths.model_repository() / "tokenizer"
    params = parameters(initialize_args(read_config(root), root / "1"))
    tok = load_tokenizer(root / "1" / params["tokenizer_file"], int(params["max_length"]))
    tok.no_padding()
    return sum(len(e.ids) for e in tok.encode_batch(texts))


@pytest.fixture(scope="module")
def metered(triton):
    """Calls as the gateway passes them on (the tenancy headers), with unique texts (the response cache
    answers a repeated one without running a model); Prometheus scraping the server throughout."""
    prometheus = LocalPrometheus([triton.metrics_url.split("//")[1].split("/")[0]], [], free_ports(1)[0])
    prometheus.start()
    try:
        time.sleep(2)   # a scrape before any call: the window's start
        stamp = time.time_ns()
        sent = {t: {"texts": [], "images": 0} for t in TENANTS_SEEN}
        with grpcclient.InferenceServerClient(triton.grpc_url) as client:
            for tenant, n in zip(TENANTS_SEEN, (3, 2)):
                headers = {"x-hotpath-tenant": tenant, "x-hotpath-collection": tenant}
                for i in range(n):
                    texts = [f"{tenant} text {i} {stamp} about metering tokens", f"second {i} {stamp} héllo"]
                    for endpoint in ("text_embedding", "text_embedding_exact"):
                        client.infer(endpoint, [text_input("TEXT", texts)], headers=headers)
                        sent[tenant]["texts"] += texts
                photo = jpeg_photo(128 + len(tenant))
                images = grpcclient.InferInput("IMAGE", [n, 1], "BYTES")
                images.set_data_from_numpy(np.array([[photo]] * n, dtype=np.object_))
                client.infer("image_classification", [images], headers=headers)
                sent[tenant]["images"] += n
        time.sleep(4)   # scraped after the last call
        yield triton, prometheus, sent
    finally:
        prometheus.stop()


def _expected(sent, before):
    return {t: {"embedding_tokens": _tokens(s["texts"]) + before.get(t, {}).get("embedding_tokens", 0),
                "images": s["images"] + before.get(t, {}).get("images", 0)} for t, s in sent.items()}


def test_the_models_count_each_tenants_tokens_and_images_as_the_tokenizer_and_decoder_did(metered):
    triton, _, sent = metered
    totals = scrape([triton.metrics_url]).as_json()["tenants"]
    for tenant, s in sent.items():
        # every other test of the session uses the server as "local"; these tenants are this module's alone
        assert totals[tenant]["embedding_tokens"] == _tokens(s["texts"]), (tenant, totals)
        assert totals[tenant]["images"] == s["images"], (tenant, totals)
        assert totals[tenant]["requests"] == 0   # requests are the gateway's count
        SEEN.row(tenant, "text_embedding + text_embedding_exact (gRPC)", "embedding_tokens",
                 totals[tenant]["embedding_tokens"], _tokens(s["texts"]), f"the tokenizer, {len(s['texts'])} texts")
        SEEN.row(tenant, "image_classification (gRPC)", "images", totals[tenant]["images"], s["images"],
                 "images sent")


def test_hotpath_usage_reads_the_same_figures_from_prometheus_over_a_window(metered, capsys):
    from hotpath.cli import main

    triton, prometheus, sent = metered
    windowed = from_prometheus(prometheus.url, "10m").as_json()["tenants"]
    for tenant, s in sent.items():
        assert windowed[tenant]["embedding_tokens"] == _tokens(s["texts"]), windowed
        assert windowed[tenant]["images"] == s["images"], windowed
        SEEN.row(tenant, "`hotpath usage --prometheus ... --window 10m`", "embedding_tokens, images",
                 f"{windowed[tenant]['embedding_tokens']}, {windowed[tenant]['images']}",
                 f"{_tokens(s['texts'])}, {s['images']}", "the tokenizer, images sent")
    assert main(["usage", "--prometheus", prometheus.url, "--window", "10m", "--tenant", "meter-acme", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out["tenants"]) == {"meter-acme"} and out["tenants"]["meter-acme"] == windowed["meter-acme"]
    assert main(["usage", "--metrics", triton.metrics_url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[1].split()[:3] == ["tenant", "requests", "input_tokens"]
    assert any(line.split()[0] == "meter-acme" for line in table[2:])


# ----------------------------------------------------------------------------------------------- the give-back

BUDGET = 600        # tokens per minute: one call of MAX_TOKENS fits, a second one does not (burst 599)
MAX_TOKENS = 500
GENERATED = 5
USAGE_TENANTS = {"told": {"tokens_per_min": BUDGET, "requests_per_s": 1000, "burst": 1000},
                 "silent": {"tokens_per_min": BUDGET, "requests_per_s": 1000, "burst": 1000},
                 "streamer": {"tokens_per_min": BUDGET, "requests_per_s": 1000, "burst": 1000}}
TOKENS = {name: new_token() for name in USAGE_TENANTS}


# Where a stream is cut into writes, as offsets from "data: [DONE]" (14 bytes; the comment follows)
SPLITS = ((14,), (0, 14), (14, 15), (16, 20), (14, 20, 40), (3, 30))


class _FakeAPI(BaseHTTPRequestHandler):
    """Answers /v1/chat/completions as hotpath.openai_api does behind the gateway; the model "quiet" says
    nothing about what it generated (an API that does not report: nothing can be given back)."""
    protocol_version = "HTTP/1.1"
    seen_tenants: list[str] = []
    streams = 0

    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        _FakeAPI.seen_tenants.append(self.headers.get("x-hotpath-tenant", ""))
        report = body["model"] != "quiet"
        if body.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            events = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n' + b"data: [DONE]\n\n"
            if report:
                events += output_tokens_comment(GENERATED)
            # cut in other places on each stream, as TCP may: the comment whole, after [DONE] in one piece, or in
            # parts that start a chunk or end one
            _FakeAPI.streams += 1
            cuts = SPLITS[_FakeAPI.streams % len(SPLITS)]
            at = events.index(b"data: [DONE]")
            pieces = [events[:at + c] for c in cuts[:1]] + [events[at + a:at + b] for a, b in zip(cuts, cuts[1:])]
            pieces.append(events[at + cuts[-1]:])
            for chunk in (p for p in pieces if p):
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
                time.sleep(0.05)
            self.wfile.write(b"0\r\n\r\n")
            return
        answer = json.dumps({"choices": [{"message": {"content": "hi"}}],
                             "usage": {"completion_tokens": GENERATED}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(answer)))
        if report:
            self.send_header(OUTPUT_TOKENS_HEADER, str(GENERATED))
        self.end_headers()
        self.wfile.write(answer)


@pytest.fixture(scope="module")
def fake_api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _FakeAPI)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _with_usage_filters(server):
    """openai_door.server with usage.lua's filters on the generation location, when it does not have them
    (they belong there: hotpath/gateway/usage.lua; this keeps the test on the real NGINX path meanwhile)."""
    def wrapped(*args, **kwargs):
        blocks = server(*args, **kwargs)
        for block in blocks:
            for location in block.get("block", []):
                if location.get("directive") == "location" and "completions" in "".join(location.get("args", [])):
                    inner = location["block"]
                    if not any(x.get("directive") == "header_filter_by_lua" for x in inner):
                        inner[:0] = [d("header_filter_by_lua", lua_call("usage_header")),
                                     d("body_filter_by_lua", lua_call("usage_body"))]
        return blocks
    return wrapped


@contextlib.contextmanager
def _gateway(fake_api, redis=None):
    tenants = parse_tenants({"tenants": {n: {"token": TOKENS[n], **t} for n, t in USAGE_TENANTS.items()}}, "test")
    models = {name: {"kind": "generation", "default_max_tokens": 16} for name in ("tiny", "quiet")}
    grpc_port, http_port, openai_port = free_ports(3)
    settings = TenantGatewaySettings(grpc_port, http_port, (fake_api,), (fake_api,), tenants, openai_port=openai_port,
                                     openai_upstreams=(fake_api,), openai={"models": models}, redis=redis)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(openai_door, "server", _with_usage_filters(openai_door.server))
        with TenantGateway(settings) as gw:
            yield gw


def _chat(gw, tenant, model="tiny", stream=False):
    conn = http.client.HTTPConnection(f"127.0.0.1:{gw.settings.openai_port}", timeout=30)
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS,
                       "stream": stream})
    conn.request("POST", "/v1/chat/completions", body, {"authorization": f"Bearer {TOKENS[tenant]}",
                                                        "content-type": "application/json"})
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, dict(response.getheaders()), raw


def _status_metrics(gw) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{gw.status_url}/metrics") as r:
        text = r.read().decode()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
            if line and not line.startswith("#")}


def _calls(gw, tenant, model, stream=False, n=6):
    return [_chat(gw, tenant, model, stream) for _ in range(n)]


def _check_give_back(gw):
    # Without a report nothing comes back: the second call of 500 tokens does not fit in 600 a minute.
    quiet = _calls(gw, "silent", "quiet", n=2)
    assert [s for s, _, _ in quiet] == [200, 429], quiet
    # With it, each call costs what was generated: six calls of max_tokens 500 in a row pass.
    told = _calls(gw, "told", "tiny")
    assert [s for s, _, _ in told] == [200] * 6, told
    assert all(OUTPUT_TOKENS_HEADER not in {k.lower() for k in h} for _, h, _ in told)
    streamed = _calls(gw, "streamer", "tiny", stream=True)
    assert [s for s, _, _ in streamed] == [200] * 6, streamed
    for _, _, raw in streamed:   # the client's stream ends with [DONE], the comment removed
        assert raw.endswith(b"data: [DONE]\n\n") and b"hotpath-output-tokens" not in raw, raw
    time.sleep(0.5)   # the log phase's give-backs (timers with Redis) ran
    metrics = _status_metrics(gw)
    returned = MAX_TOKENS - GENERATED
    assert metrics['hotpath_gateway_tokens_returned_total{tenant="told"}'] == 6 * returned
    assert metrics['hotpath_gateway_tokens_returned_total{tenant="streamer"}'] == 6 * returned
    assert 'hotpath_gateway_tokens_returned_total{tenant="silent"}' not in metrics
    assert metrics['hotpath_gateway_tenant_requests_total{tenant="told",door="openai"}'] == 6
    assert metrics['hotpath_gateway_tenant_requests_total{tenant="silent",door="openai"}'] == 1   # one refused
    assert metrics['hotpath_gateway_tenant_requests_total{tenant="streamer",door="openai"}'] == 6
    return metrics


def test_unused_tokens_are_given_back_in_the_gateways_own_budget(fake_api):
    with _gateway(fake_api) as gw:
        _check_give_back(gw)
        totals = scrape([f"http://{gw.status_url}/metrics"]).as_json()["tenants"]
        assert totals["told"]["requests"] == 6 and totals["silent"]["requests"] == 1


def test_unused_tokens_are_given_back_in_the_fleets_redis_budget(fake_api):
    with LocalRedis() as redis:
        with _gateway(fake_api, dataclasses.replace(redis.target, timeout_ms=1000)) as gw:
            _check_give_back(gw)
            client = redis.target.client()
            now_us = int(float(".".join(str(x) for x in client.time())) * 1e6)
            tat = int(client.get("hotpath:tokens:told"))
            # six calls: each charged 500 then given 495 back: the stored time is ~30 tokens ahead, not 3000
            assert tat - now_us < 100 * (60e6 / BUDGET), (tat - now_us)


# ----------------------------------------------------------------------------------------------- generation

GEN_BUDGET = 120    # tokens per minute (burst 119): one call of GEN_MAX_TOKENS fits, two do not
GEN_MAX_TOKENS = 100


def _generation_call(gw, token, want_output_count):
    """One gRPC stream message through the gateway: a constrained answer of a few tokens, max_tokens 100.
    Returns (status message or None, outputs of the last response by name)."""
    import queue

    from tritonclient.grpc import InferenceServerClient

    def tensor(name, value, kind):
        t = grpcclient.InferInput(name, [1], kind)
        t.set_data_from_numpy(np.array([value], dtype=np.object_ if kind == "BYTES" else np.bool_))
        return t

    sampling = {"max_tokens": GEN_MAX_TOKENS, "structured_outputs": {"choice": ["yes", "no"]}}
    inputs = [tensor("text_input", b"Is the sky blue? Answer yes or no.", "BYTES"),
              tensor("sampling_parameters", json.dumps(sampling).encode(), "BYTES"),
              tensor("stream", True, "BOOL"), tensor("exclude_input_in_output", True, "BOOL"),
              tensor("return_num_input_tokens", True, "BOOL"),
              tensor("return_num_output_tokens", want_output_count, "BOOL")]
    answers: queue.Queue = queue.Queue()
    client = InferenceServerClient(gw.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)),
                        headers={"authorization": f"Bearer {token}"})
    try:
        client.async_stream_infer("text_generation", inputs, request_id="u1")
        outputs = {}
        while True:
            result, error = answers.get(timeout=300)
            if error is not None:
                return str(error), {}
            response = result.get_response()
            names = {o.name for o in response.outputs}
            outputs = {n: result.as_numpy(n) for n in names}
            if "num_input_tokens" in names:   # the last response of the request carries the counts
                return None, outputs
    finally:
        client.stop_stream()
        client.close()


def _triton_usage(server, tenant):
    return scrape([server.metrics_url], tenant).as_json()["tenants"].get(tenant, {})


def test_a_generation_stream_counts_the_engines_tokens_and_gives_back_the_unused(generation_triton):
    token = new_token()
    tenants = parse_tenants({"tenants": {"gen": {"token": token, "tokens_per_min": GEN_BUDGET}}}, "test")
    grpc_port, http_port = free_ports(2)
    settings = TenantGatewaySettings(grpc_port, http_port, (generation_triton.grpc_url,),
                                     (generation_triton.http_url,), tenants)
    with TenantGateway(settings) as gw:
        first_error, first = _generation_call(gw, token, True)
        assert first_error is None, first_error
        n_in, n_out = int(first["num_input_tokens"][0]), int(first["num_output_tokens"][0])
        assert 1 <= n_out < 10, n_out
        later = [_generation_call(gw, token, False) for _ in range(3)]
        # 4 x 100 tokens asked of a budget of 120 a minute: served because what was not generated came back
        assert [e for e, _ in later] == [None] * 3, later
        assert all("num_output_tokens" not in o and "num_input_tokens" in o for _, o in later)   # stripped
        time.sleep(2)
        gateway_metrics = _status_metrics(gw)
    assert gateway_metrics['hotpath_gateway_tokens_returned_total{tenant="gen"}'] == 4 * (GEN_MAX_TOKENS - n_out)
    assert gateway_metrics['hotpath_gateway_tenant_requests_total{tenant="gen",door="grpc_stream"}'] == 4
    # the model counted the tenant's tokens as the engine did (greedy and constrained: the same answer each time)
    counted = _triton_usage(generation_triton, "gen")
    assert counted["input_tokens"] == 4 * n_in and counted["output_tokens"] == 4 * n_out, (counted, n_in, n_out)
    engine = "the engine's num_*_tokens, 4 streams"
    SEEN.row("gen", "text_generation gRPC stream", "input_tokens", counted["input_tokens"], 4 * n_in, engine)
    SEEN.row("gen", "text_generation gRPC stream", "output_tokens", counted["output_tokens"], 4 * n_out, engine)
    SEEN.row("gen", "gateway budget", "tokens given back",
             gateway_metrics['hotpath_gateway_tokens_returned_total{tenant="gen"}'], 4 * (GEN_MAX_TOKENS - n_out),
             f"4 x (max_tokens {GEN_MAX_TOKENS} - generated)")


# ----------------------------------------------------------------------------------------------- the OpenAI API

def _post(base_url, path, body, headers):
    request = urllib.request.Request(base_url.rstrip("/") + path, json.dumps(body).encode(),
                                     {"content-type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=300) as r:
        return dict(r.headers), r.read()


def test_the_openai_api_passes_the_tenant_on_and_tells_the_gateway_what_was_generated(triton, generation_triton):
    from hotpath.openai_api.openai_server import OpenAIServer

    tenancy = {"x-hotpath-tenant": "oai", "x-hotpath-collection": "oai"}   # as the gateway sets them
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository) as api:
        texts = [f"usage through the API {time.time_ns()}", "a second text, with more words in it"]
        _, raw = _post(api.base_url, "/embeddings", {"model": "text_embedding", "input": texts}, tenancy)
        prompt_tokens = json.loads(raw)["usage"]["prompt_tokens"]
    assert prompt_tokens == _tokens(texts)
    assert _triton_usage(triton, "oai")["embedding_tokens"] == prompt_tokens
    SEEN.row("oai", "OpenAI /v1/embeddings", "embedding_tokens", _triton_usage(triton, "oai")["embedding_tokens"],
             prompt_tokens, "the answer's usage.prompt_tokens (= the tokenizer)")

    with OpenAIServer(generation_triton.grpc_url, free_ports(1)[0], generation_triton.repository) as api:
        chat = {"model": "text_generation", "messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 12}
        headers, raw = _post(api.base_url, "/chat/completions", chat, tenancy)
        whole = json.loads(raw)["usage"]
        assert headers[OUTPUT_TOKENS_HEADER] == str(whole["completion_tokens"])
        _, raw = _post(api.base_url, "/chat/completions", {**chat, "stream": True}, tenancy)
        assert raw.endswith(b"data: [DONE]\n\n" + output_tokens_comment(whole["completion_tokens"])), raw[-200:]
    counted = _triton_usage(generation_triton, "oai")
    assert counted["input_tokens"] == 2 * whole["prompt_tokens"], (counted, whole)
    assert counted["output_tokens"] == 2 * whole["completion_tokens"], (counted, whole)
    for figure, usage in (("input_tokens", "prompt_tokens"), ("output_tokens", "completion_tokens")):
        SEEN.row("oai", "OpenAI /v1/chat/completions, whole + streamed", figure, counted[figure],
                 2 * whole[usage], f"2 x the answer's usage.{usage}")
