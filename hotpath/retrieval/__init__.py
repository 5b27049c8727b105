"""Retrieval next to inference: document stores searched by the `retrieval` endpoint.

`store.VectorStore` is the one interface; `hotpath.retrieval` holds the in-process ANN index (with
its write-ahead log) and the Postgres + pgvector store that a fleet of replicas shares.
"""
