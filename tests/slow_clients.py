"""Slow and idle clients, for the tests and `python -m perf study slow_clients`: hold many connections that
sent half a request (its head and half its body) and many that sent nothing, then count how many the
server still holds.

    with hold("127.0.0.1", port, half_sent=1000, idle=1000, request=HalfSent("/v1/embeddings", body)) as held:
        ...                   # a normal client's calls meanwhile
        held.counts()         # {"half_sent": still held, "idle": still held, "answered": ..., "closed": ...}

A connection is *held* while the server has neither answered on it nor closed it. Plain sockets, no
thread: every count reads what arrived without blocking. HTTP/1.1, or HTTP/2 with prior knowledge for a
gRPC door (`HalfSent(..., http2=True)`: the body is a gRPC message, its length prefix says the whole;
an idle HTTP/2 connection has sent the client preface and its SETTINGS, as an idle gRPC channel has).
"""

from __future__ import annotations

import contextlib
import errno
import resource
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
SETTINGS, SETTINGS_ACK = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00", b"\x00\x00\x00\x04\x01\x00\x00\x00\x00"
HEADERS, DATA, RST_STREAM, GOAWAY = 1, 0, 3, 7
END_STREAM, END_HEADERS = 0x1, 0x4
STREAM = 1   # the one stream a half-sent HTTP/2 request opens


@dataclass(frozen=True)
class HalfSent:
    """A POST sent up to half its body (the head declares the whole); `sent=1` sends a whole request."""

    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...] = ()   # e.g. (("authorization", "Bearer ..."),)
    http2: bool = False                          # HTTP/2 gRPC call: `body` is the protobuf message
    sent: float = 0.5                            # the part of the body sent

    def first_half(self, authority: str) -> bytes:
        return self._http2(authority) if self.http2 else self._http1(authority)

    def _http1(self, authority: str) -> bytes:
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {authority}", "Content-Type: application/json",
                 f"Content-Length: {len(self.body)}", *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + self.body[:int(len(self.body) * self.sent)]

    def _http2(self, authority: str) -> bytes:
        fields = [(":method", "POST"), (":scheme", "http"), (":path", self.path), (":authority", authority),
                  ("content-type", "application/grpc"), ("te", "trailers"), *self.headers]
        block = b"".join(_literal(k.lower(), v) for k, v in fields)
        message = b"\x00" + len(self.body).to_bytes(4, "big") + self.body
        whole = self.sent >= 1
        return (PREFACE + SETTINGS + SETTINGS_ACK + _frame(HEADERS, END_HEADERS, block)   # no END_STREAM: more follows
                + _frame(DATA, END_STREAM if whole else 0, message[:max(1, int(len(message) * self.sent))]))


def _frame(kind: int, flags: int, payload: bytes, stream: int = STREAM) -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _integer(value: int, prefix_bits: int = 7) -> bytes:
    """HPACK's integer with an N-bit prefix (RFC 7541 5.1), flag bits clear."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([value])
    out, value = [limit], value - limit
    while value >= 128:
        out.append(value % 128 + 128)
        value //= 128
    return bytes(out + [value])


def _literal(name: str, value: str) -> bytes:
    """A header field literal without indexing, new name, no Huffman coding (RFC 7541 6.2.2)."""
    n, v = name.encode(), value.encode()
    return b"\x00" + _integer(len(n)) + n + _integer(len(v)) + v


def raise_open_files(needed: int) -> int:
    """The soft descriptor limit raised to the hard one; an error when even that is below `needed`."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    if soft != resource.RLIM_INFINITY and soft < needed:
        raise OSError(f"{needed} connections need as many descriptors; this process may open {soft} (ulimit -n)")
    return soft


class _Connection:
    def __init__(self, sock: socket.socket, kind: str, http2: bool):
        self.sock, self.kind, self.http2 = sock, kind, http2
        self.buffer, self.answered, self.closed = b"", False, False

    def poll(self) -> None:
        """Read what arrived, without blocking: an answer, a close."""
        while not self.closed:
            try:
                data = self.sock.recv(65536)
            except BlockingIOError:
                return
            except OSError as exc:   # a reset: closed too
                if exc.errno not in (errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT):
                    raise
                data = b""
            if not data:
                self.closed = True
                return
            self.buffer += data
            self.answered = self.answered or self._answer()

    def _answer(self) -> bool:
        """HTTP/1.1: a status line came. HTTP/2: the stream was answered or reset (SETTINGS and window
        updates are no answer)."""
        if not self.http2:
            return self.buffer.startswith(b"HTTP/")
        answered = False
        while len(self.buffer) >= 9:
            size = int.from_bytes(self.buffer[:3], "big")
            if len(self.buffer) < 9 + size:
                break
            kind, stream = self.buffer[3], int.from_bytes(self.buffer[5:9], "big") & 0x7FFFFFFF
            answered |= (stream == STREAM and kind in (HEADERS, RST_STREAM)) or kind == GOAWAY
            self.buffer = self.buffer[9 + size:]
        return answered


class Held:
    """The connections of one `hold()`; `counts()` reads their state now."""

    def __init__(self, host: str, port: int):
        self.host, self.port = host, port
        self.connections: list[_Connection] = []
        self.refused = 0   # connections the server did not accept at all

    def open(self, kind: str, first: bytes, http2: bool) -> None:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=10)
            if first:
                sock.sendall(first)
            sock.setblocking(False)   # counts() reads what arrived, never waits
        except OSError:
            self.refused += 1
            return
        self.connections.append(_Connection(sock, kind, http2))

    def counts(self) -> dict[str, int]:
        """Still held per kind, and how many were answered (still open or not) or closed."""
        out = {"half_sent": 0, "idle": 0, "answered": 0, "closed": 0, "refused": self.refused}
        for c in self.connections:
            c.poll()
            out["answered"] += c.answered
            out["closed"] += c.closed
            if not (c.answered or c.closed):
                out[c.kind] += 1
        return out

    def wait_released(self, timeout_s: float, kinds: tuple[str, ...] = ("half_sent", "idle")) -> float | None:
        """Seconds until the server held none of `kinds` any more; None when it still did after `timeout_s`."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            counts = self.counts()
            if not any(counts[k] for k in kinds):
                return time.monotonic() - start
            time.sleep(0.1)
        return None

    def close(self) -> None:
        for c in self.connections:
            c.sock.close()
        self.connections.clear()


@contextlib.contextmanager
def hold(host: str, port: int, half_sent: int = 1000, idle: int = 1000,
         request: HalfSent | Callable[[int], HalfSent] | None = None, http2: bool = False) -> Iterator[Held]:
    """Open `half_sent` connections that send the first half of `request` (or of `request(i)`, e.g. one
    tenant's token each) and `idle` that send nothing (HTTP/2: the preface); closed on exit."""
    assert request is not None or not half_sent, "half-sent connections need a request"
    raise_open_files(half_sent + idle + 256)
    held = Held(host, port)
    authority = f"{host}:{port}"
    try:
        for i in range(half_sent):
            r = request(i) if callable(request) else request
            held.open("half_sent", r.first_half(authority), r.http2)
        for _ in range(idle):
            held.open("idle", PREFACE + SETTINGS if http2 else b"", http2)
        yield held
    finally:
        held.close()
