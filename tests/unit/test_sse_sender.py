"""hotpath.sweeps.measure.streaming.sse_sender against a local server that streams OpenAI-style SSE."""

import http.server
import json
import threading

import pytest

from hotpath.sweeps.measure.streaming import sse_sender


def _event(delta: dict) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode() + b"\n\n"


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append((self.path, body))
        if body.get("model") != "m":
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b'{"error": "no such model"}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        # the role-only first chunk and the finish chunk carry no text; ': ...' is an SSE comment
        for chunk in (_event({"role": "assistant", "content": ""}), _event({"content": "Hel"}), b": ping\n\n",
                      _event({"content": "lo"}), _event({}), b"data: [DONE]\n\n"):
            self.wfile.write(chunk)
            self.wfile.flush()

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_a_token_time_per_event_with_text_and_the_request_as_sent(server):
    _Handler.seen.clear()
    record = sse_sender(server, "m", max_tokens=7)("hi")
    assert record.error is None and len(record.token_times_s) == 2
    assert record.token_times_s == sorted(record.token_times_s) and record.total_s >= record.token_times_s[-1]
    path, body = _Handler.seen[0]
    assert path == "/v1/chat/completions" and body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["max_tokens"] == 7 and body["temperature"] == 0 and body["stream"] is True
    sse_sender(server, "m", chat=False)("hi")
    assert _Handler.seen[1][0] == "/v1/completions" and _Handler.seen[1][1]["prompt"] == "hi"


def test_a_refusal_is_an_error_record(server):
    record = sse_sender(server, "other")("hi")
    assert record.error.startswith("HTTP 404") and record.token_times_s == []
