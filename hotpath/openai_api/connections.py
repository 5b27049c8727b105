"""The HTTP protocol the OpenAI API runs under uvicorn: httptools with a deadline and a size bound on each
request head, which uvicorn has not (a connection that sent nothing, or half a head, was held for good).

uvicorn closes an idle connection `timeout_keep_alive` after an answer, but only until its next byte: a
fresh connection, or one that sends a head slowly, stays open as long as the client likes. Here, as in
NGINX (client_header_timeout), a head must be whole within `header_timeout_s` of the connection opening or
of its first byte, and within MAX_HEAD_BYTES; otherwise the connection is closed (431 for a head too
large). A body still arriving after its answer went out early (401, 404, 413) must end as soon. Bodies
have their own deadline in the app (hotpath.openai_api.app, 408), where the route knows the answer's shape.
"""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEAD_BYTES = 64 << 10   # NGINX's default large_client_header_buffers hold 4 x 8 KB; a client SDK sends < 2 KB


class BoundedHttpTools(HttpToolsProtocol):
    """uvicorn's httptools protocol; each request head is bounded in time and size."""

    header_timeout_s: float = 10.0   # set by protocol()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._in_head, self._head_bytes = False, 0
        super().connection_made(transport)
        self._arm()   # the first head: from the connection's start

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._in_head:   # a head began and is still incomplete after this data
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._cancel()
                self.transport.write(b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n"
                                     b"connection: close\r\n\r\n")
                self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._deadline is None:   # a later head: from its first byte (idle before it: timeout_keep_alive)
            self._arm()
        self._in_head = True

    def on_headers_complete(self) -> None:
        self._cancel()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.cycle is not None and self.cycle.more_body and not self.transport.is_closing():
            self._arm()   # answered before its body was whole: the rest is of no use

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._cancel()
        self._deadline = self.loop.call_later(self.header_timeout_s, self._expired)

    def _cancel(self) -> None:
        self._in_head, self._head_bytes = False, 0
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.cycle is None or self.cycle.response_complete:   # never while a request is being answered
            self.transport.close()


def protocol(header_timeout_s: float) -> type[BoundedHttpTools]:
    """The protocol class for uvicorn's `http` argument, with this head deadline."""
    return type("BoundedHttpTools", (BoundedHttpTools,), {"header_timeout_s": header_timeout_s})
