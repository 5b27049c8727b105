"""The `retrieval` endpoint configured to search Postgres + pgvector instead of its in-process index.

Configuration only: a model repository whose models link to the built ones, plus one more model
(`retrieval_pg` by default) that is the built `retrieval` model (same code, graph and build output)
with `store = "pgvector"` and the server's DSN and table in its parameters. Tests and the comparison
benchmark serve it next to the in-process one; a fleet sets the same parameters in its spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from hotpath import paths
from hotpath.specs.config_pbtxt import to_pbtxt
from hotpath.specs.repository import read_config

SOURCE, VARIANT = "retrieval", "retrieval_pg"


def pgvector_params(dsn: str, table: str) -> dict[str, str]:
    return {"store": "pgvector", "pg_dsn": dsn, "pg_table": table}


def variant_model(dest: Path, name: str, params: dict[str, str], export: Path | None = None, source: str = SOURCE,
                  repository: Path | None = None, edit: Callable | None = None) -> Path:
    """`dest/name`: the built `source` model (links to its files) under `name` with `params` set in its
    config (and `edit(config)` applied); with `export`, its version 1 serves that build output (corpus,
    index, graph) instead."""
    repository = Path(repository or paths.model_repository())
    config = read_config(repository / source)
    config.name = name
    for key, value in params.items():
        config.parameters[key].string_value = value
    if edit is not None:
        edit(config)
    model = Path(dest) / name
    model.mkdir()
    (model / "config.pbtxt").write_text(to_pbtxt(config))
    for entry in (repository / source).iterdir():   # version dirs, warmup samples: the built model's own
        if entry.name == "config.pbtxt":
            continue
        if export is not None and entry.name == "1":
            (model / "1").mkdir()
            for item in entry.iterdir():
                target = Path(export) if item.name == "export" else item
                (model / "1" / item.name).symlink_to(target.resolve(), target_is_directory=target.is_dir())
        else:
            (model / entry.name).symlink_to(entry.resolve(), target_is_directory=entry.is_dir())
    return model


def pgvector_repository(dest: Path, dsn: str, table: str, models: Sequence[str] = (), name: str = VARIANT,
                        source: str = SOURCE, repository: Path | None = None) -> Path:
    """Write the repository at `dest` (new): links to `models` of `repository` (the built one) and `name`,
    the `source` model reconfigured for pgvector at `dsn`, table `table`. `name` may be `source` itself:
    the endpoint under its own name, on pgvector."""
    from hotpath.server.subset import linked

    dest = Path(dest)
    dest.mkdir(parents=True)
    linked([m for m in models if m != name], dest, repository)
    variant_model(dest, name, pgvector_params(dsn, table), source=source, repository=repository)
    return dest


def build_dir(repository: Path | None = None, source: str = SOURCE) -> Path:
    """The built retrieval model's export directory (graph, corpus, index, manifest)."""
    return Path(repository or paths.model_repository()) / source / "1" / "export"
