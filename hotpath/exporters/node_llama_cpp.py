"""node-llama-cpp (llama.cpp's prebuilt CPU binaries), pinned and installed on first use.

The precision gate's anchor (hotpath.exporters.llm_precision: llama.cpp's own Q4_1 on the GGUF) and the
perf comparison's llama.cpp alternative run the same package, so it lives with the build and perf imports it.
Installed into .hotpath/llama-cpp/ (npm, `npm i -E`), never by the tests; npm fetches every prebuilt binary
package (CUDA, Vulkan, other CPUs), and all but this machine's CPU build are removed afterwards
(~730 MB -> 84 MB). Needs node >= 20 and npm on PATH.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from hotpath import paths
from hotpath.errors import HotpathError

logger = logging.getLogger(__name__)

NODE_LLAMA_CPP_VERSION = "3.21.1"


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
