"""Where one request's time goes, from Triton's trace files (level TIMESTAMPS).

Triton writes a trace as a JSON list of fragments: `{"id", "model_name", "parent_id"}` headers and
`{"id", "timestamps": [{"name", "ns"}]}` records. An ensemble request is a root trace (gRPC and
ensemble timestamps) whose steps are child traces. `request_segments` turns one root and its
children into consecutive named segments that add up to the server's span of the request:

    grpc read -> ensemble -> [step: queue, input, (to stub, execute(), from stub), output] -> hand-off
    -> ... -> ensemble response -> grpc send

Stub timings (hotpath.runtime.timing) split a Python step's compute into transfer and work.
"""

from __future__ import annotations

import bisect
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Trace:
    id: int
    model: str = ""
    parent: int | None = None
    ts: dict[str, int] = field(default_factory=dict)
    children: list["Trace"] = field(default_factory=list)


@dataclass
class Segment:
    owner: str        # "frontend", the endpoint, or a step model
    name: str
    start_ns: int
    end_ns: int

    @property
    def us(self) -> float:
        return (self.end_ns - self.start_ns) / 1e3


def parse_fragments(fragments: list[dict]) -> list[Trace]:
    """Merge trace fragments by id; returns root traces with their children attached."""
    traces: dict[int, Trace] = {}
    for frag in fragments:
        t = traces.setdefault(int(frag["id"]), Trace(int(frag["id"])))
        if "model_name" in frag:
            t.model = frag["model_name"]
            if "parent_id" in frag:
                t.parent = int(frag["parent_id"])
        for stamp in frag.get("timestamps", []):
            # First occurrence wins: a name repeats only for re-queued requests.
            t.ts.setdefault(stamp["name"], int(stamp["ns"]))
    roots = []
    for t in traces.values():
        if t.parent is None:
            roots.append(t)
        elif t.parent in traces:
            traces[t.parent].children.append(t)
    for t in traces.values():
        t.children.sort(key=lambda c: c.ts.get("REQUEST_START", 0))
    return sorted(roots, key=lambda r: r.ts.get("REQUEST_START", 0))


def read_trace_files(paths: list[Path]) -> list[Trace]:
    """Root traces from Triton trace files (the server appends `.0`, `.1`, ... per log_frequency flush)."""
    fragments: list[dict] = []
    for p in paths:
        text = Path(p).read_text().strip()
        if text:
            # A running server leaves the array open; it writes the closing bracket at shutdown.
            fragments += json.loads(text if text.endswith("]") else text.rstrip(",") + "]")
    return parse_fragments(fragments)


StubLog = dict[str, list[tuple[int, int, int]]]   # model -> sorted (start_ns, end_ns, n_requests)


def _stub_span(stub: StubLog, model: str, start: int, end: int) -> tuple[int, int] | None:
    rows = stub.get(model)
    if not rows:
        return None
    i = bisect.bisect_left(rows, (start, 0, 0))
    if i < len(rows) and rows[i][1] <= end:
        return rows[i][0], rows[i][1]
    return None


def _step_segments(step: Trace, stub: StubLog, next_start: int | None = None) -> list[Segment]:
    ts, m = step.ts, step.model
    need = ("REQUEST_START", "COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END")
    if any(k not in ts for k in need):
        raise ValueError(f"trace {step.id} ({m}) lacks compute timestamps (a cache hit or a nested ensemble?)")
    segs = [Segment(m, "queue", ts["REQUEST_START"], ts["COMPUTE_START"]),
            Segment(m, "compute input", ts["COMPUTE_START"], ts["COMPUTE_INPUT_END"])]
    span = _stub_span(stub, m, ts["COMPUTE_INPUT_END"], ts["COMPUTE_OUTPUT_START"])
    if span:
        segs += [Segment(m, "to stub", ts["COMPUTE_INPUT_END"], span[0]),
                 Segment(m, "execute()", span[0], span[1]),
                 Segment(m, "from stub", span[1], ts["COMPUTE_OUTPUT_START"])]
    else:
        segs.append(Segment(m, "compute infer", ts["COMPUTE_INPUT_END"], ts["COMPUTE_OUTPUT_START"]))
    # The ensemble starts the next step as soon as this step's response is out, which can be before
    # COMPUTE_END is stamped: end the segment there so that segments never overlap.
    end = ts["COMPUTE_END"] if next_start is None else max(ts["COMPUTE_OUTPUT_START"], min(ts["COMPUTE_END"], next_start))
    segs.append(Segment(m, "compute output", ts["COMPUTE_OUTPUT_START"], end))
    return segs


def request_segments(root: Trace, stub: StubLog | None = None) -> list[Segment]:
    """Consecutive segments covering one request from gRPC read to gRPC send."""
    stub = stub or {}
    ts = root.ts
    front = "frontend"
    start = ts.get("GRPC_WAITREAD_END", ts.get("HTTP_RECV_END", ts["REQUEST_START"]))
    segs = [Segment(front, "request read -> core", start, ts["REQUEST_START"])]
    if root.children:
        cursor, owner = ts["REQUEST_START"], root.model
        steps = root.children
        for i, step in enumerate(steps):
            label = "ensemble dispatch" if i == 0 else "hand-off"
            segs.append(Segment(owner, label, cursor, max(cursor, step.ts["REQUEST_START"])))
            # The last step's COMPUTE_END can come after the ensemble already completed the response.
            nxt = steps[i + 1].ts.get("REQUEST_START") if i + 1 < len(steps) else ts.get("INFER_RESPONSE_COMPLETE")
            segs += _step_segments(step, stub, nxt)
            cursor = segs[-1].end_ns
        done = ts.get("INFER_RESPONSE_COMPLETE", ts["REQUEST_END"])
        segs.append(Segment(owner, "ensemble response", cursor, max(cursor, done)))
    else:
        segs += _step_segments(root, stub)
        done = ts.get("INFER_RESPONSE_COMPLETE", ts["COMPUTE_END"])
        segs.append(Segment(front, "response complete", ts["COMPUTE_END"], max(ts["COMPUTE_END"], done)))
    send_end = ts.get("GRPC_SEND_END", ts.get("HTTP_SEND_END"))
    if send_end:
        segs.append(Segment(front, "response send", segs[-1].end_ns, max(segs[-1].end_ns, send_end)))
    return segs


@dataclass
class SegmentStats:
    owner: str
    name: str
    mean_us: float
    p50_us: float
    p95_us: float
    offset_us: float    # median start relative to the request's first timestamp (for the timeline)


def summarize(requests: list[list[Segment]]) -> list[SegmentStats]:
    """Per segment (in request order): mean, median, p95 and median offset over many requests."""
    if not requests:
        return []
    keys = [(s.owner, s.name) for s in requests[0]]
    same = [r for r in requests if [(s.owner, s.name) for s in r] == keys]
    out = []
    for i, (owner, name) in enumerate(keys):
        values = sorted(r[i].us for r in same)
        offsets = [(r[i].start_ns - r[0].start_ns) / 1e3 for r in same]
        out.append(SegmentStats(owner, name, statistics.fmean(values), statistics.median(values),
                                values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))],
                                statistics.median(offsets)))
    return out


def server_span_us(requests: list[list[Segment]]) -> float:
    """Mean time from the frontend reading a request to it finishing the response."""
    return statistics.fmean((r[-1].end_ns - r[0].start_ns) / 1e3 for r in requests) if requests else 0.0
