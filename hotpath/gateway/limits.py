"""The gateway's limits, sized from the specs and from measured capacity.

- Request size: the largest item a spec admits (an image's `max_bytes`, a text's `max_text_bytes`)
  plus framing. A bigger body could only fail at the model, after it was moved there.
- Admission: in-flight inference calls per replica, for the endpoint that allows the fewest. Little's
  law (L = throughput x time in the system) with the measured capacity and the p95 target as the
  time is an upper bound: the mean time is below the p95. So the cap is also held to the concurrency
  at which that capacity was measured within the target (the SLO's `concurrency`): more in flight
  only adds queueing. Calls past the cap are refused at once instead of queueing in front of a busy
  model. Measured at 2x capacity (perf/reports/overload.md): cap 11 (Little's law alone) p95 28.5 ms,
  cap 8 23.8 ms, for a 25 ms target.
- Streams (gRPC ModelStreamInfer, HTTP generate/generate_stream) last seconds, not milliseconds: they
  have their own cap per replica, the sequences a decoupled model decodes at once without queueing
  (its `max_num_seqs` sequences x instances), so that long generations never take the slots of short calls.
"""

from __future__ import annotations

from pathlib import Path

from hotpath import paths
from hotpath.errors import HotpathError
from hotpath.specs.repository import instance_count
from hotpath.specs.spec import load_specs
from hotpath.tuning.slo import load_slos

ITEM_BYTE_PARAMETERS = ("max_bytes", "max_text_bytes")   # per-item byte limits of the Python steps
BODY_OVERHEAD_BYTES = 1 << 20   # protobuf/JSON framing, the other inputs, a batch of small items
STREAM_SLOTS_PARAMETER = "max_num_seqs"   # sequences a decoupled model decodes together (text_generation: vLLM's)


def max_body_bytes(spec_dir: Path | None = None) -> int:
    """Largest per-item byte limit of any spec, plus BODY_OVERHEAD_BYTES."""
    limits = [int(spec.config.parameters[key].string_value)
              for spec in load_specs(spec_dir or paths.model_specs_dir())
              for key in ITEM_BYTE_PARAMETERS if key in spec.config.parameters]
    if not limits:
        raise HotpathError(f"no spec sets any of {ITEM_BYTE_PARAMETERS}: nothing to size the body limit from")
    return max(limits) + BODY_OVERHEAD_BYTES


def stream_cap(spec_dir: Path | None = None) -> int:
    """Streams per replica: the fewest any decoupled spec serves at once (`max_batch` x its instances)."""
    caps = [int(spec.config.parameters[STREAM_SLOTS_PARAMETER].string_value) * instance_count(spec.config)
            for spec in load_specs(spec_dir or paths.model_specs_dir())
            if spec.config.model_transaction_policy.decoupled and STREAM_SLOTS_PARAMETER in spec.config.parameters]
    if not caps:
        raise HotpathError(f"no decoupled spec sets `{STREAM_SLOTS_PARAMETER}`: nothing to size the stream cap from")
    return min(caps)


def little_cap(capacity_per_s: float, p95_ms: float) -> int:
    """In-flight calls that `capacity_per_s` serves within `p95_ms`: L = X * W, at least 1."""
    return max(1, int(capacity_per_s * p95_ms / 1000.0))


def admission_cap(profile: str = "cpu", slo_path: Path | None = None) -> int:
    """The smallest cap over the profile's endpoints with a measured `capacity_per_s`: Little's law,
    at most the concurrency that capacity was measured at."""
    caps = {s.endpoint: min(little_cap(s.capacity_per_s, s.p95_ms), s.concurrency)
            for s in load_slos(profile, slo_path).values() if s.capacity_per_s}
    if not caps:
        raise HotpathError(f"perf/slo.toml: no endpoint of profile '{profile}' has a measured capacity_per_s")
    return min(caps.values())
