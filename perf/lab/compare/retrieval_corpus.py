"""The whole-corpus build the retrieval comparison measures on (kept in the work dir, out of git).

`make engines` indexes an even spread of the Debian corpus (build/retrieval.toml `limit`, sized for
CI); the comparison wants every package. This runs the endpoint's own exporter (the same graph check,
embedding, faiss build and recall gate) with `limit = 0` into .hotpath/perf/retrieval-full/, and
reuses that build while the served graph, the apt lists and the index settings are unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import logging
from pathlib import Path

from hotpath import paths

logger = logging.getLogger(__name__)

STAMP = "bench-build.json"


def _key(spec) -> dict:
    from hotpath.exporters.retrieval_corpus import apt_lists
    from hotpath.specs.fingerprint import file_digest

    graph = paths.model_repository() / "retrieval" / "1" / "export" / "model.onnx"
    lists = hashlib.sha256("".join(f"{p}:{Path(p).stat().st_size}:{Path(p).stat().st_mtime_ns}\n"
                                   for p in apt_lists()).encode()).hexdigest()
    return {"graph": file_digest(graph), "apt_lists": lists, "index": dataclasses.asdict(spec.hotpath.index),
            "parameters": {k: v.string_value for k, v in spec.config.parameters.items()}}


def full_build(log=logger.info) -> tuple[Path, dict]:
    """(the export dir of the whole-corpus build, its build metrics), building it first when stale."""
    from hotpath.exporters.retrieval_index import RetrievalIndexExporter
    from hotpath.specs.spec import load_spec

    spec = load_spec(paths.model_specs_dir() / "retrieval.toml")
    spec = copy.copy(spec)
    spec.hotpath = dataclasses.replace(spec.hotpath, index=dataclasses.replace(spec.hotpath.index, limit=0))
    out = paths.work_dir() / "perf" / "retrieval-full" / "export"
    key = _key(spec)
    stamp = out / STAMP
    if stamp.exists() and json.loads(stamp.read_text()).get("key") == key:
        log(f"whole-corpus build: reusing {out}")
        return out, json.loads(stamp.read_text())["metrics"]
    out.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    log(f"whole-corpus build into {out} (the endpoint's exporter, limit = 0)")
    report = RetrievalIndexExporter().export(spec, out, log)
    stamp.write_text(json.dumps({"key": key, "metrics": report.metrics}, indent=2, default=str))
    return out, report.metrics
