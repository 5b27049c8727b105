"""Triton's OpenTelemetry trace mode: spans of every sampled request exported over OTLP/HTTP.

Triton 2.51 (this wheel and NGC 24.10) ships the mode: one span per request at the frontend
(`InferRequest`, gRPC/HTTP events), a child span per model (the ensemble, then each step, with
queue events) and a `compute` span under each executed model. It posts OTLP/HTTP JSON.
"""

from __future__ import annotations

from dataclasses import dataclass

from hotpath import settings

DEFAULT_RATE = settings.trace_rate.default   # Triton's own default: one request in a thousand


@dataclass(frozen=True)
class OtlpTracing:
    url: str                       # OTLP/HTTP traces endpoint, e.g. http://collector:4318/v1/traces
    rate: int = DEFAULT_RATE       # sample one request in `rate`
    service_name: str = "hotpath"

    def flags(self) -> list[str]:
        """tritonserver flags that switch the trace mode on at startup (the mode cannot change later)."""
        if self.rate < 1:
            raise ValueError(f"trace rate must be >= 1 (one request in N), got {self.rate}")
        return ["--trace-config=mode=opentelemetry",
                f"--trace-config=opentelemetry,url={self.url}",
                f"--trace-config=opentelemetry,resource=service.name={self.service_name}",
                f"--trace-config=rate={self.rate}",
                "--trace-config=level=TIMESTAMPS"]

    @classmethod
    def from_env(cls) -> "OtlpTracing | None":
        """HOTPATH_TRACE_OTLP_URL (and HOTPATH_TRACE_RATE), the same variables the container reads."""
        url = settings.trace_otlp_url()
        return cls(url, settings.trace_rate()) if url else None
