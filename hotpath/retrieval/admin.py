"""`hotpath retrieval drop-collection NAME`: delete one tenant's collection from the retrieval store, as an operator.

The command talks to the store itself, never through the serving endpoint (which would need an admin-only
op that any caller reaching Triton directly could try):
- `--store pgvector`: one `DELETE ... WHERE collection = %s` on the server every replica shares, so every
  replica's next search no longer sees it;
- `--store hnsw`: a "drop" record appended, under the store's lock and fsync'd, to the write-ahead log in the
  model's data directory (hotpath.runtime.retrieval.hnsw_store). The running model tails that log before each
  search and write, so it stops seeing the collection on its next call; a model started later replays it.
  Run it where the data directory is mounted (the serving host or pod), the server up or down.

The store and its settings default to the model's config in the repository (`store`, `data_dir`,
`pg_dsn`, `pg_table`) and the deployment's environment (HOTPATH_RETRIEVAL_DATA_DIR, HOTPATH_PG_DSN), the
way the model itself finds them (hotpath.runtime.retrieval.open). The shared corpus ("shared") is refused without
--force: every tenant searches it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from hotpath.errors import HotpathError
from hotpath.runtime.tenancy import NAME, SHARED


def _params(args: argparse.Namespace):
    from hotpath import paths
    from hotpath.runtime.parameters import RetrievalParameters
    from hotpath.specs.repository import read_config

    repository = Path(args.repository or paths.model_repository())
    values: dict[str, str] = {}
    if (repository / args.model / "config.pbtxt").is_file():
        values = {k: v.string_value for k, v in read_config(repository / args.model).parameters.items()}
    for key in ("store", "pg_table"):
        if getattr(args, key, None):
            values[key] = getattr(args, key)
    return RetrievalParameters.parse(values, strict=False), repository


def open_for_admin(args: argparse.Namespace):
    """The store the model `args.model` of the repository serves from (no seeding, no build needed for pgvector)."""
    from hotpath import paths
    from hotpath.runtime.retrieval.open import STORES, data_dir_of

    params, repository = _params(args)
    if params.store == "hnsw":
        from hotpath.runtime.retrieval.hnsw_store import HnswStore

        base = Path(args.export) if args.export else repository / args.model / "1" / "export"
        data = Path(args.data_dir) if args.data_dir else data_dir_of(params, args.model, paths.work_dir())
        return HnswStore(base, data, compact_bytes=params.compact_bytes)
    if params.store == "pgvector":
        from hotpath import settings
        from hotpath.runtime.retrieval.pgvector_store import DSN_ENV, PgVectorStore

        dsn = args.pg_dsn or settings.pg_dsn() or params.pg_dsn
        if not dsn:
            raise HotpathError(f"--store pgvector needs --pg-dsn, ${DSN_ENV} or the model's pg_dsn parameter")
        dim = PgVectorStore.table_dim(dsn, params.pg_table)
        if dim is None:
            raise HotpathError(f"pgvector: no table {params.pg_table} at that server")
        return PgVectorStore(dsn, dim, table=params.pg_table)
    raise HotpathError(f"--store must be one of {', '.join(STORES)}, got {params.store!r}")


def cmd_drop_collection(args: argparse.Namespace) -> int:
    name = args.name
    if not NAME.fullmatch(name):
        raise HotpathError(f"{name!r} is not a collection name (a tenant's name: {NAME.pattern})")
    if name == SHARED and not args.force:
        raise HotpathError("refusing to drop the shared corpus, which every tenant searches (--force to do it)")
    store = open_for_admin(args)
    try:
        dropped = store.drop_collection(name)
        kind = type(store).__name__
        where = getattr(store, "data_dir", None) or getattr(store, "table", "")
    finally:
        store.close()
    print(f"dropped collection {name}: {dropped} documents ({kind} at {where})")
    return 0


def cmd_collections(args: argparse.Namespace) -> int:
    store = open_for_admin(args)
    try:
        for name, n in store.collection_names().items():
            print(f"{name}\t{n}")
    finally:
        store.close()
    return 0


def add_commands(sub) -> None:
    """`hotpath retrieval drop-collection NAME` and `hotpath retrieval collections` under the CLI's subparsers."""
    p = sub.add_parser("retrieval", help="operate the retrieval endpoint's store (collections per tenant)")
    actions = p.add_subparsers(dest="action", required=True)
    drop = actions.add_parser("drop-collection", help="delete every document of one tenant's collection")
    drop.add_argument("name", help="the collection: the tenant's name ('local': direct calls; 'shared': --force)")
    drop.add_argument("--force", action="store_true", help="allow dropping 'shared', the built corpus")
    drop.set_defaults(func=cmd_drop_collection)
    listing = actions.add_parser("collections", help="documents per collection")
    listing.set_defaults(func=cmd_collections)
    for q in (drop, listing):
        q.add_argument("--store", choices=("hnsw", "pgvector"), default=None,
                       help="default: the model's `store` parameter")
        q.add_argument("--model", default="retrieval", help="the model whose store it is (default retrieval)")
        q.add_argument("--repository", default=None, help="the model repository (default: the built one)")
        q.add_argument("--data-dir", default=None,
                       help="hnsw: the WAL's directory (default: as the model finds it, hotpath.runtime.retrieval.open)")
        q.add_argument("--export", default=None, help="hnsw: the build output (default: the model's 1/export)")
        q.add_argument("--pg-dsn", default=None, help="pgvector: the server (default: $HOTPATH_PG_DSN, the model's)")
        q.add_argument("--pg-table", default=None, help="pgvector: the table (default: the model's pg_table)")
