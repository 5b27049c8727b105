"""A minimal OTLP/HTTP trace receiver on loopback: what a collector would get from tritonserver."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from hotpath.sweeps.explain.otlp import decode


class OtlpReceiver:
    """Accepts POST /v1/traces (JSON or protobuf) and keeps every decoded export request."""

    def __init__(self, port: int):
        self.requests, self.paths = [], []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.paths.append(self.path)
                receiver.requests.append(decode(body, self.headers.get("Content-Type", "")))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"127.0.0.1:{port}/v1/traces"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def wait_for(self, predicate, timeout: float) -> bool:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if predicate(self.requests):
                return True
            time.sleep(0.1)
        return False

    def __enter__(self) -> "OtlpReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
