"""The gateway's doors as its command line opens them: ports that do not collide with the servers behind it,
one listen address for every listener, the OpenAI door only with an upstream."""

import argparse
import dataclasses

import pytest

from hotpath import settings
from hotpath.gateway import __main__ as gateway_command
from hotpath.gateway.tenants import new_token

SERVER_PORTS = {"tritonserver HTTP": settings.http_port, "tritonserver gRPC": settings.grpc_port,
                "tritonserver metrics": settings.metrics_port, "OpenAI API": settings.openai_port}
GATEWAY_PORTS = {"gateway HTTP": settings.gateway_http_port, "gateway gRPC": settings.gateway_grpc_port,
                 "gateway OpenAI": settings.gateway_openai_port, "gateway status": settings.gateway_status_port}


def _parse(tmp_path, *extra: str) -> argparse.Namespace:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(f'[tenants.acme]\ntoken = "{new_token()}"\n')
    return gateway_command.command_line().parse_args(["serve", "--tenants", str(tenants), *extra])


def _listens(directives) -> list[str]:
    out = []
    for d in directives:
        if d["directive"] == "listen":
            out.append(d["args"][0])
        out += _listens(d.get("block", []))
    return out


def test_default_ports_are_distinct_and_never_a_servers():
    defaults = {name: s.default for name, s in {**SERVER_PORTS, **GATEWAY_PORTS}.items()}
    assert len(set(defaults.values())) == len(defaults), defaults


def test_command_line_defaults_are_the_settings_defaults(tmp_path, monkeypatch):
    for s in GATEWAY_PORTS.values():
        monkeypatch.delenv(s.name, raising=False)
    args = _parse(tmp_path)
    assert (args.http_port, args.grpc_port, args.openai_port, args.status_port) == \
        tuple(s.default for s in GATEWAY_PORTS.values())
    assert args.listen == "127.0.0.1"


def test_every_listener_takes_the_listen_address_and_the_openai_door_needs_an_upstream(built_repository, tmp_path):
    args = _parse(tmp_path, "--listen", "0.0.0.0", "--grpc-upstream", "triton:8001", "--http-upstream", "triton:8000")
    closed = gateway_command.gateway_settings(args, None)
    assert closed.openai_port == 0 and not closed.openai_upstreams
    args = _parse(tmp_path, "--listen", "0.0.0.0", "--grpc-upstream", "triton:8001", "--http-upstream", "triton:8000",
                  "--openai-upstream", "api-a:8080", "--openai-upstream", "api-b:8080")
    s = dataclasses.replace(gateway_command.gateway_settings(args, None), stream_port=12345)
    assert s.openai_upstreams == ("api-a:8080", "api-b:8080") and s.openai["models"]
    listens = [a for a in _listens(s.directives(tmp_path)) if not a.startswith("unix:")]
    assert sorted(listens) == sorted(f"0.0.0.0:{p}" for p in (s.grpc_port, s.http_port, s.openai_port, s.status_port))


@pytest.mark.parametrize("flag", ["--grpc-port", "--http-port", "--openai-port", "--status-port"])
def test_port_flags_override_the_defaults(tmp_path, flag):
    args = _parse(tmp_path, flag, "12345")
    assert getattr(args, flag[2:].replace("-", "_")) == 12345
