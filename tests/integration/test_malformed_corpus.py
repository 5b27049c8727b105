"""The malformed-request corpus (tests/malformed.py) against a real tritonserver, directly and
through the tenant gateway, over HTTP, gRPC and gRPC streams: one test per case and path.

A case passes when its answer is a refusal (HTTP 400/401/403/404/413/429 and the framing refusals
405/411/414/415/431; gRPC INVALID_ARGUMENT, NOT_FOUND, PERMISSION_DENIED, UNAUTHENTICATED,
RESOURCE_EXHAUSTED, UNIMPLEMENTED) whose message leaks no traceback or server path, or a success for a
request that is valid whose answer equals the same request sent cleanly; through the gateway a request
for an internal step model must be refused. After each case the server must be alive (a good request
to the case's endpoint succeeds on the same path) with the same Python stub processes as before.

Every run writes the failures by class to /tmp/corpus-failures.md (HOTPATH_CORPUS_REPORT to change it).
"""

from __future__ import annotations

import gzip
import http.client
import json
import os
import re
import socket
import time
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import numpy as np
import psutil
import pytest
from tritonclient.grpc import service_pb2

from hotpath.gateway.config import TenantGatewaySettings
from hotpath.gateway.limits import admission_cap, max_body_bytes, stream_cap
from hotpath.gateway.tenants import Tenant, load_tenants, new_token
from hotpath.server.ports import free_ports
from hotpath.server.stubs import stub_processes
from tests import malformed
from tests.malformed import NUMPY, PUBLIC, Case, Clean

try:   # the gateway with its stream admission, as tests/integration/test_gateway.py runs it
    from hotpath.gateway.tenant_gateway import TenantGateway as Gateway
except ImportError:   # before the stream admission
    from hotpath.nginx.local_nginx import LocalNginx as Gateway
REPORT = Path(os.environ.get("HOTPATH_CORPUS_REPORT", "/tmp/corpus-failures.md"))
TOKEN = new_token()
INFER = "/inference.GRPCInferenceService/ModelInfer"
STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
TIMEOUT_S = 30.0
MAX_RESTARTS = 5
# 501: HTTP's UNIMPLEMENTED (Triton's /infer for a decoupled model)
HTTP_REFUSALS = {400, 401, 403, 404, 405, 411, 413, 414, 415, 429, 431, 501}
GRPC_REFUSALS = {"INVALID_ARGUMENT", "NOT_FOUND", "PERMISSION_DENIED", "UNAUTHENTICATED", "RESOURCE_EXHAUSTED",
                 "UNIMPLEMENTED"}
# A file path: under a system root, or ending in a source or data file's name (ONNX node names such as
# '/bert/embeddings/Gather' are not files).
LEAKS = re.compile(r"Traceback|/work/|site-packages|\.py\"|\.py\b|\.cc:\d|\.h:\d"
                   r"|(?<![\w.:/])/(?:usr|home|tmp|opt|root|var|etc|lib|lib64|proc|srv|mnt|workspace|app|models)/"
                   r"|(?<![\w.:])/(?:[\w.+-]+/)*[\w+-]+\.(?:py|so|cc|cpp|h|onnx|json|toml|pbtxt|txt|log)\b")
# Words of a server fault inside a stream's error message (a stream error has no status code in Triton 2.51).
STREAM_FAULTS = re.compile(r"Failed to process the request|Stub process|not healthy|INTERNAL|[Ii]nternal error|"
                           r"error_already_set|pybind11|std::|Segmentation|core dumped|[Uu]nexpected error|"
                           r"\[UNAVAILABLE\]|\[UNKNOWN\]")

CASES = malformed.corpus()
# Requests known to crash Triton 2.51 when they reach it go last: until the gateway refuses them, each
# costs a restart of the server (the cases after it would otherwise test a server starting up).
PARAMS = [pytest.param(case, path, id=f"{path}-{case.id}")
          for case in sorted(CASES, key=lambda c: bool(c.crashes_triton)) for path in case.paths]


# ------------------------------------------------------------------------------------------------ answers

@dataclass
class Answer:
    """What came back: a refusal, a success (outputs), or nothing."""
    kind: str                      # refused | success | fault | dropped | timeout
    status: str = ""               # HTTP code or gRPC status name
    message: str = ""
    outputs: dict | None = None
    extra: list = field(default_factory=list)   # stream: per-message answers

    def short(self) -> str:
        msg = self.message if len(self.message) <= 400 else self.message[:380] + f"...[{len(self.message)}]"
        out = ""
        if self.outputs is not None:
            out = " outputs=" + ", ".join(f"{k}{list(np.shape(v))}={_preview(v)}" for k, v in self.outputs.items())
        sub = "".join(f"\n      message {i}: {a.short()}" for i, a in enumerate(self.extra))
        return f"{self.kind} {self.status} {msg!r}{out}{sub}"


def _preview(v) -> str:
    flat = np.asarray(v).reshape(-1)
    return repr(flat[:3].tolist())[:80] + ("..." if flat.size > 3 else "")


def _bytes_tensor(raw: bytes) -> list[bytes]:
    out, at = [], 0
    while at + 4 <= len(raw):
        n = int.from_bytes(raw[at:at + 4], "little")
        out.append(raw[at + 4:at + 4 + n])
        at += 4 + n
    return out


def grpc_outputs(resp: service_pb2.ModelInferResponse) -> dict[str, np.ndarray]:
    outputs = {}
    for i, out in enumerate(resp.outputs):
        shape = list(out.shape)
        if i < len(resp.raw_output_contents):
            raw = resp.raw_output_contents[i]
            if out.datatype == "BYTES":
                arr = np.array(_bytes_tensor(raw), dtype=np.object_)
            else:
                arr = np.frombuffer(raw, dtype=NUMPY[out.datatype])
        else:
            values = getattr(out.contents, malformed.CONTENTS[out.datatype])
            arr = np.array(list(values), dtype=NUMPY[out.datatype])
        outputs[out.name] = arr.reshape(shape) if arr.size == int(np.prod(shape)) else arr
    return outputs


def json_outputs(doc: dict, tail: bytes) -> dict[str, np.ndarray]:
    outputs, at = {}, 0
    for out in doc.get("outputs", []):
        shape, dt = out["shape"], out["datatype"]
        size = (out.get("parameters") or {}).get("binary_data_size")
        if size is not None:
            raw, at = tail[at:at + size], at + size
            arr = (np.array(_bytes_tensor(raw), dtype=np.object_) if dt == "BYTES"
                   else np.frombuffer(raw, dtype=NUMPY[dt]))
        elif dt == "BYTES":
            arr = np.array([v.encode() if isinstance(v, str) else v for v in np.array(out["data"], dtype=object).reshape(-1)],
                           dtype=np.object_)
        else:
            arr = np.array(out["data"], dtype=NUMPY[dt]).reshape(-1)
        outputs[out["name"]] = arr.reshape(shape) if arr.size == int(np.prod(shape)) else arr
    return outputs


def generate_outputs(doc: dict) -> dict[str, np.ndarray]:
    """A /generate answer: the outputs as top-level keys."""
    out = {}
    for key, value in doc.items():
        if key in ("model_name", "model_version", "id", "parameters"):
            continue
        arr = np.array(value if isinstance(value, list) else [value], dtype=object).reshape(-1)
        if arr.size and isinstance(arr[0], str):
            arr = np.array([v.encode() for v in arr], dtype=np.object_)
        out[key] = arr
    return out


def combine(responses: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """A decoupled model's responses as one answer: token ids and text deltas joined, the rest the last one's."""
    out: dict[str, np.ndarray] = {}
    ids, text = [], b""
    for r in responses:
        for k, v in r.items():
            if k == "TOKEN_ID":
                ids.extend(int(x) for x in np.asarray(v).reshape(-1))
            elif k == "TEXT_DELTA":
                text += b"".join(x if isinstance(x, bytes) else str(x).encode() for x in np.asarray(v).reshape(-1))
            else:
                out[k] = np.asarray(v).reshape(-1)
    if any(responses):
        out["TOKEN_ID"] = np.array(ids, dtype=np.int64)
        out["TEXT_DELTA"] = np.array([text], dtype=np.object_)
    return out


def differences(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> str:
    """'' when `got` answers like `want` (the clean request's answer)."""
    problems = []
    for name, expected in want.items():
        if name not in got:
            problems.append(f"{name} missing")
            continue
        a, e = np.asarray(got[name]).reshape(-1), np.asarray(expected).reshape(-1)
        if a.size != e.size:
            problems.append(f"{name} has {a.size} values, the clean answer {e.size}")
        elif e.dtype.kind == "f":
            try:
                if not np.allclose(a.astype(np.float64), e.astype(np.float64), atol=1e-4, rtol=1e-3):
                    problems.append(f"{name} differs: {a[:4].tolist()} vs {e[:4].tolist()}")
            except (TypeError, ValueError):
                problems.append(f"{name} not numbers: {a[:4].tolist()}")
        else:
            norm = [x if isinstance(x, bytes) else (x.encode() if isinstance(x, str) else int(x)) for x in a]
            expn = [x if isinstance(x, bytes) else int(x) for x in e]
            if norm != expn:
                problems.append(f"{name} differs: {norm[:4]} vs {expn[:4]}")
    return "; ".join(problems)


# ------------------------------------------------------------------------------------------------ senders

def send_http(url: str, req: malformed.HttpRequest, extra_headers) -> Answer:
    host, port = url.rsplit(":", 1)
    try:
        sock = socket.create_connection((host, int(port)), timeout=TIMEOUT_S)
    except OSError as exc:
        return Answer("dropped", message=f"connect: {exc}")
    try:
        try:
            sock.sendall(req.wire(url, extra_headers))
        except OSError:
            pass   # the server may answer and close before reading the whole body; read what it said
        resp = http.client.HTTPResponse(sock, method=req.method)
        try:
            resp.begin()
            body = resp.read()
        except socket.timeout:
            return Answer("timeout", message=f"no answer within {TIMEOUT_S:.0f}s")
        except (http.client.HTTPException, OSError) as exc:
            return Answer("dropped", message=f"{type(exc).__name__}: {exc}")
    finally:
        sock.close()
    encoding = (resp.getheader("Content-Encoding") or "").lower()
    try:
        if encoding == "gzip":
            body = gzip.decompress(body)
        elif encoding == "deflate":
            body = zlib.decompress(body)
    except (OSError, zlib.error) as exc:
        return Answer("fault", str(resp.status), f"undecodable {encoding} body: {exc}")
    status = resp.status
    text = body.decode("utf-8", "replace")
    if status in HTTP_REFUSALS:
        return Answer("refused", str(status), text)
    if status >= 500:
        return Answer("fault", str(status), text)
    if status != 200:
        return Answer("fault", str(status), text)
    try:
        if req.answer == "generate_stream":
            events = [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:")]
            errors = [e["error"] for e in events if isinstance(e, dict) and "error" in e]
            if errors:
                return Answer("fault", "200", "error event in a 200 stream: " + "; ".join(map(str, errors)))
            return Answer("success", "200", "", combine([generate_outputs(e) for e in events]))
        header_len = resp.getheader("Inference-Header-Content-Length")
        head, tail = (body[:int(header_len)], body[int(header_len):]) if header_len else (body, b"")
        doc = json.loads(head)
        if isinstance(doc, dict) and "error" in doc:
            return Answer("fault", "200", "error body in a 200: " + str(doc["error"]))
        if req.answer == "generate":
            return Answer("success", "200", "", generate_outputs(doc))
        return Answer("success", "200", "", json_outputs(doc, tail))
    except (ValueError, KeyError, TypeError) as exc:
        return Answer("fault", "200", f"unreadable success body ({exc}): {text[:300]}")


def _rpc_error(exc: grpc.RpcError) -> Answer:
    code = exc.code().name if exc.code() else "UNKNOWN"
    message = exc.details() or ""
    if code == "DEADLINE_EXCEEDED":
        return Answer("timeout", code, message)
    if code in GRPC_REFUSALS:
        return Answer("refused", code, message)
    if code == "UNAVAILABLE" and not message.startswith("gateway:"):
        return Answer("dropped" if "Socket closed" in message or "Connection reset" in message else "fault",
                      code, message)
    return Answer("fault", code, message)


def send_unary(channel: grpc.Channel, data: bytes, metadata) -> Answer:
    call = channel.unary_unary(INFER)
    try:
        raw = call(data, metadata=metadata, timeout=TIMEOUT_S)
    except grpc.RpcError as exc:
        return _rpc_error(exc)
    return Answer("success", "OK", "", grpc_outputs(service_pb2.ModelInferResponse.FromString(raw)))


def send_stream(channel: grpc.Channel, messages: list[bytes], metadata) -> tuple[Answer, list]:
    """(the RPC's own answer, the stream's responses as (id, error message, outputs, final))."""
    call = channel.stream_stream(STREAM)
    responses = []
    try:
        for raw in call(iter(messages), metadata=metadata, timeout=TIMEOUT_S * 2):
            r = service_pb2.ModelStreamInferResponse.FromString(raw)
            params = r.infer_response.parameters
            final = "triton_final_response" in params and params["triton_final_response"].bool_param
            responses.append((r.infer_response.id, r.error_message,
                              grpc_outputs(r.infer_response) if not r.error_message else None, final))
    except grpc.RpcError as exc:
        return _rpc_error(exc), responses
    return Answer("success", "OK"), responses


# ------------------------------------------------------------------------------------------------ the runner

@dataclass
class Verdict:
    case: Case
    path: str
    ok: bool
    klass: str = ""
    why: str = ""
    answer: Answer | None = None

    def report(self) -> str:
        return (f"\n  case:   {self.path} {self.case.id} ({self.case.kind}; "
                f"{'valid' if self.case.clean else 'invalid'}{', internal model' if self.case.internal else ''})"
                f"\n  sent:   {self.case.describe()[:1500]}"
                f"\n  answer: {self.answer.short() if self.answer else '-'}"
                f"\n  why:    [{self.klass}] {self.why}")


def leak(text: str) -> str:
    m = LEAKS.search(text)
    return m.group(0) if m else ""


class Runner:
    """Sends cases and judges the answers. `triton` needs `process` (tritonserver's pid, poll()), stop() and
    start(); its `grpc_url` may be None where tests reach it through the gateway only (tests/integration/
    test_production_shape.py): then the clean requests' answers are the gateway's (`reference="gateway"`)
    and no case is sent directly."""

    def __init__(self, triton, gateway, reference: str = "direct", report: Path | None = None):
        self.triton, self.gateway = triton, gateway
        self.reference_path, self.report = reference, report or REPORT
        self.planned, self.test_file = len(PARAMS), "tests/integration/test_malformed_corpus.py"   # for the report
        self.channels = {path: grpc.insecure_channel(url, options=[("grpc.max_send_message_length", 64 << 20),
                                                                    ("grpc.max_receive_message_length", 64 << 20)])
                         for path, url in (("direct", triton.grpc_url), ("gateway", gateway.grpc_url)) if url}
        self.refs: dict[Clean, dict] = {}
        self.verdicts: list[Verdict] = []
        self.restarts: list[str] = []
        self.broken = ""
        self.stubs = self._stub_pids()
        self.started = time.monotonic()
        self.checks = 0

    # -- plumbing
    def _stub_pids(self) -> dict[int, str]:
        return {p.pid: model for model, procs in stub_processes(self.triton.process.pid).items() for p in procs}

    def metadata(self, path: str):
        return (("authorization", f"Bearer {TOKEN}"),) if path == "gateway" else ()

    def http_url(self, path: str) -> str:
        return self.triton.http_url if path == "direct" else self.gateway.http_url

    def reference(self, c: Clean) -> dict:
        """The clean request's answer, sent over gRPC directly (or through the gateway: `reference`)."""
        if c not in self.refs:
            msg = malformed.clean_request(c, request_id="ref")
            path = self.reference_path
            if c.decoupled:
                answer, responses = send_stream(self.channels[path],
                                                [malformed.stream_params(msg).SerializeToString()], self.metadata(path))
                errors = [e for _, e, _, _ in responses if e]
                assert answer.kind == "success" and not errors, f"clean {c.model} request failed: {answer.short()} {errors}"
                self.refs[c] = combine([o for _, e, o, _ in responses if o])
            else:
                answer = send_unary(self.channels[path], msg.SerializeToString(), self.metadata(path))
                assert answer.kind == "success", f"clean {c.model} request failed: {answer.short()}"
                self.refs[c] = answer.outputs
        return self.refs[c]

    def expected(self, case: Case, clean: Clean | None, path: str) -> Clean | None:
        return None if (case.internal and path == "gateway") else clean

    def judge(self, answer: Answer, clean: Clean | None, where: str = "") -> tuple[str, str]:
        """('', '') when the answer is acceptable, else (class, why)."""
        pre = f"{where}: " if where else ""
        if answer.kind == "refused":
            found = leak(answer.message)
            if found:
                return "leak in error message", f"{pre}refusal {answer.status} leaks {found!r}"
            return "", ""
        if answer.kind == "success":
            if clean is None:
                return "accepted an invalid request", f"{pre}success for a request that must be refused"
            diff = differences(answer.outputs or {}, self.reference(clean))
            if diff:
                return "success with wrong data", f"{pre}answer differs from the clean request's: {diff}"
            return "", ""
        if answer.kind in ("dropped", "timeout"):
            return f"connection {answer.kind}", f"{pre}{answer.message}"
        klass = (f"HTTP {answer.status}" if answer.status.isdigit() else f"gRPC {answer.status}")
        if answer.status == "200":
            klass = "HTTP 200 with an error"
        found = leak(answer.message)
        return klass + (" (leaks a path)" if found else ""), f"{pre}{answer.status}: {answer.message[:300]}"

    # -- one case
    def send(self, case: Case, path: str) -> tuple[str, str, Answer]:
        clean = self.expected(case, case.clean, path)
        if case.protocol == "http":
            extra = ((b"Authorization", f"Bearer {TOKEN}".encode()),) if path == "gateway" else ()
            answer = send_http(self.http_url(path), case.http, extra)
            return (*self.judge(answer, clean), answer)
        if case.protocol == "grpc":
            answer = send_unary(self.channels[path], case.messages[0].data, self.metadata(path))
            return (*self.judge(answer, clean), answer)
        rpc, responses = send_stream(self.channels[path], [m.data for m in case.messages], self.metadata(path))
        by_id: dict[str, list] = defaultdict(list)
        errors = []
        for rid, error, outputs, _final in responses:
            if error:
                errors.append((rid, error))
            elif outputs:
                by_id[rid].append(outputs)
        canary = case.messages[case.canary]
        bad = case.messages[0]
        sub = []
        for rid, error in errors:
            sub.append(Answer("refused", f"stream error (id {rid!r})", error))
        for rid, outs in by_id.items():
            sub.append(Answer("success", rid or "(no id)", "", _one(outs, canary.clean if rid == "canary" else bad.clean)))
        rpc.extra = sub
        if rpc.kind != "success":
            if rpc.kind == "refused" and not leak(rpc.message):
                return "", "", rpc   # the whole stream refused (the gateway: an internal model, a token)
            return (*self.judge(rpc, None, "stream RPC"), rpc)
        for _rid, error in errors:
            if leak(error):
                return "leak in error message", f"stream error leaks {leak(error)!r}: {error[:300]}", rpc
            if STREAM_FAULTS.search(error):
                return "stream error is a server fault", f"stream error: {error[:300]}", rpc
        # the malformed message: refused (an error) or a correct success
        bad_clean = self.expected(case, bad.clean, path)
        ids = [rid for rid in by_id if rid != "canary"]
        for rid in ids:
            klass, why = self.judge(Answer("success", "OK", "", _one(by_id[rid], bad.clean)), bad_clean,
                                    "malformed message")
            if klass:
                return klass, why, rpc
        if not ids and not errors:
            return "stream message unanswered", "no response and no error for the malformed message", rpc
        if "canary" not in by_id:
            if len(errors) >= 2:
                return "", "", rpc   # both refused (the gateway may refuse a stream's messages by tenant rules)
            return "stream lost the next request", "the clean request after the malformed one got no answer", rpc
        klass, why = self.judge(Answer("success", "OK", "", _one(by_id["canary"], canary.clean)),
                                self.expected(case, canary.clean, path) or canary.clean, "next clean request")
        return klass, why, rpc

    def run(self, case: Case, path: str) -> Verdict:
        if self.broken:
            v = Verdict(case, path, False, "not run: server broken", self.broken)
            self.verdicts.append(v)
            return v
        try:
            klass, why, answer = self.send(case, path)
        except AssertionError as exc:
            klass, why, answer = "harness: clean request failed", str(exc), None
        health = self.health(case, path, probe=bool(klass) or len(self.verdicts) % 3 == 0)
        if health:   # a dead server or stub outranks what the case's own answer was
            klass, why = health[0], health[1] + (f"; the case's own answer: [{klass}] {why}" if klass else "")
        v = Verdict(case, path, not klass, klass, why, answer)
        self.verdicts.append(v)
        if len(self.verdicts) % 100 == 0:
            self.write_report(partial=True)
        return v

    # -- health
    def good(self, model: str, path: str) -> str:
        c = malformed.clean(model)
        msg = malformed.clean_request(c, request_id="health")
        if c.decoupled:
            rpc, responses = send_stream(self.channels[path], [malformed.stream_params(msg).SerializeToString()],
                                         self.metadata(path))
            errors = [e for _, e, _, _ in responses if e]
            if rpc.kind != "success" or errors or not any(o for _, _, o, _ in responses):
                return f"{rpc.short()} {errors}"
            return ""
        answer = send_unary(self.channels[path], msg.SerializeToString(), self.metadata(path))
        return "" if answer.kind == "success" else answer.short()

    def health(self, case: Case, path: str, probe: bool = True) -> tuple[str, str] | None:
        """None when the server still serves the case's endpoint with the same stubs; else (class, why),
        after restarting what broke so the cases after it still mean something. The stubs and processes
        are checked after every case, a good request after every third one and after every failure."""
        self.checks += 1
        if self.triton.process.poll() is not None:
            return self.repair("server died", f"tritonserver exited with {self.triton.process.returncode}")
        pids = self._stub_pids()
        gone = {pid: m for pid, m in self.stubs.items() if pid not in pids}
        if gone and len(gone) == len(self.stubs):   # every stub at once: the server went first (they exit with it)
            time.sleep(1.0)
            if self.triton.process.poll() is not None:
                return self.repair("server died", f"tritonserver exited with {self.triton.process.returncode}")
        if gone:
            return self.repair("stub died", f"Python stub(s) died: {sorted(set(gone.values()))}")
        if getattr(self.gateway, "nginx", self.gateway).process.poll() is not None:
            self.broken = "the gateway's nginx exited"
            return "gateway died", self.broken
        if not probe:
            return None
        model = case.endpoint if case.endpoint in PUBLIC else "text_embedding"
        if model == "text_generation" and self.checks % 2 and case.protocol != "grpc_stream":
            model = "text_embedding"   # generation costs tokens (a stream case's own next request probes it)
        failed = self.good(model, path)
        if failed:
            again = self.good(model, "direct") if "direct" in self.channels else failed
            return self.repair("server no longer serves", f"a good {model} request on {path} failed: {failed}"
                               + ("" if path == "direct" or "direct" not in self.channels
                                  else f" (directly: {again or 'served'})")) \
                if again else ("gateway no longer serves", f"a good {model} request through the gateway failed: {failed}")
        return None

    def repair(self, klass: str, why: str) -> tuple[str, str]:
        """Restart tritonserver in place (same ports: the gateway and the session's other tests keep it)."""
        if len(self.restarts) >= MAX_RESTARTS:
            self.broken = f"{klass} again after {MAX_RESTARTS} restarts"
            return klass, why
        self.restarts.append(f"{klass}: {why}")
        old = [pid for pid in self.stubs]
        self.triton.stop()
        for pid in old:   # stubs of the old server (they may outlive it)
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
        self.triton.start()
        self.stubs = self._stub_pids()
        return klass, why + " (tritonserver restarted)"

    # -- the report
    def gateway_errors(self) -> list[str]:
        folder = _gateway_dir(self.gateway)
        log = folder / "error.log" if folder else None
        if not log or not log.exists():
            return []
        seen, out = set(), []
        for line in log.read_text(errors="replace").splitlines():
            if not re.search(r"\[(error|crit|alert|emerg)\]", line):
                continue
            key = re.sub(r"^\S+ \S+ |\d+#\d+: \*\d+ |, client: .*$", "", line)[:300]
            if key not in seen:
                seen.add(key)
                out.append(key)
        return out[:15]

    def write_report(self, partial: bool = False) -> None:
        failed = [v for v in self.verdicts if not v.ok]
        by_class: dict[str, list[Verdict]] = defaultdict(list)
        for v in failed:
            by_class[v.klass].append(v)
        sends = Counter((v.path, v.case.protocol) for v in self.verdicts)
        lines = [f"# Malformed-request corpus: failures by class{' (run in progress)' if partial else ''}",
                 "",
                 f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {len(self.verdicts)} sends of "
                 f"{self.planned} ({len(CASES)} requests), {len(failed)} failed, "
                 f"{time.monotonic() - self.started:.0f} s; commit {_commit()}.",
                 f"Run: `flock /tmp/hotpath-it.lock .venv/bin/python -m pytest {self.test_file} -q`",
                 "", "Sends by path and protocol: " + ", ".join(f"{p}/{q} {n}" for (p, q), n in sorted(sends.items())),
                 ""]
        answers = Counter(f"{v.answer.kind} {v.answer.status}".strip() if v.answer else "no answer"
                          for v in self.verdicts)
        lines += ["Answers: " + ", ".join(f"{k} {n}" for k, n in answers.most_common()), ""]
        limits = Counter(c.direct_limit for c in CASES if c.direct_limit)
        lines += [f"Sent through the gateway only ({sum(limits.values())} requests), because Triton 2.51 itself answers "
                  "them wrong before any model sees them:"] + [f"- {n}: {reason}" for reason, n in limits.most_common()]
        lines.append("")
        if self.restarts:
            lines += ["tritonserver restarted after: " + "; ".join(self.restarts), ""]
        lines += ["| class | failures | by path/protocol | by endpoint |", "|---|---|---|---|"]
        for klass, vs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            paths = Counter(f"{v.path}/{v.case.protocol}" for v in vs)
            eps = Counter(v.case.endpoint for v in vs)
            lines.append(f"| {klass} | {len(vs)} | {', '.join(f'{k} {n}' for k, n in paths.most_common())} | "
                         f"{', '.join(f'{k} {n}' for k, n in eps.most_common())} |")
        lines.append("")
        for klass, vs in sorted(by_class.items(), key=lambda kv: -len(kv[1])):
            kinds = Counter(v.case.kind for v in vs)
            lines += [f"## {klass} ({len(vs)})", "",
                      "Kinds: " + ", ".join(f"{k} {n}" for k, n in kinds.most_common()), "",
                      "Example:", "```", vs[0].report().strip("\n"), "```", ""]
            # a second example from the other path, when there is one
            other = next((v for v in vs if v.path != vs[0].path), None)
            if other:
                lines += ["```", other.report().strip("\n"), "```", ""]
        errors = self.gateway_errors()
        if errors:
            lines += ["## The gateway's error log (NGINX [error]/[crit]/[alert] lines, distinct, first 15)", "", "```",
                      *errors, "```", ""]
        lines += ["## Every failing test id", "", "```"] + [f"{v.path}-{v.case.id}  [{v.klass}]" for v in failed] + ["```"]
        tmp = self.report.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(self.report)


def _gateway_dir(gateway) -> Path | None:
    nginx = getattr(gateway, "nginx", gateway)
    return getattr(nginx, "dir", None)


def _one(outs: list[dict], c: Clean | None) -> dict:
    return combine(outs) if (c is not None and c.decoupled) or len(outs) > 1 else outs[0]


def _commit() -> str:
    head = Path(__file__).resolve().parents[2] / ".git" / "HEAD"
    try:
        ref = head.read_text().strip()
        if ref.startswith("ref: "):
            return (head.parent / ref[5:]).read_text().strip()[:10]
        return ref[:10]
    except OSError:
        return "?"


# ------------------------------------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def corpus_gateway(triton, tmp_path_factory):
    """The tenant gateway as tests/integration/test_gateway.py builds it, one tenant whose rate never interferes."""
    path = tmp_path_factory.mktemp("corpus-gateway") / "tenants.toml"
    tokens = "tokens_per_min = 100000000\n" if "tokens_per_min" in Tenant.__dataclass_fields__ else ""
    path.write_text(f'[tenants.corpus]\ntoken = "{TOKEN}"\nrequests_per_s = 100000\nburst = 100000\n{tokens}')
    grpc_port, http_port = free_ports(2)
    settings = TenantGatewaySettings(grpc_port, http_port, (triton.grpc_url,), (triton.http_url,), load_tenants(path),
                                     admission_cap("cpu"), max_body_bytes(), stream_cap())
    with Gateway(settings) as gw:
        yield gw


@pytest.fixture(scope="module")
def runner(triton, corpus_gateway):
    r = Runner(triton, corpus_gateway)
    yield r
    r.write_report()
    for channel in r.channels.values():
        channel.close()


@pytest.mark.parametrize(("case", "path"), PARAMS)
def test_malformed_request(runner, case, path):
    verdict = runner.run(case, path)
    assert verdict.ok, verdict.report()
