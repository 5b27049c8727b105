"""Where a generation's time goes inside the API, per request: consecutive phases, each observed into the
`hotpath_openai_generation_phase_seconds` histogram (GET /metrics) by phase.

    receive         the request's arrival to its body read, parsed, checked and looked up in the answer cache
    first_response  then to Triton's first response (the gRPC stream's set-up, Triton's queue, the prefill)
    relay           per chunk: the response's arrival (or the previous chunk's write) to the chunk's bytes ready
                    (parse the tensors, build, serialize)
    write           per chunk: handed to the server to the next step asked for (the SSE write)
    triton          per response after the first: waiting for Triton's next one (the engine's decode step)

The phases tile the request: their sums over a run, divided by its requests, give its breakdown
(`python -m perf study generation_doors` reads them before and after each point). A phase costs two
clock reads and one histogram observation (about a microsecond)."""

from __future__ import annotations

import time

PHASES = ("receive", "first_response", "relay", "write", "triton")


class StreamPhases:
    """Marks one request's phases: `mark(phase)` observes the time since the previous mark under `phase`
    (`children`: the histogram's child per phase, looked up once per process, not per token)."""

    def __init__(self, children: dict, started: float):
        self.children, self.last = children, started

    def mark(self, phase: str) -> None:
        now = time.perf_counter()
        self.children[phase].observe(now - self.last)
        self.last = now

    async def steps(self, steps):
        """`steps` as they come, each arrival marking the wait for it as `triton`."""
        async for step in steps:
            self.mark("triton")
            yield step
