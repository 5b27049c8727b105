"""A deterministic corpus of malformed requests for every public endpoint.

`corpus()` returns the same list of `Case`s on every call (one seeded `random.Random`, no network): raw
HTTP requests (bytes on the wire: request line, headers, body) and gRPC messages (serialized
`ModelInferRequest`s built with tritonclient's protobufs, or bytes that are no protobuf at all) for
unary `ModelInfer` and for `ModelStreamInfer` streams. Every byte a tenant controls is varied: the
body's JSON (truncated, empty, deeply nested, wrong types for every field, numbers past 32 and 64 bits,
floats for integers), the binary extension (lying or negative `binary_data_size`, garbage
`Inference-Header-Content-Length`), inputs and outputs (unknown, extra, missing, wrong datatypes and
shapes, huge declared shapes with little data), the model name and version in the path or message
(unknown, internal step models, path traversal, very long, unicode), headers, request parameters.

A case says what a correct answer is: `clean` is None when the request is invalid (only a refusal is
correct), else the clean request it means (a success must equal the clean request's answer; a
refusal is acceptable too). Cases aimed at an internal step model are `internal`: through the
gateway only a refusal is correct. `paths` is ("direct", "gateway"), or ("gateway",) for a request
Triton itself cannot survive or refuse and only the gateway can shield.

The endpoints, their inputs and datatypes come from model_repository/*/config.pbtxt.
"""

from __future__ import annotations

import io
import json
import random
import re
import struct
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2, service_pb2

SEED = 25_08
REPOSITORY = Path(__file__).resolve().parents[1] / "model_repository"
# text_generation (vLLM) is served by its own test server (tests/integration/conftest.py: its load and memory are
# paid by generation tests only); its bad-input corpus is BAD_REQUESTS in tests/integration/test_text_generation.py.
PUBLIC = ("text_embedding", "text_embedding_exact", "image_classification", "retrieval")
INTERNAL = ("tokenizer", "text_encoder", "sentence_embedder", "image_preprocess", "image_classifier")
BOTH = ("direct", "gateway")
# What Triton 2.51 itself answers wrong before any model of ours sees the request, so that only the
# gateway can refuse it: such cases are sent through the gateway only. (case id pattern, reason)
JSON_500 = ("Triton 2.51's HTTP frontend answers a body it cannot parse or type-check with 500 (its JSON errors are "
            "INTERNAL) before any model sees it")
# Groups (Case.group) whose direct answer was such a 500 on 2026-12-03, besides the kinds that are that whole.
JSON_500_KINDS = ("body", "truncated", "nesting", "inputs-type", "missing-field", "name-type", "datatype-type",
                  "shape-type", "data-type", "id", "structure")
JSON_500_GROUPS = frozenset((
    "http-TOP_K-json-NoneType-None", "http-TOP_K-json-bool-True", "http-TOP_K-json-float-1_5",
    "http-TOP_K-json-float-3_0", "http-TOP_K-json-float-inf", "http-TOP_K-json-int-18446744073709551619",
    "http-TOP_K-json-str-3", "http-binary-size-float", "http-binary-size-negative", "http-binary-size-null",
    "http-binary-size-string", "http-binary-size-uint64-past", "http-datatype-FP64", "http-datatype-INT32",
    "http-generate-SEED-18446744073709551617", "http-generate-SEED-1_5", "http-generate-SEED-x",
    "http-generate-TOP_P-x", "http-generate-array", "http-generate-brace", "http-generate-empty",
    "http-generate-max-tokens-1_5", "http-generate-max-tokens-string", "http-generate-null", "http-generate-number",
    "http-generate-parameters-string", "http-generate-prompt-null", "http-generate_stream-TEMPERATURE-nan",
    "http-generate_stream-TEMPERATURE-x", "http-generate_stream-brace", "http-generate_stream-max-tokens-wrap64",
    "http-generate_stream-number", "http-generate_stream-prompt-number", "http-generate_stream-prompt-object",
    "http-generate_stream-stop-number", "http-generate_stream-truncated", "http-header-length-exp",
    "http-header-length-minus-one", "http-header-length-missing", "http-header-length-plus-one",
    "http-internal-generate", "http-outputs-binary-not-bool", "http-outputs-classification-negative",
    "http-outputs-classification-string", "http-outputs-no-name", "http-outputs-null-name", "http-outputs-number",
    "http-outputs-string", "http-parameters-binary-output-not-bool", "http-parameters-list",
    "http-parameters-priority-negative", "http-parameters-priority-uint64-past",
    "http-parameters-sequence-id-negative", "http-parameters-sequence-start-string", "http-parameters-string",
    "http-parameters-timeout-huge", "http-parameters-timeout-negative", "http-shape-exp-number", "http-shape-float",
    "http-shape-int64-min", "http-shape-minus-two", "http-shape-negative", "http-shape-nested",
    "http-shape-null-dim", "http-shape-string", "http-shape-uint64-past",
))
TRITON_LIMITS = (
    (r"(http|grpc|stream)-\w+-outputs-classification-bytes-output",
     "crash: the classification extension on a BYTES output kills tritonserver (SIGFPE)"),
    (r"(grpc|stream)-\w+-protobuf-(garbage|ff|truncated|length-lies)(-\d+)?",
     "Triton 2.51 answers a gRPC message it cannot parse INTERNAL 'Unable to parse request' (on a stream it drops "
     "it without an answer)"),
    (r"http-\w+-(headers-huge-value|chunked-bad-size|chunked-size-overflow|model-name-long|target-asterisk|"
     r"target-no-slash|target-raw-space)(-\d+)?",
     "Triton 2.51's HTTP server closes the connection without an answer (or waits forever) on a request line, "
     "header or chunk size it cannot read"),
    (r"http-\w+-(body-empty|shape-uint32-wrap|header-length-(hex|empty|float|abc|zero)|headers-gzip-not-gzip|"
     r"headers-deflate-not-deflate|data-count-nested-deeper|generate(_stream)?-deep-1000)(-\d+)?",
     "Triton 2.51's HTTP frontend reads it as another request (an empty body or an undecodable one as empty "
     "text, a shape wrapped to 32 bits, a header length it cannot parse as none, nested arrays of any depth "
     "flattened) before any model sees it"),
)


TRITON_LIMITS += (
    (r"(grpc|stream)-\w+-shape-[\w-]+-(typed|raw)",
     "Triton 2.51's gRPC frontend reads a lying shape as another request (a batch size kept in 32 bits, a "
     "dimension of 0 or a huge one served with the data sent) before any model sees it"),
    (r"(grpc|http)-text_encoder-internal-input-[\w-]+",
     "text_encoder is an ensemble's internal step, served by Triton's native onnxruntime backend in production "
     "(the local stand-in answers as it does: ONNX Runtime's own errors, a whole batch failing); tenants cannot "
     "reach it (the gateway answers NOT_FOUND)"),
    (r"http-\w+-\w+-generate(_stream)?-(int-18446744073709551618|int--9223372036854775809|int-18446744073709551619|"
     r"float-.*|str-.*|bool-.*|NoneType-.*)",
     JSON_500),
)


def triton_limit(case: "Case") -> str:
    """Why only the gateway can answer the case right ('' when Triton itself can)."""
    for pattern, reason in TRITON_LIMITS:
        if re.fullmatch(pattern, case.id):
            return reason
    if case.protocol == "http" and (case.group in JSON_500_GROUPS or case.kind in JSON_500_KINDS
                                    and case.group != "http-body-valid"):
        return JSON_500
    return ""
GATEWAY_ONLY = ("gateway",)

DTYPES = {  # config enum name -> (KServe datatype, numpy dtype, ModelInferRequest contents field)
    "TYPE_BOOL": ("BOOL", np.bool_, "bool_contents"), "TYPE_UINT8": ("UINT8", np.uint8, "uint_contents"),
    "TYPE_INT32": ("INT32", np.int32, "int_contents"), "TYPE_INT64": ("INT64", np.int64, "int64_contents"),
    "TYPE_FP32": ("FP32", np.float32, "fp32_contents"), "TYPE_STRING": ("BYTES", np.object_, "bytes_contents"),
}
NUMPY = {"BOOL": np.bool_, "UINT8": np.uint8, "INT8": np.int8, "INT16": np.int16, "UINT16": np.uint16,
         "INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64, "UINT64": np.uint64, "FP16": np.float16,
         "FP32": np.float32, "FP64": np.float64, "BYTES": np.object_}
CONTENTS = {"BOOL": "bool_contents", "UINT8": "uint_contents", "UINT32": "uint_contents", "INT32": "int_contents",
            "INT8": "int_contents", "INT16": "int_contents", "INT64": "int64_contents", "UINT64": "uint64_contents",
            "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}


# --------------------------------------------------------------------------------------------- tensors

@dataclass(frozen=True)
class Tensor:
    """One input: its name, KServe datatype, shape and row-major values (bytes for BYTES)."""
    name: str
    datatype: str
    shape: tuple[int, ...]
    values: tuple

    def array(self) -> np.ndarray:
        if self.datatype == "BYTES":
            return np.array(list(self.values), dtype=np.object_).reshape(self.shape)
        return np.array(self.values, dtype=NUMPY[self.datatype]).reshape(self.shape)

    def raw(self) -> bytes:
        """Triton's binary form: BYTES as 4-byte little-endian length + bytes per element."""
        if self.datatype == "BYTES":
            return b"".join(struct.pack("<I", len(v)) + v for v in self.values)
        return np.array(self.values, dtype=NUMPY[self.datatype]).tobytes()

    def json_data(self) -> list:
        if self.datatype == "BYTES":
            return [v.decode("utf-8") for v in self.values]
        return [bool(v) if self.datatype == "BOOL" else (float(v) if self.datatype.startswith("FP") else int(v))
                for v in self.values]

    def json_ok(self) -> bool:   # BYTES that are not UTF-8 text cannot travel as JSON strings
        if self.datatype != "BYTES":
            return True
        try:
            for v in self.values:
                v.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False


@dataclass(frozen=True)
class Clean:
    """A valid request: what a correct success must answer (compared with this request sent cleanly)."""
    model: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[str, ...] = ()   # asked-for outputs; () = all
    decoupled: bool = False


# --------------------------------------------------------------------------------------------- cases

@dataclass(frozen=True)
class HttpRequest:
    method: str
    target: bytes                       # the request target as sent (may hold any byte)
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    content_length: bool = True         # add Content-Length (False: the case's headers frame the body)
    answer: str = "infer"               # how a success is read: infer | generate | generate_stream | any

    def wire(self, host: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> bytes:
        lines = [self.method.encode() + b" " + self.target + b" HTTP/1.1", b"Host: " + host.encode(),
                 b"Connection: close"]
        for k, v in (*extra, *self.headers):
            lines.append(k + b": " + v)
        if self.content_length:
            lines.append(b"Content-Length: " + str(len(self.body)).encode())
        return b"\r\n".join(lines) + b"\r\n\r\n" + self.body

    def describe(self) -> str:
        body = self.body if len(self.body) <= 240 else self.body[:200] + b"..." + f"[{len(self.body)} bytes]".encode()
        target = self.target if len(self.target) <= 160 else self.target[:120] + f"...[{len(self.target)}]".encode()
        heads = " ".join(f"{k.decode('latin-1')}: {v[:80].decode('latin-1')}" for k, v in self.headers)
        return f"HTTP {self.method} {target.decode('latin-1')!r} {heads} body={body!r}"


@dataclass(frozen=True)
class GrpcMessage:
    data: bytes                         # a serialized ModelInferRequest, or bytes that are not one
    clean: Clean | None = None          # this message's meaning, when it is valid
    note: str = ""


@dataclass(frozen=True)
class Case:
    id: str
    endpoint: str                       # the model the request is aimed at
    protocol: str                       # http | grpc | grpc_stream
    kind: str                           # the category of malformation
    clean: Clean | None                 # None: only a refusal is correct
    paths: tuple[str, ...] = BOTH
    internal: bool = False              # aimed at an internal step model: the gateway must refuse it
    http: HttpRequest | None = None
    messages: tuple[GrpcMessage, ...] = ()   # grpc: one; grpc_stream: the malformed one(s) then a canary
    canary: int | None = None           # index in messages of the valid message that must succeed (streams)
    group: str = ""                     # the same malformation aimed at other endpoints shares it
    direct_limit: str = ""              # why only the gateway can answer it right (then paths is gateway-only)
    crashes_triton: bool = False        # Triton 2.51 dies of it (sent through the gateway only, last)

    def describe(self) -> str:
        if self.http:
            return self.http.describe()
        parts = []
        for m in self.messages:
            try:
                msg = service_pb2.ModelInferRequest.FromString(m.data)
                text = text_format.MessageToString(msg, as_one_line=True, print_unknown_fields=True)
                if msg.raw_input_contents:
                    text = text.split(" raw_input_contents:")[0] + f" raw_input_contents: {[r[:24] for r in msg.raw_input_contents]}"
            except Exception:   # noqa: BLE001 - not a protobuf: show the bytes
                text = f"bytes {m.data[:80]!r} ({len(m.data)} bytes)"
            if len(text) > 600:
                text = text[:560] + f"...[{len(text)} chars]"
            parts.append(("canary: " if m.clean and m is self.messages[self.canary or 0] and self.canary is not None
                           else "") + text)
        return f"{self.protocol} " + " | ".join(parts)


# --------------------------------------------------------------------------------------------- endpoints

@dataclass(frozen=True)
class InputSpec:
    name: str
    datatype: str
    dims: tuple[int, ...]
    optional: bool


@dataclass(frozen=True)
class Endpoint:
    name: str
    max_batch: int
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    decoupled: bool

    def input(self, name: str) -> InputSpec:
        return next(i for i in self.inputs if i.name == name)


def load_config(name: str) -> model_config_pb2.ModelConfig:
    return text_format.Parse((REPOSITORY / name / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())


@lru_cache(maxsize=None)
def endpoint(name: str) -> Endpoint:
    config = load_config(name)
    inputs = tuple(InputSpec(i.name, DTYPES[model_config_pb2.DataType.Name(i.data_type)][0], tuple(i.dims),
                             i.optional) for i in config.input)
    return Endpoint(name, config.max_batch_size, inputs, tuple(o.name for o in config.output),
                    config.model_transaction_policy.decoupled)


@lru_cache(maxsize=1)
def sample_jpeg() -> bytes:
    """A small real photo (scikit-image's chelsea, 96x64) as JPEG."""
    import skimage.data
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(skimage.data.chelsea()).resize((96, 64)).save(out, "JPEG", quality=85)
    return out.getvalue()


TEXT = b"a cat sits on the mat"
GOOD_VALUES = {   # input -> values of the one-item baseline request, per model
    "text_embedding": {"TEXT": [TEXT]},
    "text_embedding_exact": {"TEXT": [TEXT]},
    "sentence_embedder": {"TEXT": [TEXT]},
    "tokenizer": {"TEXT": [TEXT]},
    "image_classification": {"IMAGE": None},   # sample_jpeg()
    "image_preprocess": {"IMAGE": None},
    "retrieval": {"TEXT": [b"text editor for programmers"], "TOP_K": [3]},
    "text_generation": {"text_input": [b"Say hi."], "sampling_parameters": [b'{"max_tokens": 2}']},
    "text_encoder": {"input_ids": [101, 1037, 4937, 102], "attention_mask": [1, 1, 1, 1],
                     "token_type_ids": [0, 0, 0, 0]},
    "image_classifier": {"PIXELS": None},       # zeros, 224x224x3
}


def tensor(ep: Endpoint, name: str, values: list, batch: int = 1) -> Tensor:
    spec = ep.input(name)
    dims = list(spec.dims)
    if -1 in dims:
        dims[dims.index(-1)] = len(values) // batch // max(1, int(np.prod([d for d in dims if d != -1])))
    shape = ([batch] if ep.max_batch > 0 else []) + dims
    return Tensor(name, spec.datatype, tuple(shape), tuple(values))


def good_inputs(name: str) -> tuple[Tensor, ...]:
    ep = endpoint(name)
    out = []
    for input_name, values in GOOD_VALUES[name].items():
        if values is None:
            values = [sample_jpeg()] if input_name == "IMAGE" else [0] * (224 * 224 * 3)
        out.append(tensor(ep, input_name, values))
    return tuple(out)


def clean(name: str, inputs: tuple[Tensor, ...] | None = None, outputs: tuple[str, ...] = ()) -> Clean:
    return Clean(name, inputs if inputs is not None else good_inputs(name), outputs, endpoint(name).decoupled)


def with_input(inputs: tuple[Tensor, ...], t: Tensor) -> tuple[Tensor, ...]:
    return tuple(t if i.name == t.name else i for i in inputs) + (() if any(i.name == t.name for i in inputs) else (t,))


# --------------------------------------------------------------------------------------------- HTTP bodies

def http_input(t: Tensor, binary: bool) -> tuple[dict, bytes]:
    entry = {"name": t.name, "shape": list(t.shape), "datatype": t.datatype}
    if binary:
        raw = t.raw()
        entry["parameters"] = {"binary_data_size": len(raw)}
        return entry, raw
    entry["data"] = t.json_data()
    return entry, b""


def infer_json(inputs, outputs=None, binary: bool | None = None, **extra) -> tuple[dict, bytes]:
    """(header JSON, binary tail) for /infer; binary when any BYTES value is not UTF-8 (or when asked)."""
    entries, tail = [], b""
    for t in inputs:
        entry, raw = http_input(t, binary if binary is not None else not t.json_ok())
        entries.append(entry)
        tail += raw
    doc = {"inputs": entries, **extra}
    if outputs is not None:
        doc["outputs"] = [{"name": o} if isinstance(o, str) else o for o in outputs]
    return doc, tail


def infer_body(doc, tail: bytes = b"") -> tuple[bytes, tuple[tuple[bytes, bytes], ...]]:
    header = json.dumps(doc).encode() if not isinstance(doc, bytes) else doc
    if not tail:
        return header, ()
    return header + tail, ((b"Inference-Header-Content-Length", str(len(header)).encode()),)


def model_path(model: str, suffix: str = "infer", version: str | None = None) -> bytes:
    v = f"/versions/{version}" if version is not None else ""
    return f"/v2/models/{model}{v}/{suffix}".encode()


def nested(depth: int, leaf: str = "1") -> str:
    return "[" * depth + leaf + "]" * depth


# --------------------------------------------------------------------------------------------- gRPC messages

def infer_request(model: str, inputs: tuple[Tensor, ...], outputs: tuple[str, ...] = (), version: str = "",
                  raw: bool = True, request_id: str = "", **params) -> service_pb2.ModelInferRequest:
    msg = service_pb2.ModelInferRequest(model_name=model, model_version=version, id=request_id)
    for t in inputs:
        entry = msg.inputs.add(name=t.name, datatype=t.datatype, shape=list(t.shape))
        if raw:
            msg.raw_input_contents.append(t.raw())
        else:
            values = list(t.values) if t.datatype == "BYTES" else t.array().reshape(-1).tolist()
            getattr(entry.contents, CONTENTS[t.datatype]).extend(values)
    for o in outputs:
        msg.outputs.add(name=o)
    for key, value in params.items():
        set_param(msg.parameters[key], value)
    return msg


def set_param(p: service_pb2.InferParameter, value) -> None:
    if isinstance(value, bool):
        p.bool_param = value
    elif isinstance(value, int):
        if value >= 2**63:
            p.uint64_param = value
        else:
            p.int64_param = value
    elif isinstance(value, float):
        p.double_param = value
    else:
        p.string_param = value


def clean_request(c: Clean, request_id: str = "") -> service_pb2.ModelInferRequest:
    return infer_request(c.model, c.inputs, c.outputs, request_id=request_id)


def stream_params(msg: service_pb2.ModelInferRequest) -> service_pb2.ModelInferRequest:
    msg.parameters["triton_enable_empty_final_response"].bool_param = True
    return msg


# --------------------------------------------------------------------------------------------- the corpus

class Builder:
    def __init__(self, seed: int = SEED):
        self.rng = random.Random(seed)
        self.cases: list[Case] = []
        self._ids: set[str] = set()

    def add(self, case: Case) -> None:
        prefix, rest = case.id.split("-", 1)
        case = replace(case, group=prefix + "-" + rest.removeprefix(case.endpoint + "-"))
        limit = triton_limit(case)
        if limit:
            case = replace(case, paths=GATEWAY_ONLY, direct_limit=limit, crashes_triton=limit.startswith("crash"))
        base, n = case.id, 2
        while case.id in self._ids:
            case = replace(case, id=f"{base}-{n}")
            n += 1
        self._ids.add(case.id)
        self.cases.append(case)

    def http(self, model: str, kind: str, name: str, body: bytes, c: Clean | None, *, target: bytes | None = None,
             headers=(), paths=BOTH, method="POST", content_length=True, answer="infer", internal=False) -> None:
        req = HttpRequest(method, target if target is not None else model_path(model), tuple(headers), body,
                          content_length, answer)
        self.add(Case(f"http-{model}-{kind}-{name}", model, "http", kind, c, paths, internal, http=req))

    def http_doc(self, model: str, kind: str, name: str, doc, c: Clean | None, tail: bytes = b"", **kw) -> None:
        body, headers = infer_body(doc, tail)
        self.http(model, kind, name, body, c, headers=(*headers, *kw.pop("headers", ())), **kw)

    def grpc(self, model: str, kind: str, name: str, msg, c: Clean | None, paths=BOTH, internal=False) -> None:
        data = msg if isinstance(msg, bytes) else msg.SerializeToString()
        if c is not None and endpoint(c.model).decoupled and not internal:
            # ModelInfer cannot carry a decoupled model's responses: only a refusal is correct there.
            c = None
        self.add(Case(f"grpc-{model}-{kind}-{name}", model, "grpc", kind, c, paths, internal,
                      messages=(GrpcMessage(data, c),)))

    def stream(self, model: str, kind: str, name: str, msg, c: Clean | None, paths=BOTH, internal=False,
               canary: str | None = None) -> None:
        """The malformed message, then a clean request to `canary` (the case's public endpoint): the stream
        must still serve it."""
        if not isinstance(msg, bytes):
            msg = stream_params(msg).SerializeToString()
        canary_model = canary or (model if model in PUBLIC else "text_embedding")
        cc = clean(canary_model)
        canary_msg = stream_params(clean_request(cc, request_id="canary")).SerializeToString()
        self.add(Case(f"stream-{model}-{kind}-{name}", model, "grpc_stream", kind, c, paths, internal,
                      messages=(GrpcMessage(msg, c), GrpcMessage(canary_msg, cc)), canary=1))


# -- HTTP /infer over one endpoint

def http_infer_cases(b: Builder, model: str) -> None:
    ep = endpoint(model)
    if ep.decoupled:   # Triton answers /infer for a decoupled model 501 before it reads the body
        doc, tail = infer_json(good_inputs(model))
        body = json.dumps(doc).encode()
        for name, raw in {"valid": body, "brace": b"{", "empty": b"", "deep-1000": nested(1000).encode()}.items():
            b.http(model, "infer-decoupled", name, raw, None)
        return
    good = good_inputs(model)
    c = clean(model)
    if ep.decoupled:
        c_http = None        # /infer cannot carry a decoupled model's responses
    else:
        c_http = c
    doc, tail = infer_json(good)
    json_ok = not tail
    body, hdrs = infer_body(doc, tail)
    first = good[0]
    rng = b.rng

    # the body as bytes
    b.http(model, "body", "valid", body, c_http, headers=hdrs)
    for name, raw in {"empty": b"", "brace": b"{", "close-brace": b"}", "null": b"null", "array": b"[]",
                      "number": b"1", "string": b'"x"', "true": b"true", "nul": b"\x00", "garbage": bytes(range(256)),
                      "bom": b"\xef\xbb\xbf" + body, "trailing-garbage": body + b"}}garbage",
                      "two-docs": body + body, "single-quotes": body.replace(b'"', b"'"),
                      "nan-literal": b'{"inputs": NaN}', "comment": b"/*x*/" + body}.items():
        b.http(model, "body", name, raw, c_http if name == "bom" else None,
               headers=hdrs if name in ("bom", "trailing-garbage", "comment") else ())
    header = json.dumps(doc).encode()
    for cut in sorted({1, 2, len(header) // 3, len(header) // 2, len(header) - 2, len(header) - 1,
                       rng.randrange(3, len(header) - 3)}):
        b.http(model, "truncated", f"at-{cut}", header[:cut], None)
    if json_ok:
        b.http(model, "body", "invalid-utf8-in-string", header.replace(b'"inputs"', b'"inp\xffuts"'), None)
        b.http(model, "body", "invalid-utf8-in-data", header.replace(first.json_data()[0].encode()[:4]
                                                                       if first.datatype == "BYTES" else b'"data"',
                                                                       b"\xff\xfe\xfd", 1), None)
    # deep nesting: 1,000 everywhere; 10,000 only through the gateway (Triton 2.51's parser is recursive)
    for depth, paths in ((1_000, BOTH), (10_000, GATEWAY_ONLY)):
        b.http(model, "nesting", f"top-{depth}", nested(depth).encode(), None, paths=paths)
        d = json.loads(header)
        d["inputs"][0]["data"] = "@@"
        b.http(model, "nesting", f"data-{depth}", json.dumps(d).encode().replace(b'"@@"', nested(depth).encode()),
               None, paths=paths)
        d = json.loads(header)
        d["parameters"] = "@@"
        b.http(model, "nesting", f"parameters-{depth}",
               json.dumps(d).encode().replace(b'"@@"', ('{"a":' * depth + "1" + "}" * depth).encode()), None,
               paths=paths)

    # the document's structure
    base = json.loads(header)

    def variant(kind, name, mutate, expect=None, t=tail):
        d = json.loads(json.dumps(base))
        mutate(d)
        b.http_doc(model, kind, name, d, expect, t)

    variant("structure", "no-inputs", lambda d: d.pop("inputs"), t=b"")
    for name, value in {"object": {}, "string": "x", "null": None, "number": 1, "empty-list": [],
                        "list-of-number": [1], "list-of-string": ["TEXT"], "list-of-null": [None],
                        "list-of-list": [[]]}.items():
        variant("inputs-type", name, lambda d, v=value: d.__setitem__("inputs", v), t=b"")
    for key in ("name", "shape", "datatype") + (("data",) if json_ok else ("parameters",)):
        variant("missing-field", key, lambda d, k=key: d["inputs"][0].pop(k))
    wrong = {"number": 1, "null": None, "list": [], "object": {}, "bool": True, "float": 1.5,
             "long-string": "x" * 5000}
    for key in ("name", "datatype", "shape"):
        for name, value in wrong.items():
            variant(f"{key}-type", name, lambda d, k=key, v=value: d["inputs"][0].__setitem__(k, v))
    if json_ok:
        for name, value in {"number": 1, "null": None, "object": {}, "bool": True, "string": "x",
                            "nested-object": [{"a": 1}], "list-of-null": [None]}.items():
            variant("data-type", name, lambda d, v=value: d["inputs"][0].__setitem__("data", v))
    # datatypes and shapes
    for dt in ("STRING", "bytes", "", "FP8", "INT32" if first.datatype == "BYTES" else "BYTES", "FP64", "BOOL",
               "BF16"):
        variant("datatype", dt or "empty", lambda d, v=dt: d["inputs"][0].__setitem__("datatype", v))
    n = int(np.prod(first.shape))
    batch_dims = list(first.shape)
    shapes = {"scalar": [], "no-batch-dim": batch_dims[1:], "extra-dim": batch_dims + [1],
              "negative": [-1] + batch_dims[1:], "zero": [0] + batch_dims[1:], "minus-two": [-2] + batch_dims[1:],
              "float": [1.5] + batch_dims[1:], "string": ["1"] + batch_dims[1:], "null-dim": [None] + batch_dims[1:],
              "nested": [batch_dims], "over-max-batch": [max(ep.max_batch, 1) + 1] + batch_dims[1:],
              "int32-overflow": [2**31] + batch_dims[1:], "uint32-wrap": [2**32 + 1] + batch_dims[1:],
              "int64-max": [2**63 - 1] + batch_dims[1:], "uint64-past": [2**64 + 1] + batch_dims[1:],
              "int64-min": [-(2**63)] + batch_dims[1:], "huge-inner": batch_dims[:-1] + [10**9],
              "huge-product": [2**20, 2**20, 2**20], "exp-number": [1e30] + batch_dims[1:],
              "two-items-declared": [2] + batch_dims[1:]}
    if ep.max_batch == 0:
        del shapes["no-batch-dim"]
    for name, shape in shapes.items():
        variant("shape", name, lambda d, s=shape: d["inputs"][0].__setitem__("shape", s))
    if json_ok:
        data = base["inputs"][0]["data"]
        variant("data-count", "none", lambda d: d["inputs"][0].__setitem__("data", []))
        variant("data-count", "extra", lambda d: d["inputs"][0].__setitem__("data", data + data))
        variant("data-count", "nested-deeper", lambda d: d["inputs"][0].__setitem__("data", [[[data]]]))
        if n == 1:
            # the data nested the shape's way is the same request
            variant("data-nesting", "shaped", lambda d: d["inputs"][0].__setitem__("data", [data]), expect=c_http)
    # inputs: unknown, extra, duplicated, missing, wrong-case names
    variant("inputs", "unknown-name", lambda d: d["inputs"][0].__setitem__("name", "BOGUS"))
    variant("inputs", "lowercase-name", lambda d: d["inputs"][0].__setitem__("name", first.name.lower()))
    variant("inputs", "name-with-nul", lambda d: d["inputs"][0].__setitem__("name", first.name + "\x00"), expect=c_http)
    variant("inputs", "extra-input", lambda d: d["inputs"].append(
        {"name": "BOGUS", "shape": [1, 1], "datatype": "BYTES", "data": ["x"]}))
    if json_ok:
        variant("inputs", "duplicated", lambda d: d["inputs"].append(json.loads(json.dumps(d["inputs"][0]))))
    required = [i for i in ep.inputs if not i.optional]
    for spec in required:
        d = json.loads(header)
        d["inputs"] = [e for e in d["inputs"] if e["name"] != spec.name]
        keep = [t for t in good if t.name != spec.name]
        doc2, tail2 = infer_json(keep)
        if not doc2["inputs"]:
            doc2 = {"inputs": []}
        b.http_doc(model, "inputs", f"missing-{spec.name}", doc2, None, tail2)
    # outputs
    out0 = next(o for o in ep.outputs if o not in ("LABELS", "IDS", "DOCUMENTS", "TEXT_DELTA", "FINISH_REASON"))
    valid_outputs = ("duplicated",)
    for name, outs in {"unknown": [{"name": "BOGUS"}], "string": "EMBEDDING", "null-name": [{"name": None}],
                       "no-name": [{}], "number": [1], "duplicated": [{"name": out0}, {"name": out0}],
                       "binary-not-bool": [{"name": out0, "parameters": {"binary_data": "yes"}}],

                       "classification-negative": [{"name": out0, "parameters": {"classification": -5}}],
                       "classification-string": [{"name": out0, "parameters": {"classification": "x"}}],
                       "classification-bytes-output": [{"name": next((o for o in ep.outputs if o in
                                                                     ("LABELS", "IDS", "DOCUMENTS", "TEXT_DELTA")),
                                                                    out0), "parameters": {"classification": 2}}]}.items():
        variant("outputs", name, lambda d, v=outs: d.__setitem__("outputs", v),
                expect=clean(model, good, (out0,)) if name in valid_outputs and c_http else None)
    # request-level fields
    for name, params in {"string": "x", "list": [1], "binary-output-not-bool": {"binary_data_output": "yes"},
                        "sequence-id-negative": {"sequence_id": -1}, "sequence-start-string": {"sequence_start": "x"},
                        "priority-uint64-past": {"priority": 2**64 + 1}, "priority-negative": {"priority": -1},
                        "timeout-negative": {"timeout": -1}, "timeout-huge": {"timeout": 2**64},
                        "shm-region-unknown": {"shared_memory_region": "nope"}}.items():
        variant("parameters", name, lambda d, v=params: d.__setitem__("parameters", v),
                expect=None if name in ("string", "list") else c_http)
    variant("parameters", "input-shm-unknown", lambda d: d["inputs"][0].setdefault("parameters", {}).update(
        shared_memory_region="nope", shared_memory_byte_size=8))
    variant("parameters", "input-shm-size-negative", lambda d: d["inputs"][0].setdefault("parameters", {}).update(
        shared_memory_region="nope", shared_memory_byte_size=-1, shared_memory_offset=2**62))
    variant("id", "number", lambda d: d.__setitem__("id", 12))
    variant("id", "object", lambda d: d.__setitem__("id", {"a": 1}))

    # the binary extension: the same inputs as binary tensors
    doc_b, tail_b = infer_json(good, binary=True)
    header_b = json.dumps(doc_b).encode()
    valid_b = header_b + tail_b
    hlen = len(header_b)
    b.http(model, "binary", "valid", valid_b, c_http,
           headers=[(b"Inference-Header-Content-Length", str(hlen).encode())])
    for name, value in {"abc": b"abc", "negative": b"-1", "zero": b"0", "larger-than-body": str(len(valid_b) + 100).encode(),
                        "huge": b"18446744073709551617", "float": f"{hlen}.5".encode(), "hex": hex(hlen).encode(),
                        "plus-one": str(hlen + 1).encode(), "minus-one": str(hlen - 1).encode(), "empty": b"",
                        "spaces": f" {hlen} ".encode(), "exp": b"1e3"}.items():
        b.http(model, "header-length", name, valid_b, c_http if name in ("spaces",) else None,
               headers=[(b"Inference-Header-Content-Length", value)])
    # a binary body sent without the header: the JSON parser sees the tail
    b.http(model, "header-length", "missing", valid_b, None)
    size = len(tail_b)
    for name, value in {"negative": -1, "zero": 0, "one-less": size - 1, "one-more": size + 1, "huge": 2**62,
                        "uint64-past": 2**64 + 3, "string": "8", "float": 1.5, "null": None}.items():
        d = json.loads(header_b)
        d["inputs"][0]["parameters"]["binary_data_size"] = value
        hb = json.dumps(d).encode()
        b.http(model, "binary-size", name, hb + tail_b, None,
               headers=[(b"Inference-Header-Content-Length", str(len(hb)).encode())])
    d = json.loads(header_b)
    d["inputs"][0]["data"] = d["inputs"][0]["data"] if "data" in d["inputs"][0] else ["x"]
    hb = json.dumps(d).encode()
    b.http(model, "binary-size", "and-data", hb + tail_b, None,
           headers=[(b"Inference-Header-Content-Length", str(len(hb)).encode())])
    if first.datatype == "BYTES":
        v = first.values[0]
        for name, raw in {"length-prefix-lies": struct.pack("<I", len(v) + 1000) + v,
                          "length-prefix-short": struct.pack("<I", 2) + v,
                          "length-prefix-truncated": b"\x05\x00", "length-prefix-max": b"\xff\xff\xff\xff" + v,
                          "two-elements": first.raw() + first.raw()}.items():
            d = json.loads(header_b)
            d["inputs"][0]["parameters"]["binary_data_size"] = len(raw)
            rest = tail_b[len(first.raw()):]
            hb = json.dumps(d).encode()
            b.http(model, "binary-bytes", name, hb + raw + rest, None,
                   headers=[(b"Inference-Header-Content-Length", str(len(hb)).encode())])
    # content encodings and types
    b.http(model, "headers", "gzip-not-gzip", body, c_http, headers=[*hdrs, (b"Content-Encoding", b"gzip")])
    b.http(model, "headers", "deflate-not-deflate", body, c_http, headers=[*hdrs, (b"Content-Encoding", b"deflate")])
    b.http(model, "headers", "unknown-encoding", body, c_http if False else None,
           headers=[*hdrs, (b"Content-Encoding", b"br")])
    import gzip as _gzip
    b.http(model, "headers", "gzip-valid", _gzip.compress(body, mtime=0), c_http,
           headers=[*hdrs, (b"Content-Encoding", b"gzip")])
    b.http(model, "headers", "gzip-truncated", _gzip.compress(body, mtime=0)[:-12], None,
           headers=[*hdrs, (b"Content-Encoding", b"gzip")])
    b.http(model, "headers", "content-type-text", body, c_http, headers=[*hdrs, (b"Content-Type", b"text/plain")])
    b.http(model, "headers", "accept-gzip", body, c_http, headers=[*hdrs, (b"Accept-Encoding", b"gzip")])
    b.http(model, "headers", "non-ascii-value", body, c_http, headers=[*hdrs, (b"X-Note", "ünïcødé".encode())])
    b.http(model, "headers", "huge-value", body, c_http, headers=[*hdrs, (b"X-Pad", b"a" * 20_000)])
    b.http(model, "headers", "many", body, c_http, headers=[*hdrs, *[(f"X-H{i}".encode(), b"v") for i in range(150)]])
    b.http(model, "headers", "header-length-twice", valid_b, c_http,
           headers=[(b"Inference-Header-Content-Length", str(hlen).encode()),
                    (b"Inference-Header-Content-Length", b"7")])
    chunks = b"".join(f"{len(body[i:i + 50]):x}\r\n".encode() + body[i:i + 50] + b"\r\n"
                      for i in range(0, len(body), 50)) + b"0\r\n\r\n"
    b.http(model, "chunked", "valid", chunks, c_http, headers=[*hdrs, (b"Transfer-Encoding", b"chunked")],
           content_length=False)
    b.http(model, "chunked", "bad-size", b"zz\r\n" + body + b"\r\n0\r\n\r\n", None,
           headers=[*hdrs, (b"Transfer-Encoding", b"chunked")], content_length=False)
    b.http(model, "chunked", "size-overflow", b"ffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n", None,
           headers=[*hdrs, (b"Transfer-Encoding", b"chunked")], content_length=False)
    b.http(model, "chunked", "with-content-length", chunks, None,
           headers=[*hdrs, (b"Transfer-Encoding", b"chunked"), (b"Content-Length", b"5")], content_length=False)
    # methods
    for method in ("GET", "PUT", "DELETE", "PATCH"):
        b.http(model, "method", method.lower(), body if method != "GET" else b"", None, method=method, headers=hdrs)


def numeric_cases(b: Builder, model: str, name: str, rules: dict) -> None:
    """Values of one numeric input, over HTTP JSON, HTTP binary and gRPC; rules: value -> the valid
    value it means (then a success must equal that request's answer) or None (must be refused)."""
    ep = endpoint(model)
    good = good_inputs(model)
    spec = ep.input(name)
    for value, means in rules:
        label = (f"str-{value}" if isinstance(value, str) else type(value).__name__ + "-" + str(value).replace(".", "_"))
        c = None if means is None else clean(model, with_input(good, tensor(ep, name, [means])))
        c_http = None if ep.decoupled else c
        # JSON: the value as written
        d, tail = infer_json(with_input(good, tensor(ep, name, [0])))
        for e in d["inputs"]:
            if e["name"] == name:
                e["data"] = [value]
        if ep.decoupled:   # /infer is 501 for it: the value over generate_stream
            gen = {"PROMPT": "Say hi.", "MAX_TOKENS": 2, name: value}
            b.http(model, f"{name}-generate_stream", label, json.dumps(gen).encode(), c,
                   target=model_path(model, "generate_stream"), answer="generate_stream")
        else:
            b.http_doc(model, f"{name}-json", label, d, c_http, tail)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            # gRPC: the value in the input's own datatype when it fits, and in a wider one (INT64 for an
            # integer, FP32 for a float): raw or typed contents, drawn with the seed
            for dt in dict.fromkeys((spec.datatype, "FP32" if isinstance(value, float) else "INT64")):
                arr_dt = NUMPY[dt]
                if dt.startswith("FP"):
                    v = float(value)
                elif isinstance(value, float) and (value != value or abs(value) == float("inf") or value != int(value)):
                    continue
                else:
                    info = np.iinfo(arr_dt)
                    if not info.min <= int(value) <= info.max:
                        continue
                    v = int(value)
                t = Tensor(name, dt, tuple(tensor(ep, name, [0]).shape), (v,))
                meant = c if dt == spec.datatype else None
                raw = b.rng.random() < 0.5
                if model == "text_generation":
                    b.stream(model, f"{name}-stream", f"{label}-{dt}", infer_request(model, with_input(good, t), raw=raw),
                             meant)
                else:
                    b.grpc(model, f"{name}-{'raw' if raw else 'typed'}", f"{label}-{dt}",
                           infer_request(model, with_input(good, t), raw=raw), meant)
    # raw contents of the wrong length for this input
    shape = tuple(tensor(ep, name, [0]).shape)
    for label, raw in {"3-bytes": b"\x01\x02\x03", "9-bytes": b"\x01" * 9, "empty": b""}.items():
        msg = infer_request(model, with_input(good, Tensor(name, spec.datatype, shape, (0,))))
        idx = [i.name for i in msg.inputs].index(name)
        msg.raw_input_contents[idx] = raw
        b.grpc(model, f"{name}-raw-length", label, msg, None)
        if model == "text_generation":
            b.stream(model, f"{name}-raw-length", label, msg, None)


def grpc_cases(b: Builder, model: str) -> None:
    ep = endpoint(model)
    good = good_inputs(model)
    c = clean(model)
    first = good[0]
    send = b.stream if ep.decoupled else b.grpc
    both = (b.grpc, b.stream)

    def g(kind, name, msg, expect=None, senders=None):
        chosen = senders or both
        if ep.decoupled and kind != "valid":
            chosen = (b.stream,)
        for s in chosen:
            s(model, kind, name, msg, expect)

    g("valid", "raw", infer_request(model, good), c)
    g("valid", "typed-contents", infer_request(model, good, raw=False), c)
    # not a ModelInferRequest
    for name, data in {"garbage": bytes(b.rng.randrange(256) for _ in range(64)), "ff": b"\xff" * 16,
                       "truncated": infer_request(model, good).SerializeToString()[:-7],
                       "length-lies": b"\x0a\xff\xff\xff\x0f" + model.encode(),
                       }.items():
        g("protobuf", name, data)
    # a known field with another wire type: protobuf keeps it as an unknown field, the message is valid
    g("protobuf", "wrong-wire-type", b"\x0d" + b"\x00" * 4 + infer_request(model, good).SerializeToString(), c)
    # model version
    for version, meant in {"1": c, "2": None, "0": None, "-1": None, "abc": None, "99999999999999999999": None,
                           " 1": c, "1.0": c, "\u0661": None}.items():
        g("version", repr(version).strip("'").replace(" ", "space") or "empty",
          infer_request(model, good, version=version), meant)
    g("id", "long", infer_request(model, good, request_id="i" * 20_000), c)
    g("id", "unicode", infer_request(model, good, request_id="ïd-\u202e-\U0001f600"), c)
    # inputs
    g("inputs", "none", infer_request(model, ()))
    g("inputs", "unknown-extra", infer_request(model, good + (Tensor("BOGUS", "BYTES", (1, 1), (b"x",)),)))
    g("inputs", "duplicated", infer_request(model, good + good[:1]))
    g("inputs", "empty-name", infer_request(model, (replace(first, name=""),) + good[1:]))
    g("inputs", "unknown-name", infer_request(model, (replace(first, name="BOGUS"),) + good[1:]))
    for spec in ep.inputs:
        if not spec.optional:
            g("inputs", f"missing-{spec.name}", infer_request(model, tuple(t for t in good if t.name != spec.name)))
    # datatypes (the same bytes announced as another type)
    for dt in ("", "STRING", "FP32", "INT32" if first.datatype != "INT32" else "INT64", "UINT8", "BF16", "bogus"):
        msg = infer_request(model, good)
        msg.inputs[0].datatype = dt
        g("datatype", dt or "empty", msg)
    # shapes
    dims = list(first.shape)
    shapes = {"scalar": [], "no-batch-dim": dims[1:], "extra-dim": dims + [1],
                        "negative": [-1] + dims[1:], "zero": [0] + dims[1:], "int64-min": [-(2**63)] + dims[1:],
                        "huge": [2**62] + dims[1:], "huge-inner": dims[:-1] + [2**40],
                        "product-overflow": [2**32, 2**32] + dims[1:], "over-max-batch": [max(ep.max_batch, 1) + 1] + dims[1:],
                        "two-items-declared": [2] + dims[1:]}
    if ep.max_batch == 0:   # no batch dimension to leave out
        del shapes["no-batch-dim"]
    for name, shape in shapes.items():
        for raw in (True, False):
            msg = infer_request(model, good, raw=raw)
            del msg.inputs[0].shape[:]
            msg.inputs[0].shape.extend(shape)
            g("shape", f"{name}-{'raw' if raw else 'typed'}", msg, senders=[b.grpc] if not raw else None)
    # contents
    msg = infer_request(model, good)
    msg.raw_input_contents.append(first.raw())
    g("contents", "raw-count-extra", msg, c)   # the surplus is ignored: a success must be correct
    msg = infer_request(model, good)
    del msg.raw_input_contents[:]
    g("contents", "raw-count-none", msg)
    msg = infer_request(model, good, raw=False)
    msg.raw_input_contents.extend(t.raw() for t in good)
    g("contents", "raw-and-typed", msg)
    for field_name, values in {"int_contents": [1], "fp32_contents": [1.5], "int64_contents": [2**40],
                               "bool_contents": [True], "bytes_contents": [b"x"], "uint64_contents": [2**64 - 1],
                               "fp64_contents": [float("nan")]}.items():
        if field_name == CONTENTS[first.datatype]:
            continue
        msg = infer_request(model, good, raw=False)
        msg.inputs[0].contents.Clear()
        getattr(msg.inputs[0].contents, field_name).extend(values * int(np.prod(first.shape)))
        g("contents", f"wrong-type-{field_name}", msg)
    msg = infer_request(model, good, raw=False)
    contents_field = getattr(msg.inputs[0].contents, CONTENTS[first.datatype])
    contents_field.extend(list(contents_field))
    g("contents", "typed-count-extra", msg)
    msg = infer_request(model, good, raw=False)
    msg.inputs[0].contents.Clear()
    g("contents", "typed-empty", msg)
    if first.datatype == "BYTES":
        v = first.values[0]
        for name, raw in {"length-prefix-lies": struct.pack("<I", len(v) + 1000) + v,
                          "length-prefix-short": struct.pack("<I", 1) + v, "length-prefix-truncated": b"\x05\x00",
                          "length-prefix-max": b"\xff\xff\xff\xff" + v, "empty": b"",
                          "two-elements": first.raw() * 2}.items():
            msg = infer_request(model, good)
            msg.raw_input_contents[0] = raw
            g("raw-bytes", name, msg)
    else:
        msg = infer_request(model, good)
        msg.raw_input_contents[0] = msg.raw_input_contents[0][:-1]
        g("raw-bytes", "one-short", msg)
    # input and request parameters
    for name, params in {"binary-size-negative": {"binary_data_size": -1}, "binary-size-huge": {"binary_data_size": 2**62},
                         "shm-unknown": {"shared_memory_region": "nope", "shared_memory_byte_size": 8},
                         "shm-negative": {"shared_memory_region": "nope", "shared_memory_byte_size": -1,
                                          "shared_memory_offset": -5},
                         "shm-size-string": {"shared_memory_region": "nope", "shared_memory_byte_size": "x"},
                         "unknown-string": {"bogus": "x"}, "unknown-uint64": {"bogus": 2**64 - 1}}.items():
        msg = infer_request(model, good)
        for k, v in params.items():
            set_param(msg.inputs[0].parameters[k], v)
        g("input-parameters", name, msg, None if name.startswith("shm") else c)   # binary_data_size is HTTP's
    for name, params in {"sequence-id-string": {"sequence_id": "x"}, "sequence-start-on-stateless": {"sequence_start": True},
                         "sequence-id-uint64": {"sequence_id": 2**64 - 1}, "priority-huge": {"priority": 2**64 - 1},
                         "priority-negative": {"priority": -1}, "priority-string": {"priority": "high"},
                         "timeout-negative": {"timeout": -1}, "timeout-string": {"timeout": "soon"},
                         "binary-output-string": {"binary_data_output": "x"},
                         "final-response-string": {"triton_enable_empty_final_response": "x"},
                         "headers-like": {"authorization": "Bearer x"},
                         "unknown-double-nan": {"bogus": float("nan")}, "long-key": {"k" * 5000: 1}}.items():
        g("parameters", name, infer_request(model, good, **params), c)   # ignorable: a success must be correct
    # outputs
    out0 = next(o for o in ep.outputs if o not in ("LABELS", "IDS", "DOCUMENTS", "TEXT_DELTA", "FINISH_REASON"))
    bytes_out = next((o for o in ep.outputs if o in ("LABELS", "IDS", "DOCUMENTS", "TEXT_DELTA")), None)
    if bytes_out:
        msg = infer_request(model, good, outputs=(bytes_out,))
        set_param(msg.outputs[0].parameters["classification"], 2)
        g("outputs", "classification-bytes-output", msg)
    g("outputs", "unknown", infer_request(model, good, outputs=("BOGUS",)))
    g("outputs", "empty-name", infer_request(model, good, outputs=("",)))
    g("outputs", "duplicated", infer_request(model, good, outputs=(out0, out0)), clean(model, good, (out0,)))
    for name, v in {"classification-negative": -3, "classification-string": "x",
                    "binary-string": "x", "shm-unknown": "nope"}.items():
        msg = infer_request(model, good, outputs=(out0,))
        key = {"binary-string": "binary_data", "shm-unknown": "shared_memory_region"}.get(name, "classification")
        set_param(msg.outputs[0].parameters[key], v)
        g("outputs", name, msg, clean(model, good, (out0,)) if name == "binary-string" else None)
    # many requests' worth in one message: over max batch
    if ep.max_batch > 0:
        many = tuple(Tensor(t.name, t.datatype, (ep.max_batch + 1,) + t.shape[1:], t.values * (ep.max_batch + 1))
                     for t in good)
        g("batch", "over-max", infer_request(model, many))
    del send


def text_cases(b: Builder, model: str, name: str = "TEXT") -> None:
    """Text inputs: bytes that are not UTF-8, over the limits, empty; over gRPC and HTTP binary."""
    ep = endpoint(model)
    good = good_inputs(model)
    for label, value in {"not-utf8": b"caf\xe9 \xff", "overlong-utf8": b"\xc0\xaf", "surrogate": b"\xed\xa0\x80",
                         "nul": b"a\x00b", "over-bytes": "é".encode() * 40_000, "over-chars": b"ab " * 12_000}.items():
        t = tensor(ep, name, [value])
        inputs = with_input(good, t)
        send = b.stream if ep.decoupled else b.grpc
        send(model, "text", label, infer_request(model, inputs), None if label != "nul" else _nul(model, inputs))
        if ep.decoupled:
            continue
        doc, tail = infer_json(inputs, binary=True)
        b.http_doc(model, "text", label, doc, None if label != "nul" or ep.decoupled else _nul(model, inputs), tail)


def _nul(model: str, inputs) -> Clean | None:
    # A NUL byte is valid UTF-8: text with it is a valid request (its answer is its own).
    return clean(model, inputs) if model != "retrieval" else clean(model, inputs)


def retrieval_cases(b: Builder) -> None:
    model = "retrieval"
    ep = endpoint(model)
    good = good_inputs(model)
    numeric_cases(b, model, "TOP_K", [(3, 3), (0, None), (-1, None), (101, None), (2**31, None), (2**32 + 3, None),
                                      (2**64 + 3, None), (-(2**31) - 1, None), (1.5, None), (3.0, 3), ("3", None),
                                      (True, None), (None, None), (1e400, None)])
    k_type = ep.input("TOP_K").datatype
    for label, tensors in {
        "op-unknown": (Tensor("OP", "BYTES", (1, 1), (b"drop",)),),
        "op-not-utf8": (Tensor("OP", "BYTES", (1, 1), (b"\xff",)),),
        "op-upsert-no-id": (Tensor("OP", "BYTES", (1, 1), (b"upsert",)),),
        "op-delete-empty-id": (Tensor("OP", "BYTES", (1, 1), (b"delete",)), Tensor("ID", "BYTES", (1, 1), (b"",))),
        "op-shape": (Tensor("OP", "BYTES", (1, 2), (b"search", b"search")),),
        "op-int": (Tensor("OP", "INT32", (1, 1), (1,)),),
        "id-shape": (Tensor("OP", "BYTES", (1, 1), (b"delete",)), Tensor("ID", "BYTES", (2, 1), (b"a", b"b"))),
        "id-too-long": (Tensor("OP", "BYTES", (1, 1), (b"upsert",)), Tensor("ID", "BYTES", (1, 1), (b"i" * 5000,)),
                        Tensor("TEXT", "BYTES", (1, 1), (b"",))),
        "top-k-shape": (Tensor("TOP_K", k_type, (1, 2), (3, 4)),),
        "top-k-batch-mismatch": (Tensor("TOP_K", k_type, (2, 1), (3, 4)),),
        "top-k-other-int": (Tensor("TOP_K", "INT32" if k_type == "INT64" else "INT64", (1, 1), (3,)),),
        "text-empty": (Tensor("TEXT", "BYTES", (1, 1), (b"  ",)),),
        "batch-different-k": (Tensor("TEXT", "BYTES", (2, 1), (b"a", b"b")), Tensor("TOP_K", k_type, (2, 1), (3, 4))),
    }.items():
        inputs = good
        for t in tensors:
            inputs = with_input(inputs, t)
        b.grpc(model, "retrieval", label, infer_request(model, inputs), None)
        b.stream(model, "retrieval", label, infer_request(model, inputs), None)
        if all(t.json_ok() for t in inputs):
            d, _ = infer_json(inputs)
            b.http_doc(model, "retrieval", label, d, None)


def image_cases(b: Builder) -> None:
    from PIL import Image

    model = "image_classification"
    ep = endpoint(model)
    jpeg = sample_jpeg()
    # a JPEG whose header claims 8000x5000: SOF0 height/width patched, data of 96x64
    sof = jpeg.index(b"\xff\xc0")
    lying = jpeg[:sof + 5] + struct.pack(">HH", 5000, 8000) + jpeg[sof + 9:]
    png = io.BytesIO()
    Image.new("RGB", (1, 1)).save(png, "PNG")
    for label, value in {"empty": b"", "text": b"not an image", "truncated-jpeg": jpeg[: len(jpeg) // 2],
                         "jpeg-header-only": jpeg[:20], "lying-dimensions": lying, "png-signature-only": b"\x89PNG\r\n\x1a\n",
                         "zero-size-png-ihdr": png.getvalue().replace(b"\x00\x00\x00\x01\x00\x00\x00\x01",
                                                                      b"\x00\x00\x00\x00\x00\x00\x00\x00", 1),
                         "gif": b"GIF89a\x01\x00\x01\x00\x00\x00\x00;", "svg": b"<svg xmlns='http://www.w3.org/2000/svg'/>",
                         "random": bytes(b.rng.randrange(256) for _ in range(512))}.items():
        inputs = (tensor(ep, "IMAGE", [value]),)
        b.grpc(model, "image", label, infer_request(model, inputs), None)
        b.stream(model, "image", label, infer_request(model, inputs), None)
        doc, tail = infer_json(inputs, binary=True)
        b.http_doc(model, "image", label, doc, None, tail)


def name_cases(b: Builder) -> None:
    """Model names and versions in the URL and in the message: unknown, internal, traversal, long, unicode."""
    names = {"unknown": "no_such_model", "empty-ish": "%20", "uppercase": "TEXT_EMBEDDING",
             "trailing-space": "text_embedding%20", "traversal": "..%2Ftokenizer", "traversal-dots": "../tokenizer",
             "traversal-encoded": "%2e%2e%2ftokenizer", "nul": "text_embedding%00", "stats": "stats",
             "long": "m" * 9000, "unicode": "t\u00e9xt_embedding", "unicode-raw": "tëxt_embedding",
             "rtl": "\u202etext_embedding", "semicolon": "text_embedding;tokenizer", "dot": "."}
    good = good_inputs("text_embedding")
    doc, tail = infer_json(good)
    body = json.dumps(doc).encode()
    for label, name in names.items():   # each name over HTTP and over one of unary gRPC or a stream, drawn
        target = f"/v2/models/{name}/infer".encode("utf-8")
        b.http("text_embedding", "model-name", label, body, None, target=target)
        send = b.grpc if b.rng.random() < 0.5 else b.stream
        send("text_embedding", "model-name", label, infer_request(name, good), None)
    # a path that normalizes to an internal model
    b.http("tokenizer", "model-name", "dot-segments", body, clean("tokenizer"),
           target=b"/v2/models/text_embedding/../tokenizer/infer", internal=True)
    b.http("tokenizer", "model-name", "double-slash", body, clean("tokenizer"),
           target=b"/v2/models//tokenizer/infer", internal=True)
    b.http("tokenizer", "model-name", "query-string", body, clean("tokenizer"),
           target=b"/v2/models/tokenizer/infer?model=text_embedding", internal=True)
    b.http("text_embedding", "model-name", "fragment", body, None, target=b"/v2/models/text_embedding/infer#x")
    for label, version in {"valid": "1", "missing": "2", "zero": "0", "negative": "-1", "word": "abc",
                           "huge": "99999999999999999999", "float": "1.5", "empty": "", "nul": "%00",
                           "unicode": "\u0661", "long": "9" * 5000}.items():
        meant = clean("text_embedding") if label == "valid" else None
        b.http("text_embedding", "version", label, body, meant,
               target=model_path("text_embedding", "infer", version).replace(b"\xd9\xa1", "\u0661".encode()))
    # other routes: unknown suffixes, admin-looking calls, odd targets
    b.http("text_embedding", "target", "absolute-uri", body, clean("text_embedding"),
           target=b"http://evil.example/v2/models/text_embedding/infer")
    for label, target in {"unknown-suffix": b"/v2/models/text_embedding/infer2",
                          "asterisk": b"*", "no-slash": b"v2/models/text_embedding/infer",
                          "encoded-slash-route": b"/v2/models/text_embedding%2Finfer",
                          "backslash": b"/v2/models/text_embedding\\infer",
                          "raw-space": b"/v2/models/text embedding/infer",
                          "ctl-char": b"/v2/models/text_embedding\x01/infer",
                          "high-bytes": b"/v2/models/\xff\xfe/infer"}.items():
        b.http("text_embedding", "target", label, body, None, target=target)
    # internal step models, with a request that is valid for them
    for model in INTERNAL:
        c = clean(model)
        d, t = infer_json(c.inputs, binary=model in ("image_preprocess", "image_classifier"))
        b.http_doc(model, "internal", "valid", d, c, t, internal=True)
        b.grpc(model, "internal", "valid", infer_request(model, c.inputs), c, internal=True)
        b.stream(model, "internal", "valid", infer_request(model, c.inputs), c, internal=True)
        b.http(model, "internal", "generate", json.dumps({i.name: "x" for i in c.inputs}).encode(),
               clean(model, (tensor(endpoint(model), "TEXT", [b"x"]),)) if model in ("tokenizer", "sentence_embedder") else None,
               target=model_path(model, "generate"), answer="generate", internal=True)
        b.http(model, "internal", "valid-version", json.dumps(d).encode() + t, c,
               target=model_path(model, "infer", "1"), internal=True,
               headers=[(b"Inference-Header-Content-Length", str(len(json.dumps(d).encode())).encode())] if t else ())
    # internal models with inputs they must refuse themselves (they validate too)
    enc = endpoint("text_encoder")
    for label, ids in {"id-past-vocab": [101, 10**6, 102], "id-negative": [101, -5, 102], "id-int64-max": [101, 2**63 - 1, 102]}.items():
        inputs = (tensor(enc, "input_ids", ids), tensor(enc, "attention_mask", [1, 1, 1]),
                  tensor(enc, "token_type_ids", [0, 0, 0]))
        b.grpc("text_encoder", "internal-input", label, infer_request("text_encoder", inputs), None, internal=True)
        b.http_doc("text_encoder", "internal-input", label, infer_json(inputs)[0], None, internal=True)
    inputs = (tensor(enc, "input_ids", [101, 102, 103]), tensor(enc, "attention_mask", [1, 1]),
              tensor(enc, "token_type_ids", [0, 0, 0]))
    b.grpc("text_encoder", "internal-input", "mask-length-mismatch", infer_request("text_encoder", inputs), None,
           internal=True)
    inputs = (tensor(enc, "input_ids", [101, 102]), tensor(enc, "attention_mask", [1, 1]),
              tensor(enc, "token_type_ids", [7, 0]))
    b.grpc("text_encoder", "internal-input", "token-type-past-range", infer_request("text_encoder", inputs), None,
           internal=True)


def generate_route_cases(b: Builder) -> None:
    """The generate routes of the non-decoupled public endpoints: inputs as top-level keys."""
    for model, key in (("text_embedding", "TEXT"), ("text_embedding_exact", "TEXT"), ("retrieval", "TEXT")):
        t = model_path(model, "generate")
        b.http(model, "generate", "valid", json.dumps({key: TEXT.decode()} | ({"TOP_K": 3} if model == "retrieval"
                                                                              else {})).encode(),
               clean(model, with_input(good_inputs(model), tensor(endpoint(model), key, [TEXT]))),
               target=t, answer="generate")
        for name, raw in {"empty": b"", "brace": b"{", "number": json.dumps({key: 5}).encode(),
                          "null": json.dumps({key: None}).encode(),
                          "missing": b"{}", "deep-1000": ('{"%s": ' % key + nested(1000, '"x"') + "}").encode()}.items():
            b.http(model, "generate", name, raw, None, target=t, answer="generate")
        b.http(model, "generate", "deep-10000", ('{"%s": ' % key + nested(10_000, '"x"') + "}").encode(), None,
               target=t, answer="generate", paths=GATEWAY_ONLY)
        b.http(model, "generate_stream", "number", json.dumps({key: 5}).encode(), None,
               target=model_path(model, "generate_stream"), answer="generate_stream")


KEEP_ALL = ("valid", "internal", "internal-input", "model-name", "nesting", "generation", "retrieval", "image",
            "generate", "target", "TOP_K", "MAX_TOKENS", "TEMPERATURE", "TOP_P", "SEED")


def sample(cases: list[Case], rng: random.Random, per_group: int) -> list[Case]:
    """The same malformation over every endpoint is one group: keep `per_group` of its cases, the endpoints
    drawn with the seeded generator; cases of KEEP_ALL kinds (one per endpoint by construction) all stay."""
    groups: dict[str, list[Case]] = {}
    for case in cases:
        groups.setdefault(case.group, []).append(case)
    keep: set[str] = set()
    for members in groups.values():
        if any(members[0].kind == k or members[0].kind.endswith("-" + k) for k in KEEP_ALL):
            keep.update(c.id for c in members)
        else:
            keep.update(c.id for c in rng.sample(members, min(per_group, len(members))))
    return [c for c in cases if c.id in keep]


@lru_cache(maxsize=4)
def corpus(seed: int = SEED, per_group: int = 1) -> tuple[Case, ...]:
    """The corpus: every malformation, each aimed at `per_group` endpoints drawn with the seed (0: all)."""
    b = Builder(seed)
    for model in PUBLIC:
        http_infer_cases(b, model)
        grpc_cases(b, model)
    for model in ("text_embedding", "text_embedding_exact", "retrieval"):
        text_cases(b, model)
    retrieval_cases(b)
    image_cases(b)
    name_cases(b)
    generate_route_cases(b)
    if per_group <= 0:
        return tuple(b.cases)
    return tuple(sample(b.cases, random.Random(seed), per_group))


if __name__ == "__main__":
    from collections import Counter

    cases = corpus()
    print(len(cases), "requests;", sum(len(c.paths) for c in cases), "sends")
    print(Counter((c.endpoint, c.protocol) for c in cases))
    print(Counter(c.kind for c in cases))
    print(Counter(c.endpoint for c in cases))
    print(Counter(c.protocol for c in cases))
