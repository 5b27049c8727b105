"""A model's config `parameters` as one typed object per Python model, each field with its one default.

Triton hands a Python model its parameters as strings; `Parameters.parse` turns them into the model's
class, refusing an unknown key or a bad value with a ParameterError naming the key. The build checks a
spec's [parameters] table through the same class (hotpath.specs.spec), so a typo fails `hotpath build` naming
the spec file, and the exporters that must match the served model (tokenizer settings, threads) read the
same object. A value the spec leaves out takes the field's default here, at build time and at load alike:
these defaults are the only ones; the exporters never write a parameter the spec does not set.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, TypeVar

from hotpath.runtime.errors import ConfigError

# all-MiniLM-L6-v2's max_seq_length (sentence-transformers' config; the sentence_embedder build checks it).
MAX_LENGTH = 256
TOKENIZER_FILE = "tokenizer.json"

# Keys a config may carry that no model class reads: the watchdog's reload mark (hotpath.restarted_at) and
# Triton's own (the Python backend's EXECUTION_ENV_PATH).
FOREIGN_PREFIXES = ("hotpath.", "hotpath_")
FOREIGN_KEYS = ("EXECUTION_ENV_PATH",)

P = TypeVar("P", bound="Parameters")


class ParameterError(ConfigError):
    """A parameter the model refuses; names the key."""

    def __init__(self, key: str, message: str):
        self.key = key
        super().__init__(f"parameters.{key}: {message}")


def _convert(key: str, text: str, kind: str, default):
    if text == "":   # Triton's empty string_value: the parameter is set to nothing
        return default
    if kind.startswith("bool"):
        if text.lower() not in ("true", "false", "1", "0"):
            raise ParameterError(key, f"must be true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if kind.startswith("int"):
        try:
            return int(text)
        except ValueError:
            raise ParameterError(key, f"must be an integer, got {text!r}") from None
    return text


@dataclass(frozen=True)
class Parameters:
    """Base: subclasses declare fields (int, bool or str, optionally `| None`) with their defaults."""

    @classmethod
    def parse(cls: type[P], params: Mapping[str, str], strict: bool = True) -> P:
        """From Triton's parameters (key -> string). `strict`: an unknown key is an error (a model reading its
        own config); otherwise keys of other classes are left alone (a part reading its share)."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, text in params.items():
            if key in fields:
                field = fields[key]
                values[key] = _convert(key, str(text), str(field.type), field.default)
            elif strict and key not in FOREIGN_KEYS and not key.startswith(FOREIGN_PREFIXES):
                raise ParameterError(key, f"unknown parameter (known: {', '.join(sorted(fields))})")
        parsed = cls(**values)
        parsed.check()
        return parsed

    def check(self) -> None:
        """Cross-field and range checks; raise ParameterError naming the key."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, int) and not isinstance(value, bool) and value < 0:
                raise ParameterError(f.name, f"must be >= 0, got {value}")


@dataclass(frozen=True)
class TextParameters(Parameters):
    """Per-text limits, checked before tokenizing (hotpath.runtime.text.decode_utf8); absent: no limit."""

    max_text_bytes: int | None = None
    max_text_chars: int | None = None

    def text_limits(self) -> dict[str, int | None]:
        return {"max_bytes": self.max_text_bytes, "max_chars": self.max_text_chars}


@dataclass(frozen=True)
class TokenizerParameters(TextParameters):
    """The tokenizer model's parameters: text_embedding's tokenizer recipe (truncation at `max_length`,
    padding to the batch's longest, rounded up to `pad_to_multiple_of`; 0: no rounding)."""

    max_length: int = MAX_LENGTH
    tokenizer_file: str = TOKENIZER_FILE
    pad_to_multiple_of: int = 0

    def check(self) -> None:
        super().check()
        if self.max_length < 1:
            raise ParameterError("max_length", f"must be >= 1, got {self.max_length}")
        if self.pad_to_multiple_of and self.max_length % self.pad_to_multiple_of:
            raise ParameterError("pad_to_multiple_of", f"{self.pad_to_multiple_of} does not divide max_length "
                                                       f"{self.max_length}")

    def load_tokenizer(self, folder: Path | str):
        """The HF tokenizer in `folder`/`tokenizer_file`, set up as this recipe says."""
        from hotpath.runtime.text import load_tokenizer

        return load_tokenizer(Path(folder) / self.tokenizer_file, self.max_length, self.pad_to_multiple_of or None)


@dataclass(frozen=True)
class OrtParameters(Parameters):
    """ONNX Runtime session settings (Triton's onnxruntime backend's names; 0: ORT's own choice)."""

    intra_op_thread_count: int = 0
    inter_op_thread_count: int = 0
    # ORT's idle threads sleep at once (0), or spin this many microseconds first; absent: `allow_spinning`.
    spin_duration_us: int | None = None
    allow_spinning: bool = False

    def spin_settings(self) -> dict:
        """make_session's spinning arguments (hotpath.runtime.ort_session)."""
        if self.spin_duration_us is not None:
            us = self.spin_duration_us
            return {"allow_spinning": us > 0, "spin_duration_us": us if us > 0 else None}
        return {"allow_spinning": self.allow_spinning, "spin_duration_us": None}


@dataclass(frozen=True)
class RunnerParameters(OrtParameters):
    """The onnxruntime_runner stand-in (the native backend's parameters it honours)."""

    default_model_filename: str = "model.onnx"


@dataclass(frozen=True)
class EmbedderParameters(TokenizerParameters, OrtParameters):
    """text_embedding's embedding in one Python model (hotpath.runtime.embedder): the tokenizer recipe and a
    SplitRunner's layout (`intra_op_thread_count` single-thread parts for a batch of `split_from` texts or
    more; one text on `one_text_thread_count` threads, 0: as many as intra_op_thread_count)."""

    intra_op_thread_count: int = 1
    inter_op_thread_count: int = 1
    split_from: int = 2
    one_text_thread_count: int = 0


@dataclass(frozen=True)
class RetrievalParameters(EmbedderParameters):
    """The retrieval model: the embedding above, request limits and its store (hotpath.runtime.retrieval.open)."""

    store: str = "hnsw"
    default_k: int = 10
    max_k: int = 100
    max_id_bytes: int = 512
    data_dir: str = ""                # where the WAL lives (hotpath.runtime.retrieval.open.data_dir_of)
    compact_bytes: int = 64 << 20     # fold the WAL into a snapshot past this size
    ef_search: int | None = None      # the HNSW search breadth; absent: the build's ([hotpath.index], its manifest)
    # store = "pgvector": the server (the environment's HOTPATH_PG_DSN first) and its table; the HNSW
    # settings default to the build's (hotpath.runtime.retrieval.pgvector_store). `m`, `ef_construction` and
    # `dimension` are older spellings of pg_m, pg_ef_construction and dim.
    pg_dsn: str = ""
    pg_table: str = "hotpath_documents"
    dim: int | None = None
    dimension: int | None = None
    pg_m: int | None = None
    m: int | None = None
    pg_ef_construction: int | None = None
    ef_construction: int | None = None
    pg_ef_search: int | None = None

    def check(self) -> None:
        super().check()
        if not 1 <= self.default_k <= self.max_k:
            raise ParameterError("default_k", f"must be within 1..max_k ({self.max_k}), got {self.default_k}")
