"""The NGINX layer (hotpath.nginx) and the replica balancer's config: built with crossplane, parsed back,
accepted by nginx -t; the process's start, reload and failures; the access log."""

import shutil
import socket
import subprocess

import crossplane
import grpc
import pytest

from hotpath.errors import HotpathError
from hotpath.nginx import local_nginx as nginx_process
from hotpath.nginx.access_log import LOG_FIELDS, log_format, parse_access_log
from hotpath.nginx.directives import TEMP_KINDS, render
from hotpath.nginx.local_nginx import LocalNginx
from hotpath.scaleout.balancer import GATEWAY_MESSAGE, ReplicaBalancer
from hotpath.server.ports import free_ports

UPSTREAMS = ("127.0.0.1:9001", "127.0.0.1:9011", "127.0.0.1:9021")


def _find(directives, name):
    for d in directives:
        if d["directive"] == name:
            yield d
        yield from _find(d.get("block", []), name)


def _written(tmp_path, retry=True):
    for kind in TEMP_KINDS:
        (tmp_path / "tmp" / kind).mkdir(parents=True)
    path = tmp_path / "nginx.conf"
    path.write_text(render(ReplicaBalancer(8443, UPSTREAMS, retry).directives(tmp_path)))
    return path


@pytest.mark.parametrize("retry", [True, False])
def test_config_parses_back_and_nginx_accepts_it(tmp_path, retry):
    path = _written(tmp_path, retry)
    parsed = crossplane.parse(str(path), comments=False)
    assert parsed["status"] == "ok", parsed["errors"]
    directives = parsed["config"][0]["parsed"]
    (upstream,) = _find(directives, "upstream")
    assert [d["directive"] for d in upstream["block"]][:1] == ["least_conn"]
    assert [d["args"][0] for d in _find(upstream["block"], "server")] == list(UPSTREAMS)
    (listen,) = _find(directives, "listen")
    assert listen["args"] == ["127.0.0.1:8443", "http2"]
    locations = {loc["args"][-1]: loc for loc in _find(directives, "location")}
    infer = next(loc for uri, loc in locations.items() if "ModelInfer" in uri)
    other = locations["/"]
    unavailable = {(d["directive"], *d["args"]) for d in locations["@unavailable"]["block"]}
    assert ("add_header", "grpc-status", "14", "always") in unavailable and ("return", "204") in unavailable
    (error_page,) = _find(directives, "error_page")
    assert error_page["args"] == ["502", "503", "504", "=", "@unavailable"]
    (infer_retry,) = _find(infer["block"], "grpc_next_upstream")
    assert ("non_idempotent" in infer_retry["args"]) == retry and (infer_retry["args"] == ["off"]) != retry
    (other_retry,) = _find(other["block"], "grpc_next_upstream")
    assert "non_idempotent" not in other_retry["args"], "state-changing calls are never replayed"
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    check = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(path), "-e", str(tmp_path / "e.log")],
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_nginx_rejects_a_broken_config(tmp_path):
    path = _written(tmp_path)
    path.write_text(path.read_text().replace("least_conn;", "least_conn fast;"))
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(path), "-e", str(tmp_path / "e.log")],
                          capture_output=True).returncode != 0


def test_access_log_lines_with_retries():
    log = ("1796020000.100|200|127.0.0.1:9001|200|0|0.012|0.010|/inference.GRPCInferenceService/ModelInfer\n"
           "1796020000.200|200|127.0.0.1:9001, 127.0.0.1:9011|502, 200|0|0.020|0.003, 0.015|"
           "/inference.GRPCInferenceService/ModelInfer\n"
           "1796020000.300|404|127.0.0.1:9001|404|-|0.001|-|/v2/models/a|b/c|d\n"
           "garbage line\n")
    first, retried, piped = parse_access_log(log)
    assert first.served_by == "127.0.0.1:9001" and first.grpc_status == "0"
    assert (first.started, first.upstream_started) == (1796020000.088, 1796020000.09)
    assert retried.upstreams == ("127.0.0.1:9001", "127.0.0.1:9011") and retried.served_by == "127.0.0.1:9011"
    assert retried.upstream_seconds == 0.015 and piped.upstream_seconds == 0, "the answering replica's time"
    assert (piped.uri, piped.status, piped.at) == ("/v2/models/a|b/c|d", 404, 1796020000.3), "a `|` in the URI"


def test_the_log_format_puts_the_uri_last():
    assert log_format().endswith("|$request_uri") and log_format().count("|") == len(LOG_FIELDS) - 1
    with pytest.raises(ValueError, match="last"):
        log_format(("request_uri", "status"))

class _Broken(ReplicaBalancer):
    def directives(self, workdir):
        return [*super().directives(workdir), {"directive": "no_such_directive", "args": []}]


def _listening(port):
    s = socket.socket()
    s.bind(("127.0.0.1", port))
    s.listen()
    return s


def test_a_rejected_config_leaves_no_scratch_dir():
    gateway = LocalNginx(_Broken(free_ports(1)[0], UPSTREAMS))
    with pytest.raises(HotpathError, match="nginx rejected its config"):
        with gateway:
            pass
    assert gateway.process is None and not gateway.dir.exists()


def test_a_busy_listen_port_is_named_and_leaves_nothing_behind():
    port = free_ports(1)[0]
    with _listening(port):
        gateway = LocalNginx(ReplicaBalancer(port, UPSTREAMS))
        with pytest.raises(HotpathError, match=f"port\\(s\\) \\[{port}\\]: already in use"):
            gateway.start()
    assert gateway.process is None and not gateway.dir.exists()


def test_another_process_accepting_on_the_port_is_not_taken_for_nginx(monkeypatch):
    """The port taken between the check and NGINX's bind: it never writes its pid file and exits."""
    monkeypatch.setattr(nginx_process, "port_is_free", lambda port, host="127.0.0.1": True)
    port = free_ports(1)[0]
    with _listening(port):
        gateway = LocalNginx(ReplicaBalancer(port, UPSTREAMS))
        with pytest.raises(HotpathError, match="nginx did not start.*Address already in use"):
            gateway.start()
    assert gateway.process.poll() is not None and not gateway.dir.exists()


def _upstream_tried(gateway):
    """The upstream NGINX tried for one ModelInfer call (nothing listens there: the call fails)."""
    logged = len(gateway.log())
    with grpc.insecure_channel(gateway.grpc_url) as channel, pytest.raises(grpc.RpcError) as err:
        channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")(b"", timeout=10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE and err.value.details() == GATEWAY_MESSAGE
    (entry,) = gateway.log(logged, count=1)
    return entry.upstreams


def test_a_reload_serves_the_new_config_and_a_rejected_one_keeps_the_old():
    port, first, second = free_ports(3)
    with LocalNginx(ReplicaBalancer(port, (f"127.0.0.1:{first}",))) as gateway:
        assert _upstream_tried(gateway) == (f"127.0.0.1:{first}",)
        master = gateway.process.pid
        gateway.reload(ReplicaBalancer(port, (f"127.0.0.1:{second}",)))
        assert _upstream_tried(gateway) == (f"127.0.0.1:{second}",) and gateway.process.pid == master
        with pytest.raises(HotpathError, match="nginx rejected its config"):
            gateway.reload(_Broken(port, (f"127.0.0.1:{first}",)))
        assert _upstream_tried(gateway) == (f"127.0.0.1:{second}",) and gateway.process.poll() is None
        with pytest.raises(HotpathError, match="listen ports"):
            gateway.reload(ReplicaBalancer(port + 1, (f"127.0.0.1:{first}",)))
