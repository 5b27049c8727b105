"""The gateway's limits, sized from the specs and from measured capacity.

- Request size: the largest item a spec admits (an image's `max_bytes`, a text's `max_text_bytes`)
  plus framing. A bigger body could only fail at the model, after it was moved there.
- Admission: in-flight inference calls per replica = capacity x p95 target (Little's law,
  L = throughput x time in the system), for the endpoint that allows the fewest. Calls past the cap
  are refused at once instead of queueing in front of a busy model. With the p95 rather than the
  mean as the time, the cap is the most the server can hold; the admitted p95 is measured
  (perf/overload_gateway.py).
"""

from __future__ import annotations

from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.perf.slo import load_slos
from hotpath.spec import load_specs

ITEM_BYTE_PARAMETERS = ("max_bytes", "max_text_bytes")   # per-item byte limits of the Python steps
BODY_OVERHEAD_BYTES = 1 << 20   # protobuf/JSON framing, the other inputs, a batch of small items


def max_body_bytes(spec_dir: Path | None = None) -> int:
    """Largest per-item byte limit of any spec, plus BODY_OVERHEAD_BYTES."""
    limits = [int(spec.config.parameters[key].string_value)
              for spec in load_specs(spec_dir or paths.model_specs_dir())
              for key in ITEM_BYTE_PARAMETERS if key in spec.config.parameters]
    if not limits:
        raise HotpathError(f"no spec sets any of {ITEM_BYTE_PARAMETERS}: nothing to size the body limit from")
    return max(limits) + BODY_OVERHEAD_BYTES


def little_cap(capacity_per_s: float, p95_ms: float) -> int:
    """In-flight calls that `capacity_per_s` serves within `p95_ms`: L = X * W, at least 1."""
    return max(1, int(capacity_per_s * p95_ms / 1000.0))


def admission_cap(profile: str = "cpu", slo_path: Path | None = None) -> int:
    """The smallest Little's-law cap over the profile's endpoints with a measured `capacity_per_s`."""
    caps = {s.endpoint: little_cap(s.capacity_per_s, s.p95_ms)
            for s in load_slos(profile, slo_path).values() if s.capacity_per_s}
    if not caps:
        raise HotpathError(f"perf/slo.toml: no endpoint of profile '{profile}' has a measured capacity_per_s")
    return min(caps.values())
