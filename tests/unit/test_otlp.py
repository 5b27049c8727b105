"""OpenTelemetry trace flags and OTLP decoding, without a server."""

import json

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from hotpath.cli import build_parser
from hotpath.server.tracing import OtlpTracing
from hotpath.sweeps.explain.otlp import decode, spans, to_fragments
from hotpath.sweeps.explain.trace import parse_fragments

TRACE = "daed85face8dceea199c36225118df53"


def _span(span_id, parent, name, events, attrs=None):
    return {"traceId": TRACE, "spanId": span_id, "parentSpanId": parent, "name": name, "kind": 2,
            "startTimeUnixNano": str(events[0][1]), "endTimeUnixNano": str(events[-1][1]),
            "events": [{"name": n, "timeUnixNano": str(t)} for n, t in events],
            "attributes": [{"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                           for k, v in (attrs or {}).items()]}


def _model(span_id, parent, name, trace_id, parent_id, start):
    return _span(span_id, parent, name, [("REQUEST_START", start), ("QUEUE_START", start + 1), ("REQUEST_END", start + 90)],
                 {"triton.model_name": name, "triton.trace_id": trace_id, "triton.trace_parent_id": parent_id})


BODY = json.dumps({"resourceSpans": [{"resource": {"attributes": [{"key": "service.name",
                                                                    "value": {"stringValue": "hotpath"}}]},
                                      "scopeSpans": [{"scope": {"name": "triton-server"}, "spans": [
    _span("b1fbedca0132d597", "", "InferRequest", [("GRPC_WAITREAD_END", 5), ("GRPC_SEND_END", 200)]),
    _model("67900970139c8d50", "b1fbedca0132d597", "text_embedding", 1, 0, 10),
    _model("dcc1d5bcf6880112", "67900970139c8d50", "tokenizer", 2, 1, 20),
    _span("ac49b19ef09ed919", "dcc1d5bcf6880112", "compute",
          [("COMPUTE_START", 30), ("COMPUTE_INPUT_END", 31), ("COMPUTE_OUTPUT_START", 40), ("COMPUTE_END", 41)]),
]}]}]}).encode()


def test_flags_switch_on_opentelemetry_mode():
    flags = OtlpTracing("127.0.0.1:4318/v1/traces", rate=10).flags()
    assert "--trace-config=mode=opentelemetry" in flags
    assert "--trace-config=opentelemetry,url=127.0.0.1:4318/v1/traces" in flags
    assert "--trace-config=rate=10" in flags and "--trace-config=level=TIMESTAMPS" in flags
    with pytest.raises(ValueError):
        OtlpTracing("x", rate=0).flags()


def test_serve_has_the_trace_flags(monkeypatch):
    monkeypatch.setenv("HOTPATH_TRACE_OTLP_URL", "collector:4318/v1/traces")
    args = build_parser().parse_args(["serve", "--trace-rate", "5"])
    assert (args.trace_otlp, args.trace_rate) == ("collector:4318/v1/traces", 5)


def test_json_ids_are_hex_and_protobuf_decodes_the_same():
    request = decode(BODY, "application/json")
    first = spans([request])[0]
    assert first.span_id == bytes.fromhex("b1fbedca0132d597") and first.trace_id == bytes.fromhex(TRACE)
    again = decode(request.SerializeToString(), "application/x-protobuf")
    assert again == request
    with pytest.raises(json_format.ParseError):   # an unknown field is refused, not dropped
        decode(BODY.replace(b'"events"', b'"evnts"'), "application/json")


def test_spans_become_trace_records_with_frontend_and_compute_stamps():
    (root,) = parse_fragments(to_fragments(spans([decode(BODY, "application/json")])))
    assert root.model == "text_embedding" and root.ts["GRPC_WAITREAD_END"] == 5
    (step,) = root.children
    assert step.model == "tokenizer" and step.ts["COMPUTE_INPUT_END"] == 31 and step.ts["REQUEST_START"] == 20


def test_empty_export_has_no_spans():
    assert spans([ExportTraceServiceRequest()]) == []
