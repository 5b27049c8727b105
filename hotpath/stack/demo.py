"""The example request `make serve` shows once the server is up."""

from __future__ import annotations

import json
import urllib.request

import numpy as np

from hotpath.client import EmbeddingClient

EXAMPLE_TEXTS = ["How do I reset my password?", "I forgot my login credentials.", "Best pizza in Naples"]


def show_example(url: str, openai_base_url: str | None = None, token: str | None = None) -> None:
    """Send one real request to text_embedding and print the request, the answer and how to repeat it;
    with `openai_base_url`, the same through the OpenAI-compatible API; with `token`, as that tenant
    (through the tenant gateway)."""
    with EmbeddingClient(url, token=token) as client:
        vectors = client.embed(EXAMPLE_TEXTS)
    print(f"\n[demo] gRPC request to text_embedding at {url}: TEXT = {EXAMPLE_TEXTS}")
    print(f"[demo] EMBEDDING shape {list(vectors.shape)}, L2 norms {np.round(np.linalg.norm(vectors, axis=1), 4)}")
    print(f"[demo] first values of EMBEDDING[0]: {np.round(vectors[0, :6], 4)}")
    sims = vectors @ vectors.T
    for text, row in zip(EXAMPLE_TEXTS, sims):
        print(f"[demo]   cos({text[:32]!r:>34}, ...) = {np.round(row, 3)}")
    as_tenant = "HOTPATH_TOKEN=<a tenant's token> " if token else ""
    print(f"[demo] try it: {as_tenant}.venv/bin/hotpath embed --url {url} --similarity \"first text\" \"second text\"\n",
          flush=True)
    if openai_base_url:
        show_openai_example(openai_base_url, token)


def show_openai_example(base_url: str, token: str | None = None) -> None:
    """One real POST /v1/embeddings through the OpenAI-compatible API (with `token` as its API key), and the
    curl line that repeats it."""
    body = {"model": "text_embedding", "input": EXAMPLE_TEXTS[:2]}
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"{base_url}/embeddings", json.dumps(body).encode(), headers)
    with urllib.request.urlopen(request, timeout=30) as r:
        answer = json.loads(r.read())
    first = answer["data"][0]["embedding"]
    print(f"[demo] OpenAI-compatible API, base URL {base_url}")
    print(f"[demo] POST {base_url}/embeddings {json.dumps(body)}")
    print(f"[demo]   -> {len(answer['data'])} embeddings of {len(first)} floats, first values "
          f"{[round(v, 4) for v in first[:6]]}, usage {answer['usage']}")
    key = "<a tenant's token>" if token else "unused"
    auth = f"-H 'authorization: Bearer {key}' " if token else ""
    print(f"[demo] try it: curl -s {base_url}/embeddings {auth}-H 'content-type: application/json' "
          f"-d '{{\"model\": \"text_embedding\", \"input\": \"hello\"}}'")
    print(f"[demo]   or:   OpenAI(base_url=\"{base_url}\", api_key=\"{key}\").embeddings.create("
          f"model=\"text_embedding\", input=\"hello\")\n", flush=True)
