"""The OpenAI-compatible HTTP API over the repository's endpoints (`hotpath serve --openai-port`).

A process of its own beside tritonserver (hotpath.openai_api.openai_server), calling the endpoints over async gRPC
on loopback: /v1/embeddings -> text_embedding, /v1/chat/completions and /v1/completions -> text_generation,
/v1/models, /health, /metrics. Modules: schemas (request bodies), catalog (what is served, under which
names), tokens (usage.prompt_tokens), triton (the gRPC calls), generation (chat <-> tensors), errors (the
OpenAI error shape), metrics, app (the routes).
"""
