"""The default retrieval corpus: Debian's package descriptions, read offline from apt's cache.

`apt-cache dumpavail` prints one RFC 822 stanza per available package (~63k on a bookworm host).
A document is the package name, its synopsis and the start of its long description, cut at
`max_chars`: the embedder keeps 256 tokens anyway, and short documents keep the index build inside
CI's budget (build/retrieval.toml says what was measured).
"""

from __future__ import annotations

import glob
import re
import subprocess
from dataclasses import dataclass

APT_LISTS = "/var/lib/apt/lists/*_Packages*"   # what dumpavail reads; their content fingerprints the corpus


@dataclass(frozen=True)
class Document:
    id: str
    text: str


def apt_lists() -> list[str]:
    """The package list files behind `apt-cache dumpavail` (the corpus' source files)."""
    return sorted(glob.glob(APT_LISTS))


def dumpavail() -> str:
    """The text of `apt-cache dumpavail`."""
    return subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True, text=True,
                          encoding="utf-8", errors="replace").stdout


def _long_description(lines: list[str]) -> str:
    # Continuation lines start with a space; " ." is an empty line in the Debian format.
    words = [ln.strip() for ln in lines if ln.strip() not in ("", ".")]
    return re.sub(r"\s+", " ", " ".join(words)).strip()


def parse_packages(text: str, max_chars: int) -> list[Document]:
    """One Document per package name (first stanza wins), sorted by name."""
    docs: dict[str, Document] = {}
    for stanza in text.split("\n\n"):
        name, synopsis, long_lines, in_desc = None, None, [], False
        for line in stanza.splitlines():
            if line.startswith((" ", "\t")):
                if in_desc:
                    long_lines.append(line)
                continue
            in_desc = False
            key, _, value = line.partition(":")
            if key == "Package":
                name = value.strip()
            elif key == "Description":
                synopsis, in_desc = value.strip(), True
        if not name or not synopsis or name in docs:
            continue
        body = f"{name}: {synopsis}. {_long_description(long_lines)}".strip()
        if len(body) > max_chars:
            body = body[:max_chars].rsplit(" ", 1)[0]
        docs[name] = Document(name, body)
    return [docs[k] for k in sorted(docs)]


def debian_packages(max_chars: int) -> list[Document]:
    """The whole corpus, sorted by package name (the exporter picks the indexed subset)."""
    return parse_packages(dumpavail(), max_chars)
