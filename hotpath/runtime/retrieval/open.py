"""Open the store the `retrieval` endpoint searches, chosen by configuration only (`store` parameter)."""

from __future__ import annotations

from pathlib import Path

from hotpath.runtime import settings
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.retrieval.store import VectorStore

STORES = ("hnsw", "pgvector")


def data_dir_of(params: RetrievalParameters, model: str, default_root: Path) -> Path:
    """Where the in-process store's WAL lives: `$HOTPATH_RETRIEVAL_DATA_DIR/<model>` (the deployment's
    volume), else the `data_dir` parameter, else `<default_root>/retrieval/<model>` (model repositories
    are often read-only in production, and hotpath serve runs a staged copy of one)."""
    env = settings.retrieval_data_dir()
    if env:
        return Path(env) / model
    return Path(params.data_dir) if params.data_dir else Path(default_root) / "retrieval" / model


def open_store(params: RetrievalParameters, data_dir: Path, base_dir: Path | None = None) -> VectorStore:
    """`store = "hnsw"` (default): the built index in `base_dir` plus the WAL in `data_dir`, searched at the
    `ef_search` parameter, else the build's; `store = "pgvector"`: a Postgres + pgvector server shared by
    every replica (its parameters in `params`)."""
    kind = params.store
    if kind == "hnsw":
        from hotpath.runtime.retrieval.hnsw_store import HnswStore

        if base_dir is None:
            raise ValueError("the hnsw store needs the build output's directory (base_dir)")
        return HnswStore(base_dir, data_dir, ef_search=params.ef_search, compact_bytes=params.compact_bytes)
    if kind == "pgvector":
        from hotpath.runtime.retrieval.pgvector_store import PgVectorStore

        return PgVectorStore.from_params(params, base_dir)   # seeds a new table from the build
    raise ValueError(f"store must be one of {', '.join(STORES)}, got {kind!r}")
