"""Bad requests sent raw, directly to tritonserver over gRPC (protobuf) and HTTP (bytes on the wire), and where
each is answered: by a hotpath model, or by Triton's own frontend before any model runs.

tritonclient refuses or fixes up most of these before they leave the client, so they bypass it. A case
names the inputs its refusal must mention; `frontend` says why Triton answers it itself (so a model cannot
change the answer, only a front door in front of Triton can); `answer` is then what Triton 2.51 answers.
tests/malformed.py is the wider seeded corpus (direct and through the gateway); these are the regression
cases of the model-side fixes and the exact list of frontend answers.

    .venv/bin/python -m tests.bad_requests --grpc 127.0.0.1:8001 --http 127.0.0.1:8000   # a table of answers
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import struct
from dataclasses import dataclass
from typing import Callable

import grpc
from PIL import Image
from tritonclient.grpc import model_config_pb2, service_pb2, service_pb2_grpc

from hotpath.paths import model_specs_dir
from hotpath.specs.spec import load_spec

LEAKS = ("Traceback", "/work", ".py", "site-packages")   # nothing of the server's insides may reach a client
BIG = 2 ** 32 + 5                                          # 5 after any narrowing into 32 bits
PUBLIC = ("text_embedding", "text_embedding_exact", "image_classification", "retrieval")
ITEM = {"text_embedding": "TEXT", "text_embedding_exact": "TEXT", "retrieval": "TEXT", "image_classification": "IMAGE",
        "sentence_embedder": "TEXT", "tokenizer": "TEXT", "image_preprocess": "IMAGE"}
# Why Triton 2.51's frontend answers a case itself, before any model sees it.
JSON_500 = "Triton's HTTP JSON parser answers 500 for a body it cannot parse (its error is INTERNAL, not INVALID_ARG)"
RAW_BINARY = ("Triton's raw-binary extension: no (or a non-numeric, atoi -> 0) Inference-Header-Content-Length makes "
              "the whole body the single input's one BYTES item; the model sees an ordinary request")
BATCH_MSG = "Triton refuses it (400) but its message names the batch size, not the input"
BATCH_WRAP = ("Triton keeps the batch size in 32 bits: a first dimension of 2^32 + n is read as n, the data "
              "then matches and the model sees an ordinary request")


def jpeg(size=(64, 48)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, (200, 40, 40)).save(out, "JPEG", quality=90)
    return out.getvalue()


def lying_jpeg(width: int = 8000, height: int = 5000) -> bytes:
    """A complete small JPEG whose SOF header claims width x height: libjpeg fills the missing blocks with gray."""
    data = bytearray(jpeg())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def good_item(endpoint: str) -> bytes:
    return jpeg() if ITEM[endpoint] == "IMAGE" else b"compress files"


def spec_dtype(model: str, name: str) -> str:
    """An input's datatype on the wire (INT64, BYTES, ...) as the model's spec declares it."""
    config = load_spec(model_specs_dir() / f"{model}.toml").config
    kind = model_config_pb2.DataType.Name(next(i.data_type for i in config.input if i.name == name))[5:]
    return "BYTES" if kind == "STRING" else kind


# ---- the wire -------------------------------------------------------------------------------------------

def bytes_raw(*items: bytes) -> bytes:
    """Triton's serialized BYTES tensor: a 4-byte little-endian length before each item."""
    return b"".join(struct.pack("<I", len(i)) + i for i in items)


def tensor(name: str, datatype: str, shape: list[int], **contents) -> service_pb2.ModelInferRequest.InferInputTensor:
    t = service_pb2.ModelInferRequest.InferInputTensor(name=name, datatype=datatype, shape=shape)
    if contents:
        t.contents.CopyFrom(service_pb2.InferTensorContents(**contents))
    return t


def int_tensor(name: str, datatype: str, values: list[int]):
    """An integer tensor [n, 1] sent raw (little-endian), so values past the protobuf field's range go through."""
    fmt = {"INT64": "<q", "INT32": "<i", "UINT64": "<Q"}[datatype]
    packed = b"".join(struct.pack(fmt, v) for v in values)
    return tensor(name, datatype, [len(values), 1]), packed


@dataclass
class Answer:
    status: str      # "OK", a gRPC status name, or the HTTP status code as text
    message: str

    @property
    def invalid(self) -> bool:
        return self.status in ("INVALID_ARGUMENT", "400")

    @property
    def leaks(self) -> list[str]:
        return [s for s in LEAKS if s in self.message]


def send_grpc(url: str, model: str, inputs: list, raw: list[bytes] | None = None) -> Answer:
    request = service_pb2.ModelInferRequest(model_name=model, inputs=inputs, raw_input_contents=raw or [])
    with grpc.insecure_channel(url) as channel:
        try:
            service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=60)
        except grpc.RpcError as exc:
            return Answer(exc.code().name, exc.details() or "")
    return Answer("OK", "")


def send_http(url: str, model: str, body: bytes, headers: dict[str, str] | None = None) -> Answer:
    host, port = url.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("POST", f"/v2/models/{model}/infer", body=body, headers=headers or {})
        response = conn.getresponse()
        text = response.read().decode("utf-8", "replace")
    finally:
        conn.close()
    if response.status == 200:
        return Answer("200", "")
    try:
        return Answer(str(response.status), json.loads(text).get("error", text))
    except (ValueError, AttributeError):
        return Answer(str(response.status), text)


def body(*inputs: dict) -> bytes:
    return json.dumps({"inputs": list(inputs)}).encode()


def item(name: str, data, datatype: str = "BYTES", shape=(1, 1)) -> dict:
    return {"name": name, "shape": list(shape), "datatype": datatype, "data": data}


def binary(name: str, raw: bytes, size: int | None = None, shape=(1, 1), length: str | None = None):
    """A body in Triton's binary extension: JSON header, then `raw`; `size` and `length` may lie."""
    head = json.dumps({"inputs": [{"name": name, "shape": list(shape), "datatype": "BYTES",
                                   "parameters": {"binary_data_size": len(raw) if size is None else size}}]}).encode()
    return head + raw, {"Inference-Header-Content-Length": str(len(head)) if length is None else length}


# ---- the cases ------------------------------------------------------------------------------------------

@dataclass
class Case:
    name: str
    endpoint: str
    protocol: str                         # "grpc" | "http"
    send: Callable[[str], Answer]         # url -> answer
    names: tuple[str, ...]                # the refusal names one of these
    frontend: str = ""                    # why Triton's frontend answers it (empty: a hotpath model answers)
    answer: str = ""                      # Triton 2.51's own answer to a frontend case

    @property
    def id(self) -> str:
        return f"{self.endpoint}-{self.protocol}-{self.name}"


def grpc_case(name, endpoint, inputs, raw=None, names=(), frontend="", answer="") -> Case:
    return Case(name, endpoint, "grpc", lambda url: send_grpc(url, endpoint, inputs(), raw() if raw else None),
                names, frontend, answer)


def http_case(name, endpoint, make, names=(), frontend="", answer="") -> Case:
    def send(url):
        made = make()
        data, headers = made if isinstance(made, tuple) else (made, {})
        return send_http(url, endpoint, data, headers)
    return Case(name, endpoint, "http", send, names, frontend, answer)


def common_cases(endpoint: str) -> list[Case]:
    """Every endpoint with one BYTES input per item answers these alike."""
    n, good = ITEM[endpoint], good_item(endpoint)
    one = [tensor(n, "BYTES", [1, 1], bytes_contents=[good])]
    text = good.decode("latin-1")
    return [
        grpc_case("no-inputs", endpoint, lambda: [], names=(n,)),
        grpc_case("unknown-input", endpoint, lambda: one + [tensor("BOGUS", "BYTES", [1, 1], bytes_contents=[b"x"])],
                  names=("BOGUS",)),
        grpc_case("wrong-dtype", endpoint, lambda: [tensor(n, "INT32", [1, 1], int_contents=[1])], names=(n,)),
        grpc_case("rank-1", endpoint, lambda: [tensor(n, "BYTES", [1], bytes_contents=[good])], names=(n,)),
        grpc_case("rank-3", endpoint, lambda: [tensor(n, "BYTES", [1, 1, 1], bytes_contents=[good])], names=(n,)),
        grpc_case("two-per-row", endpoint, lambda: [tensor(n, "BYTES", [1, 2], bytes_contents=[good, good])],
                  names=(n,)),
        grpc_case("batch-0", endpoint, lambda: [tensor(n, "BYTES", [0, 1])], raw=lambda: [b""], names=(n,)),
        grpc_case("negative-dim", endpoint, lambda: [tensor(n, "BYTES", [-1, 1], bytes_contents=[good])], names=(n,)),
        grpc_case("raw-length-lies", endpoint, lambda: [tensor(n, "BYTES", [1, 1])],
                  raw=lambda: [struct.pack("<I", 1 << 30) + good], names=(n,)),
        grpc_case("raw-trailing", endpoint, lambda: [tensor(n, "BYTES", [1, 1])],
                  raw=lambda: [bytes_raw(good) + b"junk"], names=(n,)),
        grpc_case("shape-lies", endpoint, lambda: [tensor(n, "BYTES", [1000, 1])], raw=lambda: [bytes_raw(good)],
                  names=("batch-size",), frontend=BATCH_MSG,
                  answer=f"INVALID_ARGUMENT inference request batch-size must be <= N for '{endpoint}'"),
        grpc_case("batch-2^32", endpoint, lambda: [tensor(n, "BYTES", [2 ** 32, 1])], raw=lambda: [bytes_raw(good)],
                  names=(n,), **({} if endpoint == "retrieval" else  # a model sees no batch dim; an ensemble adds one
                                 {"frontend": BATCH_WRAP, "answer": "OK (served as batch 1, outputs without batch dim)"})),
        grpc_case("batch-2^32+1", endpoint, lambda: [tensor(n, "BYTES", [2 ** 32 + 1, 1])],
                  raw=lambda: [bytes_raw(good)], names=(n,), frontend=BATCH_WRAP, answer="OK (served as batch 1)"),
        http_case("inputs-empty", endpoint, lambda: body(), names=(n,)),
        http_case("unknown-input", endpoint, lambda: body(item(n, [text]), item("BOGUS", ["x"])), names=("BOGUS",)),
        http_case("wrong-dtype", endpoint, lambda: body(item(n, [1], "INT32")), names=(n,)),
        http_case("rank-1", endpoint, lambda: body(item(n, [text], shape=(1,))), names=(n,)),
        http_case("batch-0", endpoint, lambda: body(item(n, [], shape=(0, 1))), names=(n,)),
        http_case("binary-size-over-body", endpoint, lambda: binary(n, bytes_raw(good), size=1 << 20), names=(n,)),
        http_case("binary-length-prefix-lies", endpoint, lambda: binary(n, struct.pack("<I", 1 << 30) + good),
                  names=(n,)),
        # answered by Triton's frontend: only a front door can change these
        http_case("brace", endpoint, lambda: b"{", names=("JSON",), frontend=JSON_500,
                  answer="500 failed to parse the request JSON buffer: Missing a name for object member. at 1"),
        http_case("not-json", endpoint, lambda: b"hello", names=("JSON",), frontend=JSON_500,
                  answer="500 failed to parse the request JSON buffer: Invalid value. at 0"),
        http_case("no-inputs-key", endpoint, lambda: b"{}", names=("inputs",), frontend=JSON_500,
                  answer="500 Unable to parse 'inputs': attempt to access non-existing object member 'inputs'"),
        http_case("inputs-not-list", endpoint, lambda: b'{"inputs": 5}', names=("inputs",), frontend=JSON_500,
                  answer="500 Unable to parse 'inputs': attempt to access JSON non-array as array"),
        http_case("number-for-bytes", endpoint, lambda: body(item(n, [5])), names=(n,), frontend=JSON_500,
                  answer="500 Unable to parse JSON bytes array: attempt to access JSON non-string as string"),
        http_case("null-data", endpoint, lambda: body(item(n, None)), names=(n,), frontend=JSON_500,
                  answer="500 Unable to parse 'data': attempt to access JSON non-array as array"),
        http_case("shape-not-list", endpoint, lambda: body(item(n, [text], shape="11")), names=(n, "shape"),
                  frontend=JSON_500, answer="500 Unable to parse 'shape': attempt to access JSON "
                                            "non-unsigned-integer as unsigned-integer"),
        http_case("negative-dim", endpoint, lambda: body(item(n, [text], shape=(-1, 1))), names=(n,),
                  frontend=JSON_500, answer="500 Unable to parse 'shape': attempt to access JSON "
                                            "non-unsigned-integer as unsigned-integer"),
        http_case("binary-size-negative", endpoint, lambda: binary(n, bytes_raw(good), size=-4), names=(n,),
                  frontend=JSON_500, answer="500 Unable to parse 'binary_data_size': attempt to access JSON "
                                            "non-unsigned-integer as unsigned-integer"),
        http_case("no-data", endpoint, lambda: json.dumps({"inputs": [{"name": n, "shape": [1, 1],
                                                                         "datatype": "BYTES"}]}).encode(),
                  names=(n,), frontend="Triton refuses it (400) without naming the input",
                  answer="400 Input must set only one of the following fields: 'data', 'binary_data_size' in "
                         "'parameters', 'shared_memory_region' in 'parameters'. But no field is set"),
        http_case("shape-lies", endpoint, lambda: body(item(n, [text], shape=(1000, 1))), names=("batch-size",),
                  frontend=BATCH_MSG, answer=f"400 inference request batch-size must be <= N for '{endpoint}'"),
        *raw_binary_cases(endpoint),
    ]


def raw_binary_cases(endpoint: str) -> list[Case]:
    """No JSON header: the body is the single input's one item. Only a text endpoint takes any bytes as an item."""
    n, good = ITEM[endpoint], good_item(endpoint)
    frontend, answer = ((RAW_BINARY, "200") if n == "TEXT" and endpoint != "retrieval" else ("", ""))
    names = (n, "Raw request")   # retrieval: Triton refuses raw requests to a model of several inputs (400)
    return [http_case("empty-body", endpoint, lambda: b"", names=names, frontend=frontend,
                      answer=answer and "200 (the empty text is embedded)"),
            http_case("header-length-abc", endpoint, lambda: binary(n, bytes_raw(good), length="abc"), names=names,
                      frontend=frontend, answer=answer and "200 (the JSON header and data are embedded as one text)")]


def retrieval_cases() -> list[Case]:
    e, k_type = "retrieval", spec_dtype("retrieval", "TOP_K")
    q = [tensor("TEXT", "BYTES", [1, 1], bytes_contents=[b"compress files"])]

    def top_k(value, datatype=k_type):
        t, packed = int_tensor("TOP_K", datatype, [value])
        return grpc_case(f"top-k-{value}-{datatype}", e, lambda: [tensor("TEXT", "BYTES", [1, 1]), t], raw=lambda: [bytes_raw(b"compress files"),
                                                                                        packed], names=("TOP_K",))

    def top_k_json(label, value, datatype=k_type, frontend="", answer=""):
        return http_case(f"top-k-{label}", e, lambda: body(item("TEXT", ["compress files"]),
                                                           item("TOP_K", [value], datatype)),
                         names=("TOP_K",), frontend=frontend, answer=answer)

    k_alone = [int_tensor("TOP_K", k_type, [5])]
    return [
        grpc_case("missing-text-with-top-k", e, lambda: [k_alone[0][0]], raw=lambda: [k_alone[0][1]],
                  names=("TEXT",)),
        grpc_case("missing-text-with-op", e, lambda: [tensor("OP", "BYTES", [1, 1], bytes_contents=[b"search"])],
                  names=("TEXT",)),
        grpc_case("missing-text-with-id", e, lambda: [tensor("ID", "BYTES", [1, 1], bytes_contents=[b"x"])],
                  names=("TEXT",)),
        http_case("missing-text-with-top-k", e, lambda: body(item("TOP_K", [5], k_type)), names=("TEXT",)),
        http_case("missing-text-with-op", e, lambda: body(item("OP", ["delete"])), names=("TEXT",)),
        top_k(0), top_k(-1), top_k(101), top_k(2 ** 31 - 1),
        *([top_k(BIG), top_k(-2 ** 63), top_k(2 ** 32 + 1)] if k_type == "INT64" else []),
        grpc_case("top-k-other-int-type", e, lambda: [tensor("TEXT", "BYTES", [1, 1]),
                                                      tensor("TOP_K", "INT32" if k_type == "INT64" else "INT64", [1, 1])],
                  raw=lambda: [bytes_raw(b"compress files"), b"\x05" + b"\x00" * (7 if k_type == "INT64" else 3)],
                  names=("TOP_K",)),
        grpc_case("top-k-fp32", e, lambda: q + [tensor("TOP_K", "FP32", [1, 1], fp32_contents=[float("nan")])],
                  names=("TOP_K",)),
        grpc_case("op-unknown", e, lambda: q + [tensor("OP", "BYTES", [1, 1], bytes_contents=[b"drop"])],
                  names=("OP",)),
        grpc_case("upsert-without-id", e, lambda: q + [tensor("OP", "BYTES", [1, 1], bytes_contents=[b"upsert"])],
                  names=("ID",)),
        top_k_json("2^32+5", BIG), top_k_json("2^32+1", 2 ** 32 + 1), top_k_json("-1", -1),
        top_k_json("0", 0), top_k_json("2^63-1", 2 ** 63 - 1),
        top_k_json("2^32+5-as-INT32", BIG, "INT32"),
        top_k_json("1.5", 1.5, frontend=JSON_500, answer="500 Unable to parse 'data': attempt to access JSON "
                                                          "non-signed-integer as signed-integer"),
        top_k_json("2^64+5", 2 ** 64 + 5, frontend=JSON_500, answer="500 Unable to parse 'data': attempt to access "
                                                                     "JSON non-signed-integer as signed-integer"),
        top_k_json("string", "5", frontend=JSON_500, answer="500 Unable to parse 'data': attempt to access JSON "
                                                             "non-signed-integer as signed-integer"),
    ]


def image_cases() -> list[Case]:
    e = "image_classification"
    cases = []
    for size in ((8000, 5000), (640, 4800)):
        label = f"lying-jpeg-{size[0]}x{size[1]}"
        cases.append(grpc_case(label, e, lambda s=size: [tensor("IMAGE", "BYTES", [1, 1],
                                                                bytes_contents=[lying_jpeg(*s)])], names=("IMAGE",)))
        cases.append(http_case(label, e, lambda s=size: binary("IMAGE", bytes_raw(lying_jpeg(*s))), names=("IMAGE",)))
    return cases


def internal_cases() -> list[Case]:
    """Internal steps called directly: a batch dimension of 2^32 reaches them as no batch dimension."""
    return [grpc_case("batch-2^32", m, lambda m=m: [tensor(ITEM[m], "BYTES", [2 ** 32, 1])],
                      raw=lambda m=m: [bytes_raw(good_item(m))], names=(ITEM[m],))
            for m in ("sentence_embedder", "tokenizer", "image_preprocess")]


def all_cases() -> list[Case]:
    return [c for e in PUBLIC for c in common_cases(e)] + retrieval_cases() + image_cases() + internal_cases()


def good_request(url: str, endpoint: str) -> Answer:
    """A valid request over gRPC, to check the server still serves after a bad one."""
    return send_grpc(url, endpoint, [tensor(ITEM[endpoint], "BYTES", [1, 1], bytes_contents=[good_item(endpoint)])])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--grpc", required=True)
    ap.add_argument("--http", required=True)
    args = ap.parse_args()
    for case in all_cases():
        answer = case.send(args.grpc if case.protocol == "grpc" else args.http)
        alive = good_request(args.grpc, case.endpoint).status == "OK"
        named = any(n in answer.message for n in case.names)
        verdict = "ok" if answer.invalid and named and not answer.leaks and alive else "BAD"
        print(f"{verdict:3} {'F' if case.frontend else 'M'} {case.id:55} {answer.status:17} "
              f"{'' if named else 'unnamed '}{'LEAK ' if answer.leaks else ''}{'' if alive else 'DEAD '}"
              f"{answer.message[:150]!r}")


if __name__ == "__main__":
    main()
