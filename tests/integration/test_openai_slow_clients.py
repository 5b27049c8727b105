"""Slow and idle clients at the OpenAI API when it runs alone (hotpath.openai_api.connections and the app's
body deadline), beside the session's real tritonserver: a half-sent body holds no place among the requests
in flight and is answered 408 after the body timeout; connections that send no request, or half a head,
are closed after the header timeout, and an idle one after an answer after the keepalive timeout. The
timeouts are set to seconds here; without them uvicorn held such connections for good."""

from __future__ import annotations

import dataclasses
import http.client
import json
import os
import socket
import time

import pytest

from hotpath.openai_api.connections import MAX_HEAD_BYTES
from hotpath.openai_api.openai_server import OpenAIServer
from hotpath.server.ports import free_ports
from tests.slow_clients import HalfSent, hold

MODEL = "text_embedding"
TIMEOUTS = {"HOTPATH_CLIENT_HEADER_TIMEOUT_SECS": "2", "HOTPATH_CLIENT_BODY_TIMEOUT_SECS": "2",
            "HOTPATH_KEEPALIVE_TIMEOUT_SECS": "3"}
RELEASED_WITHIN_S = 30   # generous on a busy host
EMBED = HalfSent("/v1/embeddings", json.dumps({"model": MODEL, "input": "a text, half of it sent"}).encode())


@pytest.fixture(scope="module")
def api(triton):
    with OpenAIServer(triton.grpc_url, free_ports(1)[0], triton.repository, env={**os.environ, **TIMEOUTS},
                      extra_args=["--max-in-flight", "2"]) as server:
        yield server


def _embed(api: OpenAIServer) -> int:
    conn = http.client.HTTPConnection(api.host, api.port, timeout=60)
    try:
        conn.request("POST", "/v1/embeddings", json.dumps({"model": MODEL, "input": "x"}),
                     {"content-type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def _settled(held, done, timeout_s: float = RELEASED_WITHIN_S) -> dict[str, int]:
    start = time.monotonic()
    while not done(counts := held.counts()) and time.monotonic() - start < timeout_s:
        time.sleep(0.05)
    return counts


def test_half_sent_bodies_hold_no_place_and_are_answered_408(api):
    """Three times the in-flight cap (2) of half-sent bodies: a whole call is still answered 200; each
    half-sent one gets a 408 in the OpenAI shape, and its connection is closed."""
    with hold(api.host, api.port, half_sent=6, idle=0, request=EMBED) as held:
        assert held.counts()["half_sent"] == 6, "the API no longer holds them: the test proves nothing"
        assert _embed(api) == 200
        counts = _settled(held, lambda c: c["closed"] == 6)
        assert counts["closed"] == 6 and counts["answered"] == 6, counts
        head, _, body = held.connections[0].buffer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), head
        assert json.loads(body)["error"]["code"] == "request_timeout"


def test_idle_and_slow_heads_are_closed(api):
    """Connections that never send a byte, or half a head, go after the header timeout; one idle after an
    answer after the keepalive timeout; a head past MAX_HEAD_BYTES is refused 431. Calls meanwhile pass."""
    with hold(api.host, api.port, half_sent=0, idle=20) as held:
        slow = socket.create_connection((api.host, api.port))
        slow.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\n")
        assert _embed(api) == 200
        assert held.counts()["idle"] == 20
        counts = _settled(held, lambda c: c["closed"] == 20)
        assert counts["closed"] == 20, counts
        slow.settimeout(RELEASED_WITHIN_S)
        assert slow.recv(100) == b"", "a connection that sent half a head is closed without an answer"
        slow.close()
    with hold(api.host, api.port, half_sent=1, idle=0, request=dataclasses.replace(EMBED, sent=1)) as held:
        counts = _settled(held, lambda c: c["closed"] == 1)
        assert counts["answered"] == 1 and counts["closed"] == 1, counts
        assert held.connections[0].buffer.startswith(b"HTTP/1.1 200")
    with socket.create_connection((api.host, api.port)) as big:
        big.sendall(b"POST /v1/embeddings HTTP/1.1\r\nhost: x\r\n" + b"x-pad: " + b"a" * MAX_HEAD_BYTES)
        big.settimeout(RELEASED_WITHIN_S)
        assert big.recv(100).startswith(b"HTTP/1.1 431")
