"""The exact cache's keys, one definition for every caller: the gateway's NGINX Lua
(hotpath/gateway/exact_cache.lua builds the same string) and the OpenAI API (hotpath.openai_api.answer_cache).

    hotpath:cache:<namespace>:<endpoint>:<build>:<sha256 of the request>

- namespace: the tenant's cache namespace (its name unless tenants.toml sets `cache_namespace`; tenants
  that set the same one share answers), so one tenant never reads another's answers by default;
- endpoint: the public model (or API route) that answers;
- build: `repository_build()`, a fingerprint of every model's config and build stamp, so a new model
  version, config or engine never serves an answer of the old one;
- request: every byte that can change the answer, exactly as received (the gateway: URI with the version
  asked, Inference-Header-Content-Length, body; the OpenAI API: its canonical JSON of the request with the
  whole conversation and every sampling parameter, without `stream` / `stream_options`). Exact bytes, not a parse: two spellings of one
  request are two entries, never one entry for two requests.

Only deterministic answers are cached (a spec's `response_cache { enable: true }`, a greedy or seeded
completion), only successes, each for a TTL.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hotpath.specs.fingerprint import STAMP
from hotpath.specs.repository import Repository

PREFIX = "hotpath:cache:"
DEFAULT_TTL_S = 3600
MAX_ANSWER_BYTES = 1 << 20   # larger answers are not kept (an image batch's outputs)
HIT_HEADER = "X-Hotpath-Cache"   # "hit" / "miss" on a cacheable endpoint's answer
# The tenant gateway tells the OpenAI API its caller's namespace (it replaces whatever a client sent).
NAMESPACE_HEADER = "X-Hotpath-Cache-Namespace"
# A store endpoint (retrieval) is one with this input: a call with it may write (OP "upsert" / "delete",
# hotpath/runtime/retrieval/requests.py), which moves the version of the writer's collection, kept under
# STORE_VERSION_PREFIX + endpoint + ":" + collection; a cached read is keyed by its collection and served only
# under the versions (the shared corpus's and its own) it was computed at (hotpath/gateway/exact_cache.lua).
STORE_WRITE_INPUT = "OP"
STORE_VERSION_PREFIX = "hotpath:store_version:"


def cache_key(namespace: str, endpoint: str, build: str, request: bytes) -> str:
    """The key of one request's answer (see the module docstring)."""
    return f"{PREFIX}{namespace}:{endpoint}:{build}:{hashlib.sha256(request).hexdigest()}"


def repository_build(repository: Repository | None = None) -> str:
    """16 hex digits over every model's config.pbtxt and build stamps (.hotpath-build.json) in the
    repository the replicas serve: what changes when any answer may change."""
    root = Path((repository or Repository()).path)
    h = hashlib.sha256()
    for path in sorted([*root.glob("*/config.pbtxt"), *root.glob(f"*/*/{STAMP}")]):
        h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]
