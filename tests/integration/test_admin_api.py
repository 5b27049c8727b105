"""Restricted APIs on the local server (hotpath.server.admin): refused without the admin key, served
with it; inference, health, metadata and config stay open. HTTP and gRPC, against the session server."""

import urllib.error
import urllib.request

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from hotpath.client import text_input
from hotpath.server.admin import HEADER, admin_headers

# (method, path) of one call per restricted HTTP API.
HTTP_RESTRICTED = [("POST", "/v2/repository/index"), ("GET", "/v2/models/stats"), ("GET", "/v2/trace/setting"),
                   ("GET", "/v2/logging"), ("GET", "/v2/systemsharedmemory/status")]
HTTP_OPEN = [("GET", "/v2/health/ready"), ("GET", "/v2/health/live"), ("GET", "/v2"),
             ("GET", "/v2/models/text_embedding"), ("GET", "/v2/models/text_embedding/config"),
             ("GET", "/v2/models/text_embedding/ready")]
# One call per restricted gRPC protocol (tritonclient method name, args).
GRPC_RESTRICTED = [("get_model_repository_index", ()), ("get_inference_statistics", ()),
                   ("get_trace_settings", ()), ("get_log_settings", ()),
                   ("get_system_shared_memory_status", ()), ("unload_model", ("no_such_model",))]


def _http(base, method, path, headers=None):
    req = urllib.request.Request(base + path, method=method, headers=headers or {},
                                 data=b"{}" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.parametrize("method,path", HTTP_RESTRICTED)
def test_http_admin_apis_need_the_key(triton, method, path):
    base = f"http://{triton.http_url}"
    code, body = _http(base, method, path)
    assert code == 403 and "restricted" in body, (code, body)
    assert _http(base, method, path, {HEADER: "wrong"})[0] == 403
    assert _http(base, method, path, admin_headers("http"))[0] == 200


@pytest.mark.parametrize("method,path", HTTP_OPEN)
def test_http_health_metadata_and_config_stay_open(triton, method, path):
    assert _http(f"http://{triton.http_url}", method, path)[0] == 200


@pytest.mark.parametrize("call,args", GRPC_RESTRICTED)
def test_grpc_admin_apis_need_the_key(triton, call, args):
    with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        method = getattr(client, call)
        for headers in (None, {"triton-grpc-protocol-admin-key": "wrong"}, {HEADER: admin_headers()[
                "triton-grpc-protocol-admin-key"]}):   # the bare HTTP header name does not unlock gRPC
            with pytest.raises(InferenceServerException) as refused:
                method(*args, headers=headers)
            # Triton 2.51 refuses with UNAVAILABLE (not PERMISSION_DENIED): retrying cannot help.
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
            assert "restricted" in refused.value.message()
        if call == "unload_model":   # past the gate: the model control mode or the name refuses it now
            with pytest.raises(InferenceServerException) as served:
                method(*args, headers=admin_headers())
            assert "restricted" not in served.value.message()
        else:
            method(*args, headers=admin_headers())


def test_grpc_inference_health_and_metadata_stay_open(triton):
    with grpcclient.InferenceServerClient(triton.grpc_url) as client:
        assert client.is_server_live() and client.is_server_ready()
        assert client.get_model_metadata("text_embedding").name == "text_embedding"
        assert client.get_model_config("text_embedding").config.name == "text_embedding"
        result = client.infer("text_embedding", [text_input("TEXT", ["open to every caller"])])
        assert result.as_numpy("EMBEDDING").shape[-1] == 384
