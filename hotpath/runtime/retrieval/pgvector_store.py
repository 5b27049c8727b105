"""The `retrieval` endpoint's documents in Postgres + pgvector: one shared index for a fleet of replicas.

One table (collection text, id text, embedding vector(dim), document text; primary key (collection, id))
with an HNSW index on the inner product (`vector_ip_ops`; the vectors are normalized, so that is the cosine). A write is one
transaction committed with Postgres' defaults (synchronous_commit, fsync): when `upsert` or `delete`
returns, the write is in the WAL and every replica's next search sees it. A batch of queries is one
statement (a LATERAL join over the query array), so one round trip.

A refused or broken connection raises `StoreUnavailableError` (a `ConnectionError`: the server's
fault, never the request's); the next call reconnects, and a call that finds its connection broken
reconnects and retries once (every operation here is idempotent).

Collections (hotpath.runtime.retrieval.store): the SQL itself keeps tenants apart. The collection is
part of the key, and every statement names it as a bound parameter: writes `WHERE collection = %s` /
`INSERT (collection, ...) ON CONFLICT (collection, id)`, searches `WHERE collection = ANY(%s)` with
[own, 'shared'] (and a shared row only when the own collection has no row of that id, so the tenant's
version wins), `drop_collection` `DELETE ... WHERE collection = %s`. Chosen over row-level security:
every replica connects as one database role and the tenant is a per-request value, so RLS would need a
`SET app.collection` per statement (a GUC that a forgotten reset leaks into the next request on the same
connection) for no extra protection against this code; and a key column lets the primary key index answer
"does this tenant hold that id" and a whole tenant's delete. A table from before collections (id as its
sole key) is migrated in place, once, under an advisory lock: its rows become 'shared'.

pgvector 0.6 (the pgserver wheel's) applies the collection filter after the HNSW scan, so a search
returns fewer than k rows when other tenants' documents take more than ef_search - k of the nearest
candidates; with pgvector >= 0.8 the store turns on `hnsw.iterative_scan` (strict order), which scans on.
"""

from __future__ import annotations

import os
import re
import threading
import time
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from hotpath.runtime.errors import ConfigError, UnavailableError
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.retrieval.store import Hits
from hotpath.runtime.tenancy import SHARED

DSN_ENV = "HOTPATH_PG_DSN"
DEFAULT_TABLE = RetrievalParameters.pg_table
_TABLE = re.compile(r"[a-z_][a-z0-9_]{0,62}")


class StoreUnavailableError(UnavailableError):
    """The store cannot be reached (refused, dropped, timed out): retry later or elsewhere."""


def _first(*values, default=None):
    return next((v for v in values if v is not None), default)


class PgVectorStore:
    """VectorStore on Postgres + pgvector (psycopg 3, binary vectors via the pgvector helper)."""

    def __init__(self, dsn: str, dim: int, table: str = DEFAULT_TABLE, m: int = 16, ef_construction: int = 64,
                 ef_search: int = 64, connect_timeout_s: int = 5, maintenance_work_mem: str = "512MB"):
        if not _TABLE.fullmatch(table):
            raise ValueError(f"table name {table!r}: lower-case letters, digits and _ only")
        if dim <= 0 or m < 2 or ef_construction < 2 * m or ef_search < 1:
            raise ValueError(f"bad index parameters: dim {dim}, m {m}, ef_construction {ef_construction} "
                             f"(>= 2 m), ef_search {ef_search}")
        self.dsn, self.dim, self.table = dsn, int(dim), table
        self.m, self.ef_construction, self.ef_search = int(m), int(ef_construction), int(ef_search)
        self.connect_timeout_s = connect_timeout_s
        self.maintenance_work_mem = maintenance_work_mem
        self._conn = None
        self._ef_now = 0
        self._lock = threading.Lock()
        self._call(self._create_schema)

    @classmethod
    def from_params(cls, params: RetrievalParameters | Mapping[str, str], base_dir: Path | None = None) -> PgVectorStore:
        """From the retrieval model's parameters (or its config's strings, as Triton passes them): the DSN (env
        HOTPATH_PG_DSN, else `pg_dsn`), `pg_table`, `dim` and the HNSW `m`, `ef_construction`, `ef_search` (each else the
        build manifest's). With `base_dir` (the in-process store's build output: corpus + index), a table never
        seeded gets that corpus once (hotpath.runtime.retrieval.pgvector_seed), so every replica starts complete."""
        from hotpath.runtime import settings

        if not isinstance(params, RetrievalParameters):
            params = RetrievalParameters.parse(params, strict=False)
        dsn = settings.pg_dsn() or params.pg_dsn   # the deployment's environment first, as data_dir
        if not dsn:
            raise ValueError(f"store = 'pgvector' needs the environment variable {DSN_ENV} or the parameter pg_dsn")
        build: dict = {}
        if base_dir is not None:   # the build's HNSW settings are the defaults: both stores index alike
            from hotpath.runtime.retrieval.pgvector_seed import manifest

            build = manifest(base_dir)
        table = params.pg_table
        dim = _first(params.dim, params.dimension, default=build.get("dim")) or cls.table_dim(dsn, table)
        if dim is None:
            raise ValueError(f"store = 'pgvector' needs the parameter dim (or the build output's manifest, or an "
                             f"existing table {table})")
        store = cls(dsn, int(dim), table=table,
                    m=int(_first(params.pg_m, params.m, default=build.get("M", 16))),
                    ef_construction=int(_first(params.pg_ef_construction, params.ef_construction,
                                               default=build.get("ef_construction", 64))),
                    ef_search=int(_first(params.pg_ef_search, params.ef_search, default=build.get("ef_search", 64))))
        if base_dir is not None:
            from hotpath.runtime.retrieval.pgvector_seed import seed

            seed(store, base_dir)
        return store

    @staticmethod
    def table_dim(dsn: str, table: str, connect_timeout_s: int = 5) -> int | None:
        """The vector dimension of an existing table, None if there is none."""
        import psycopg

        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout_s) as conn:
                row = conn.execute("SELECT atttypmod FROM pg_attribute WHERE attrelid = to_regclass(%s) "
                                   "AND attname = 'embedding'", (table,)).fetchone()
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"pgvector store: cannot connect: {str(exc).strip()}") from exc
        return int(row[0]) if row and row[0] > 0 else None

    # -- connection -------------------------------------------------------------------------------------

    def _connect(self):
        import psycopg
        from pgvector.psycopg import register_vector

        try:
            conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self.connect_timeout_s)
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            register_vector(conn)
            version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
            if tuple(int(p) for p in re.findall(r"\d+", version)[:2]) >= (0, 8):
                conn.execute("SET hnsw.iterative_scan = strict_order")   # filtered searches scan on
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"pgvector store: cannot connect: {str(exc).strip()}") from exc
        self._ef_now = 0
        return conn

    def _call(self, op, *args):
        """Run `op(conn, *args)`; reconnect and retry once when the connection turns out broken."""
        import psycopg

        with self._lock:
            for attempt in (0, 1):
                fresh = self._conn is None or self._conn.closed
                if fresh:
                    self._conn = self._connect()
                try:
                    return op(self._conn, *args)
                except psycopg.OperationalError as exc:
                    broken = self._conn.broken or self._conn.closed
                    self._drop()
                    if not broken:
                        raise StoreUnavailableError(f"pgvector store: {str(exc).strip()}") from exc
                    if fresh or attempt:
                        raise StoreUnavailableError(f"pgvector store: connection lost: {str(exc).strip()}") from exc

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:   # closing a dead socket may fail; it is gone either way
                pass
        self._conn = None

    def _sql(self, text: str):
        from psycopg import sql

        return sql.SQL(text).format(table=sql.Identifier(self.table), index=sql.Identifier(f"{self.table}_hnsw"))

    def _create_schema(self, conn) -> None:
        from psycopg import sql

        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('hotpath_schema'), hashtext(%s))", (self.table,))
            conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (collection text NOT NULL DEFAULT 'shared', id text "
                                 "NOT NULL, embedding vector({}) NOT NULL, document text NOT NULL, "
                                 "PRIMARY KEY (collection, id))").format(sql.Identifier(self.table),
                                                                         sql.Literal(self.dim)))
            self._migrate(conn)
            found = conn.execute("SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = "
                                 "%s::regclass AND attname = 'embedding'", (self.table,)).fetchone()[0]
            if found != f"vector({self.dim})":
                raise ConfigError(f"pgvector store: table {self.table} holds {found}, not vector({self.dim})")
            self._create_index(conn)

    def _migrate(self, conn) -> None:
        """A table from before collections (primary key id): add `collection` (its rows become 'shared') and key
        the table on (collection, id). Idempotent; the caller holds the schema's advisory lock."""
        if not conn.execute("SELECT 1 FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'collection' "
                            "AND NOT attisdropped", (self.table,)).fetchone():   # no ALTER's lock when migrated
            conn.execute(self._sql("ALTER TABLE {table} ADD COLUMN collection text NOT NULL DEFAULT 'shared'"))
        key = conn.execute(
            "SELECT c.conname, array_agg(a.attname::text ORDER BY k.n) FROM pg_constraint c "
            "CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) "
            "JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum "
            "WHERE c.conrelid = %s::regclass AND c.contype = 'p' GROUP BY c.conname", (self.table,)).fetchone()
        if key is None or key[1] != ["collection", "id"]:
            from psycopg import sql

            if key is not None:
                conn.execute(sql.SQL("ALTER TABLE {} DROP CONSTRAINT {}").format(sql.Identifier(self.table),
                                                                                 sql.Identifier(key[0])))
            conn.execute(self._sql("ALTER TABLE {table} ADD PRIMARY KEY (collection, id)"))

    def _create_index(self, conn) -> None:
        from psycopg import sql

        conn.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(self.maintenance_work_mem)))
        conn.execute(self._sql("CREATE INDEX IF NOT EXISTS {index} ON {table} USING hnsw (embedding vector_ip_ops) "
                               "WITH (m = %s, ef_construction = %s)" % (self.m, self.ef_construction)))

    # -- checks -----------------------------------------------------------------------------------------

    def _vectors(self, vectors: np.ndarray) -> np.ndarray:
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"vectors must be [n, {self.dim}], not {list(vectors.shape)}")
        if not np.isfinite(vectors).all():
            raise ValueError("vectors must be finite")
        return vectors

    @staticmethod
    def _texts(name: str, values: Sequence[str]) -> list[str]:
        values = [str(v) for v in values]
        if any("\x00" in v for v in values):
            raise ValueError(f"{name}: Postgres text cannot hold NUL characters")
        return values

    # -- VectorStore ------------------------------------------------------------------------------------

    def search(self, vectors: np.ndarray, k: int, collection: str = SHARED) -> Hits:
        """Top-k of `collection` and 'shared' (an id in both: `collection`'s); 'shared' alone for SHARED."""
        vectors = self._vectors(vectors)
        if k <= 0:
            raise ValueError(f"k must be positive, not {k}")
        rows = self._call(self._search, vectors, int(k), str(collection)) if len(vectors) else []
        n = len(vectors)
        ids = [[""] * k for _ in range(n)]
        documents = [[""] * k for _ in range(n)]
        scores = np.full((n, k), -np.inf, dtype=np.float32)
        for query, rank, id_, document, score in rows:
            ids[query - 1][rank - 1], documents[query - 1][rank - 1] = id_, document
            scores[query - 1, rank - 1] = score
        return Hits(ids, scores, documents)

    def _search(self, conn, vectors: np.ndarray, k: int, collection: str) -> list[tuple]:
        # HNSW returns at most ef_search rows per scan: a k above it would come back short.
        ef = max(self.ef_search, k)
        if ef != self._ef_now:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef),))
            self._ef_now = ef
        return conn.execute(self._sql(
            "SELECT q.i, row_number() OVER (PARTITION BY q.i ORDER BY d.distance), d.id, d.document, -d.distance "
            "FROM unnest(%s::vector[]) WITH ORDINALITY AS q(v, i) "
            "CROSS JOIN LATERAL (SELECT s.id, s.document, s.embedding <#> q.v AS distance FROM {table} AS s "
            "WHERE s.collection = ANY(%s) AND (s.collection = %s OR NOT EXISTS "
            "(SELECT 1 FROM {table} AS o WHERE o.collection = %s AND o.id = s.id)) "
            "ORDER BY s.embedding <#> q.v LIMIT %s) AS d"),
            (list(vectors), sorted({collection, SHARED}), collection, collection, k)).fetchall()

    def upsert(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str],
               collection: str = SHARED) -> None:
        vectors = self._vectors(vectors)
        ids, documents = self._texts("ids", ids), self._texts("documents", documents)
        if not len(ids) == len(vectors) == len(documents):
            raise ValueError(f"{len(ids)} ids, {len(vectors)} vectors, {len(documents)} documents")
        if any(not i for i in ids):
            raise ValueError("ids must be non-empty")
        last = {id_: n for n, id_ in enumerate(ids)}   # a repeated id: the last one wins, as in a loop of upserts
        keep = sorted(last.values())
        if keep:
            self._call(self._upsert, [ids[n] for n in keep], [vectors[n] for n in keep], [documents[n] for n in keep],
                       str(collection))

    def _upsert(self, conn, ids: list[str], vectors: list[np.ndarray], documents: list[str], collection: str) -> None:
        conn.execute(self._sql(
            "INSERT INTO {table} (collection, id, embedding, document) SELECT %s, * FROM unnest(%s::text[], "
            "%s::vector[], %s::text[]) ON CONFLICT (collection, id) DO UPDATE SET embedding = EXCLUDED.embedding, "
            "document = EXCLUDED.document"), (collection, ids, vectors, documents))

    def delete(self, ids: Sequence[str], collection: str = SHARED) -> int:
        ids = self._texts("ids", ids)
        return self._call(lambda conn: conn.execute(self._sql(
            "DELETE FROM {table} WHERE collection = %s AND id = ANY(%s)"), (str(collection), ids)).rowcount) if ids else 0

    def drop_collection(self, collection: str) -> int:
        """Delete every document of `collection` (one statement, one transaction); returns how many there were."""
        return self._call(lambda conn: conn.execute(self._sql("DELETE FROM {table} WHERE collection = %s"),
                                                    (str(collection),)).rowcount)

    def collection_names(self) -> dict[str, int]:
        """Live documents per collection."""
        return dict(self._call(lambda conn: conn.execute(self._sql(
            "SELECT collection, count(*) FROM {table} GROUP BY collection ORDER BY collection")).fetchall()))

    def write(self, ops: Sequence[tuple[str, str, str, np.ndarray | None]], collection: str = SHARED) -> list[bool]:
        """Upserts and deletes of `collection` in order, one transaction: `ops` are (op, id, document, vector);
        returns per op whether the id existed there before it (as the in-process store's `write`)."""
        checked = []
        for op, doc_id, document, vector in ops:
            if op not in ("upsert", "delete") or not doc_id:
                raise ValueError(f"bad write {op!r} for id {doc_id!r}")
            (doc_id,), (document,) = self._texts("ids", [doc_id]), self._texts("documents", [document or ""])
            checked.append((op, doc_id, document, self._vectors(np.reshape(vector, (1, -1)))[0]
                            if op == "upsert" else None))
        return self._call(self._write, checked, str(collection)) if checked else []

    def _write(self, conn, ops: list, collection: str) -> list[bool]:
        existed = []
        with conn.transaction():
            for op, doc_id, document, vector in ops:
                if op == "upsert":
                    # xmax is 0 on a freshly inserted row, the updating transaction's id on a replaced one
                    existed.append(conn.execute(self._sql(
                        "INSERT INTO {table} (collection, id, embedding, document) VALUES (%s, %s, %s, %s) "
                        "ON CONFLICT (collection, id) DO UPDATE SET embedding = EXCLUDED.embedding, "
                        "document = EXCLUDED.document RETURNING xmax <> 0"),
                        (collection, doc_id, vector, document)).fetchone()[0])
                else:
                    existed.append(conn.execute(self._sql("DELETE FROM {table} WHERE collection = %s AND id = %s"),
                                                (collection, doc_id)).rowcount > 0)
        return existed

    def get(self, doc_id: str, collection: str = SHARED) -> str | None:
        """The stored document of `doc_id` in `collection`, or None."""
        row = self._call(lambda conn: conn.execute(self._sql(
            "SELECT document FROM {table} WHERE collection = %s AND id = %s"), (str(collection), str(doc_id))).fetchone())
        return row[0] if row else None

    def stats(self) -> dict:
        return {"documents": self.count(), "store": "pgvector", "table": self.table, "pid": os.getpid()}

    def count(self, collection: str | None = None) -> int:
        if collection is None:
            return self._call(lambda conn: conn.execute(self._sql("SELECT count(*) FROM {table}")).fetchone()[0])
        return self._call(lambda conn: conn.execute(self._sql("SELECT count(*) FROM {table} WHERE collection = %s"),
                                                    (str(collection),)).fetchone()[0])

    def load(self, ids: Sequence[str], vectors: np.ndarray, documents: Sequence[str]) -> dict[str, float]:
        """Replace the shared corpus with these (building from a corpus): COPY into the table without its
        index, then build the HNSW index once, all in one transaction (readers see old or new). Tenants'
        collections are kept.
        Returns the seconds each phase took (copy_s, index_s)."""
        vectors = self._vectors(vectors)
        ids, documents = self._texts("ids", ids), self._texts("documents", documents)
        if not len(ids) == len(vectors) == len(documents) or len(set(ids)) != len(ids) or not all(ids):
            raise ValueError("load needs as many ids (unique, non-empty) as vectors and documents")
        return self._call(self._load, ids, vectors, documents)

    def _load(self, conn, ids: list[str], vectors: np.ndarray, documents: list[str]) -> dict[str, float]:
        with conn.transaction():
            timings = self._copy_and_index(conn, ids, vectors, documents)
        self._vacuum(conn)
        return timings

    def _vacuum(self, conn) -> None:
        # Statistics for the planner, and the visibility map, so count() is an index-only scan of the key.
        conn.execute(self._sql("VACUUM (ANALYZE) {table}"))

    def _copy_and_index(self, conn, ids, vectors, documents) -> dict[str, float]:
        """Inside the caller's transaction: empty the shared collection, COPY the rows in, build the index once."""
        t0 = time.perf_counter()
        conn.execute(self._sql("DROP INDEX IF EXISTS {index}"))
        if conn.execute(self._sql("SELECT EXISTS (SELECT 1 FROM {table} WHERE collection <> %s)"),
                        (SHARED,)).fetchone()[0]:
            conn.execute(self._sql("DELETE FROM {table} WHERE collection = %s"), (SHARED,))   # tenants' rows stay
        else:
            conn.execute(self._sql("TRUNCATE {table}"))
        with conn.cursor().copy(self._sql("COPY {table} (collection, id, embedding, document) FROM STDIN WITH "
                                          "(FORMAT BINARY)")) as copy:
            copy.set_types(["text", "text", "vector", "text"])
            for row in zip(ids, vectors, documents):
                copy.write_row((SHARED, *row))
        t1 = time.perf_counter()
        self._create_index(conn)
        return {"copy_s": t1 - t0, "index_s": time.perf_counter() - t1}

    def seed_once(self, digest: str, rows) -> bool:
        """Load `rows()` -> (ids, vectors, documents) unless this table was seeded before (by any replica:
        an advisory lock serializes them; the seed is recorded in table hotpath_seeds). A table that already
        holds documents is recorded as seeded and left as it is. Returns whether this call loaded."""
        def run(conn) -> bool:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(hashtext('hotpath_seeds'), hashtext(%s))", (self.table,))
                conn.execute("CREATE TABLE IF NOT EXISTS hotpath_seeds (table_name text PRIMARY KEY, corpus_sha256 "
                             "text NOT NULL, documents bigint NOT NULL, seeded_at timestamptz NOT NULL DEFAULT now())")
                if conn.execute("SELECT 1 FROM hotpath_seeds WHERE table_name = %s", (self.table,)).fetchone():
                    return False
                loaded = conn.execute(self._sql("SELECT NOT EXISTS (SELECT 1 FROM {table})")).fetchone()[0]
                if loaded:
                    ids, vectors, documents = rows()
                    self._copy_and_index(conn, self._texts("ids", ids), self._vectors(vectors),
                                         self._texts("documents", documents))
                conn.execute(self._sql("INSERT INTO hotpath_seeds (table_name, corpus_sha256, documents) "
                                       "SELECT %s, %s, count(*) FROM {table}"), (self.table, digest))
            if loaded:
                self._vacuum(conn)
            return loaded
        return self._call(run)

    def sizes(self) -> dict[str, int]:
        """Bytes on disk: the table (with its TOAST and primary key) and the HNSW index."""
        return dict(zip(("table_bytes", "index_bytes"), self._call(lambda conn: conn.execute(
            "SELECT pg_total_relation_size(%s::regclass) - pg_relation_size(%s::regclass), "
            "pg_relation_size(%s::regclass)", (self.table, f"{self.table}_hnsw", f"{self.table}_hnsw")).fetchone())))

    def close(self) -> None:
        with self._lock:
            self._drop()
