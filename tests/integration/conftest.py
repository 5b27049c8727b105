"""One real tritonserver per test session, on free loopback ports, serving the built repository."""

import pytest

from hotpath.repository_build import build_repository
from hotpath.server.ports import ServerPorts, free_ports
from hotpath.server.process import LocalTriton


@pytest.fixture(scope="session")
def triton():
    build_repository()  # incremental: does nothing when `make engines` already ran
    http, grpc, metrics = free_ports(3)
    server = LocalTriton(ports=ServerPorts(http=http, grpc=grpc, metrics=metrics))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def grpc_url(triton):
    return triton.grpc_url
