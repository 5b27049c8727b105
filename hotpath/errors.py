"""Error types that name what is at fault (the model, the field, the input)."""

from __future__ import annotations


class HotpathError(Exception):
    """Base class for errors hotpath reports to users without a traceback."""


class SpecError(HotpathError, ValueError):
    """A model or ensemble spec is invalid; names the file, the model and the field."""

    def __init__(self, model: str, field: str, message: str, source: str | None = None):
        self.model, self.field, self.source = model, field, source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}model '{model}', field '{field}': {message}")


class BuildError(HotpathError):
    """An export or build step failed (parity out of tolerance, broken graph, missing weights)."""


class ServerError(HotpathError):
    """The local tritonserver could not be staged, started or reached."""
