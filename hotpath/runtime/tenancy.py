"""Who a request is for, as the gateway says: its tenant and its store collection (runs in the Triton stub).

The gateway sets TENANT_HEADER and COLLECTION_HEADER on every call it passes to a replica, replacing any
value a client sent, and refuses request parameters with those names. tritonserver forwards the two
headers as request parameters (FORWARD_PATTERN, `--grpc-header-forward-pattern` and
`--http-header-forward-pattern` in hotpath.server.command), and an ensemble hands them to its steps.
A call that carries neither did not come through the gateway (a direct call on the serving network or a
development host): tenant LOCAL, collection LOCAL. Triton and the OpenAI API are never published (the
gateway is the only public door, docs/deployment.md), so the gateway is the one place these are set.
"""

from __future__ import annotations

import json
import re

from hotpath.runtime.errors import InputError

TENANT_HEADER = "x-hotpath-tenant"
COLLECTION_HEADER = "x-hotpath-collection"
FORWARD_PATTERN = "^x-hotpath-(tenant|collection)$"
LOCAL = "local"      # the tenant and collection of a call that did not come through the gateway
SHARED = "shared"    # the shared corpus: every tenant's searches see it; only an admin tenant writes it
RESERVED = (LOCAL, SHARED)
NAME = re.compile(r"[a-z0-9_-]{1,64}")   # a tenant's name, and so its collection's (hotpath.gateway.tenants)


class TenancyError(InputError):
    """The request names its tenant or collection more than once, or not as a tenant's name."""


def _pairs(request) -> list[tuple[str, object]]:
    # Triton writes the parameters as JSON with every forwarded header and body parameter kept, so a
    # name can appear twice (a body parameter beside the header, a header in other letter case:
    # tritonserver 2.51 matches the forward pattern case-insensitively). Pairs, not a dict, keep them all.
    try:
        pairs = json.loads(request.parameters() or "{}", object_pairs_hook=lambda p: p)
    except (AttributeError, TypeError, ValueError):
        return []
    return pairs if isinstance(pairs, list) else []


def _named(request, key: str) -> str:
    values = {v if isinstance(v, str) else repr(v) for k, v in _pairs(request) if k.lower() == key}
    if not values:
        return LOCAL
    value = values.pop()
    if values or not NAME.fullmatch(value):
        # only the gateway sets it, once, from the tenants file's names: anything else is refused
        raise TenancyError(f"{key} is given more than once or is not a tenant name")
    return value


def tenant_of(request) -> str:
    """The tenant the gateway admitted the request for; LOCAL without the gateway."""
    return _named(request, TENANT_HEADER)


def collection_of(request) -> str:
    """The store collection the request reads and writes (its tenant's, SHARED for an admin); LOCAL without
    the gateway."""
    return _named(request, COLLECTION_HEADER)
