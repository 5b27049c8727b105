"""What each tenant used, counted where the work is done, as Triton custom metrics (runs in the Triton stub).

A model counts the units it alone can count (the tokens its tokenizer made, the images it decoded, the
documents it wrote, the tokens the engine generated) under the tenant the gateway named
(hotpath.runtime.tenancy); Triton publishes them on its metrics port beside its own `nv_*` metrics:

  hotpath_usage_<kind>_total{tenant, model, load}   counter, one series per tenant that used the model

`load` is the stub's process id, as hotpath.runtime.llm.metrics does: Triton shares one prometheus child
between same-named families with equal labels, so two instances of a model (or an old and a new load during
a reload) would otherwise count on one child, and the first to unload would free it under the others (a heap
corruption of tritonserver 2.51 seen with the engine's metrics). Sum over `load` (hotpath usage does).

`hotpath usage` reads them back, by tenant and time window. Each increment is one message to the Triton
process: models count once per request in `execute()`, never per token.
"""

from __future__ import annotations

import os
import threading

from hotpath.runtime.tenancy import TenancyError, tenant_of

PREFIX = "hotpath_usage_"
KINDS = {
    "input_tokens": "Prompt tokens of generation requests, as the engine counted them",
    "output_tokens": "Tokens generated, as the engine counted them",
    "embedding_tokens": "Tokens embedded (queries, documents and texts), as the tokenizer counted them",
    "images": "Images decoded",
    "documents_written": "Documents upserted or deleted in a store",
}


class Usage:
    """Per-tenant counters of one model through `pb` (the triton_python_backend_utils module)."""

    def __init__(self, pb, model: str, kinds: tuple[str, ...]):
        unknown = set(kinds) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown usage kinds {sorted(unknown)}; known: {sorted(KINDS)}")
        family = pb.MetricFamily
        self._model = model
        self._lock = threading.Lock()
        self._families = {k: family(name=f"{PREFIX}{k}_total", description=KINDS[k], kind=family.COUNTER)
                          for k in kinds}
        self._metrics: dict[tuple[str, str], object] = {}

    def add(self, kind: str, tenant: str, amount: float) -> None:
        """Count `amount` units of `kind` for `tenant` (nothing when amount is 0)."""
        if not amount:
            return
        with self._lock:
            metric = self._metrics.get((kind, tenant))
            if metric is None:
                metric = self._families[kind].Metric(labels={"tenant": tenant, "model": self._model,
                                                             "load": str(os.getpid())})
                self._metrics[(kind, tenant)] = metric
        metric.increment(float(amount))

    def close(self) -> None:
        """Drop the metrics before their families (python_backend's rule)."""
        with self._lock:
            self._metrics.clear()
            self._families.clear()


def tenants_of(requests) -> list[str | None]:
    """Each request's tenant (hotpath.runtime.tenancy.tenant_of); None for one whose tenant parameter is
    malformed (given twice, or not a tenant's name: only a caller that went round the gateway can send
    that), which the model refuses with TENANCY_REFUSED."""
    out = []
    for request in requests:
        try:
            out.append(tenant_of(request))
        except TenancyError:
            out.append(None)
    return out


TENANCY_REFUSED = "the request's x-hotpath-tenant parameter is given more than once or is not a tenant name"
