"""The toolchain's errors, on the one tree of hotpath.runtime.errors (re-exported here: import from either).

SpecError and a config file that does not parse are ConfigErrors; BuildError and ServerError are faults
(INTERNAL). Each names what is at fault (the model, the field, the file).
"""

from __future__ import annotations

from hotpath.runtime.errors import ConfigError, HotpathError, InputError, UnavailableError

__all__ = ["BuildError", "ConfigError", "HotpathError", "InputError", "ServerError", "SpecError", "UnavailableError"]


class SpecError(ConfigError):
    """A model or ensemble spec is invalid; names the file, the model and the field."""

    def __init__(self, model: str, field: str, message: str, source: str | None = None):
        self.model, self.field, self.source = model, field, source
        where = f"{source}: " if source else ""
        super().__init__(f"{where}model '{model}', field '{field}': {message}")


class BuildError(HotpathError):
    """An export or build step failed (parity out of tolerance, broken graph, missing weights)."""


class ServerError(HotpathError):
    """The local tritonserver could not be staged, started or reached."""
