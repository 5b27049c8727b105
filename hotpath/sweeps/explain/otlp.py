"""OTLP spans from Triton's OpenTelemetry mode -> Triton trace records, for hotpath.sweeps.explain.trace.

The per-step breakdown (queue, compute input/infer/output, hand-offs) is hotpath.sweeps.explain.trace's,
written for Triton's trace files; this module only maps spans onto the records it reads: a model
span and its `compute` child become one record (id and parent from the triton.trace_id and
triton.trace_parent_id attributes), and the frontend's `InferRequest` events join the top model's.
"""

from __future__ import annotations

import base64
import json

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span

_ID_FIELDS = ("traceId", "spanId", "parentSpanId")


def _hex_ids_to_base64(node):
    # OTLP/JSON writes ids as hex where protobuf's JSON mapping expects base64.
    if isinstance(node, dict):
        return {k: (base64.b64encode(bytes.fromhex(v)).decode() if k in _ID_FIELDS and v else _hex_ids_to_base64(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_hex_ids_to_base64(v) for v in node]
    return node


def decode(body: bytes, content_type: str) -> ExportTraceServiceRequest:
    """One OTLP/HTTP export request body, JSON or protobuf; unknown fields are an error."""
    request = ExportTraceServiceRequest()
    if "json" in content_type:
        json_format.ParseDict(_hex_ids_to_base64(json.loads(body)), request)
    else:
        request.ParseFromString(body)
    return request


def spans(requests: list[ExportTraceServiceRequest]) -> list[Span]:
    return [s for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _attrs(span: Span) -> dict:
    return {a.key: json_format.MessageToDict(a.value).popitem()[1] for a in span.attributes}


def to_fragments(all_spans: list[Span]) -> list[dict]:
    """Triton trace-file records ({id, model_name, parent_id, timestamps}) for hotpath.sweeps.explain.trace.parse_fragments."""
    records: dict[bytes, dict] = {}
    for s in all_spans:
        a = _attrs(s)
        if "triton.trace_id" in a:
            record = {"id": int(a["triton.trace_id"]), "model_name": a["triton.model_name"], "timestamps": []}
            if int(a.get("triton.trace_parent_id", 0)):
                record["parent_id"] = int(a["triton.trace_parent_id"])
            records[s.span_id] = record
    for s in all_spans:
        stamps = [{"name": e.name, "ns": e.time_unix_nano} for e in s.events]
        if s.span_id in records:
            records[s.span_id]["timestamps"] += stamps
        elif s.parent_span_id in records:                 # compute span under a model span
            records[s.parent_span_id]["timestamps"] += stamps
        else:                                             # frontend span: its child model is the root
            for child in (c for c in all_spans if c.parent_span_id == s.span_id and c.span_id in records):
                records[child.span_id]["timestamps"] += stamps
    return list(records.values())
