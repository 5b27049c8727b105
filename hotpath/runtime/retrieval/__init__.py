"""The retrieval endpoint's stores as the Triton stub runs them: HNSW with a WAL, pgvector, collections."""
