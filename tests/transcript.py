"""Evidence a test run can hand a reader: with HOTPATH_TRANSCRIPTS=DIR set, a module's table of what it tried and
what came back (the observed answers, recorded after each assertion held) is written to DIR/<name>.md."""

import os
from pathlib import Path

ENV = "HOTPATH_TRANSCRIPTS"


def cell(value, limit: int = 90) -> str:
    """One markdown cell: one line, pipes escaped, long answers cut."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Transcript:
    def __init__(self, name: str, title: str, columns: tuple[str, ...]):
        self.name, self.title, self.columns = name, title, columns
        self.rows: list[tuple[str, ...]] = []

    def row(self, *cells) -> None:
        assert len(cells) == len(self.columns), (cells, self.columns)
        self.rows.append(tuple(cell(c) for c in cells))

    def write(self, test_file: str) -> Path | None:
        if not (folder := os.environ.get(ENV)):
            return None
        path = Path(folder) / f"{self.name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = [f"# {self.title}", "",
                 f"Command: `{ENV}={folder} .venv/bin/python -m pytest -q {test_file}`", "",
                 "| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        path.write_text("\n".join(lines) + "\n")
        return path
