"""Text generation the hand-made way: transformers `generate` with a streamer behind a FastAPI endpoint.

What a team writes first: the same SmolLM2 weights (the float32 model the exporter checks parity
against) in PyTorch, `model.generate` in a thread per request, its streamer feeding a chunked HTTP
response with one JSON line per token. No batching across requests: concurrent requests each run
their own generate loop and share the cores. The streamer hands over every token id as generate
produces it (TextIteratorStreamer would group tokens into words and hide per-token timing).

    HOTPATH_GEN_THREADS=2 uvicorn --factory perf.lab.compare.alternatives.generation_fastapi:create_app --port 8600
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import sys
import threading
from typing import Iterator

from transformers.generation.streamers import BaseStreamer

from hotpath import settings


class TokenStreamer(BaseStreamer):
    """Iterates over generated token ids as `generate` produces them (the prompt is skipped)."""

    def __init__(self, stop_ids: set[int]):
        self._queue: queue.Queue = queue.Queue()
        self._prompt_seen = False
        self._stop_ids = stop_ids

    def put(self, value) -> None:
        if not self._prompt_seen:  # generate's first put() is the prompt
            self._prompt_seen = True
            return
        for token in value.reshape(-1).tolist():
            if token not in self._stop_ids:
                self._queue.put(token)

    def end(self) -> None:
        self._queue.put(None)

    def __iter__(self) -> Iterator[int]:
        while (token := self._queue.get()) is not None:
            yield token


def create_app():
    import torch
    from fastapi import FastAPI, HTTPException
    from fastapi.responses import StreamingResponse

    from hotpath.exporters.smollm2 import load_reference

    torch.set_num_threads(settings.gen_threads())
    model, tokenizer = load_reference()
    eos = {int(tokenizer.eos_token_id)}
    app = FastAPI()

    @app.get("/health")
    def health():
        return {"ready": True}

    @app.post("/generate")
    def generate(body: dict):
        prompt, max_tokens = body.get("prompt"), int(body.get("max_tokens", 128))
        if not prompt or max_tokens < 1:
            raise HTTPException(400, "prompt must be non-empty and max_tokens >= 1")
        ids = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                            tokenize=True, return_dict=False)
        streamer = TokenStreamer(eos)

        def run():
            with torch.no_grad():
                model.generate(torch.tensor([ids]), max_new_tokens=max_tokens, do_sample=False, streamer=streamer,
                               pad_token_id=tokenizer.eos_token_id)

        threading.Thread(target=run, daemon=True).start()
        decode = tokenizer.decode
        return StreamingResponse((json.dumps({"token": t, "text": decode([t])}) + "\n" for t in streamer),
                                 media_type="application/x-ndjson")

    return app


@contextlib.contextmanager
def serving(threads: int = 2) -> Iterator[tuple[str, int]]:
    """The app under uvicorn (1 worker) on a free port for the duration; yields (host, port)."""
    from hotpath.server.ports import free_ports
    from perf.lab.compare.alternatives.launch import process

    port, = free_ports(1)
    env = {**os.environ, settings.gen_threads.name: str(threads), "HF_HUB_OFFLINE": "1"}
    with process([sys.executable, "-m", "uvicorn", "--factory", "perf.lab.compare.alternatives.generation_fastapi:create_app",
                  "--port", str(port), "--host", "127.0.0.1", "--log-level", "warning", "--no-access-log"],
                 f"http://127.0.0.1:{port}/health", env=env, timeout_s=300):
        yield "127.0.0.1", port
