"""The example request `make serve` shows once the server is up."""

from __future__ import annotations

import json
import urllib.request

import numpy as np

from hotpath.client import EmbeddingClient

EXAMPLE_TEXTS = ["How do I reset my password?", "I forgot my login credentials.", "Best pizza in Naples"]


def show_example(url: str, openai_base_url: str | None = None) -> None:
    """Send one real request to text_embedding and print the request, the answer and how to repeat it;
    with `openai_base_url`, the same through the OpenAI-compatible API."""
    with EmbeddingClient(url) as client:
        vectors = client.embed(EXAMPLE_TEXTS)
    print(f"\n[demo] gRPC request to text_embedding at {url}: TEXT = {EXAMPLE_TEXTS}")
    print(f"[demo] EMBEDDING shape {list(vectors.shape)}, L2 norms {np.round(np.linalg.norm(vectors, axis=1), 4)}")
    print(f"[demo] first values of EMBEDDING[0]: {np.round(vectors[0, :6], 4)}")
    sims = vectors @ vectors.T
    for text, row in zip(EXAMPLE_TEXTS, sims):
        print(f"[demo]   cos({text[:32]!r:>34}, ...) = {np.round(row, 3)}")
    print(f"[demo] try it: .venv/bin/hotpath embed --url {url} --similarity \"first text\" \"second text\"\n",
          flush=True)
    if openai_base_url:
        show_openai_example(openai_base_url)


def show_openai_example(base_url: str) -> None:
    """One real POST /v1/embeddings through the OpenAI-compatible API, and the curl line that repeats it."""
    body = {"model": "text_embedding", "input": EXAMPLE_TEXTS[:2]}
    request = urllib.request.Request(f"{base_url}/embeddings", json.dumps(body).encode(),
                                     {"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as r:
        answer = json.loads(r.read())
    first = answer["data"][0]["embedding"]
    print(f"[demo] OpenAI-compatible API, base URL {base_url}")
    print(f"[demo] POST {base_url}/embeddings {json.dumps(body)}")
    print(f"[demo]   -> {len(answer['data'])} embeddings of {len(first)} floats, first values "
          f"{[round(v, 4) for v in first[:6]]}, usage {answer['usage']}")
    print(f"[demo] try it: curl -s {base_url}/embeddings -H 'content-type: application/json' "
          f"-d '{{\"model\": \"text_embedding\", \"input\": \"hello\"}}'")
    print(f"[demo]   or:   OpenAI(base_url=\"{base_url}\", api_key=\"unused\").embeddings.create("
          f"model=\"text_embedding\", input=\"hello\")\n", flush=True)
