"""The retrieval endpoint's tooling: `hotpath retrieval` (collections, drop-collection), the pgvector variant of
the repository and a local Postgres + pgvector for it.

The stores themselves (`VectorStore`, the in-process HNSW index with its write-ahead log, pgvector) run inside
Triton's stub: hotpath.runtime.retrieval. The index is built by hotpath.exporters.retrieval_build.
"""
