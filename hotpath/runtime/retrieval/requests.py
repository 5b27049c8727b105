"""The `retrieval` endpoint's requests, checked one by one (testable without Triton).

A request is a search (no OP, or OP "search"): TEXT queries, TOP_K results each; or a write (OP
"upsert" or "delete", with ID): TEXT is the document to store (ignored by a delete). All items of one
request share the op and k, since their outputs form one [batch, k] tensor. Anything else is the
client's error, reported for that request alone. TOP_K is INT64 on the wire and range-checked as sent,
so a value past 32 bits is refused instead of wrapping (Triton's HTTP JSON parser narrows into INT32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hotpath.runtime.inputs import InputError, column, integers, required
from hotpath.runtime.parameters import RetrievalParameters
from hotpath.runtime.text import TextInputError, decode_utf8

OPS = ("search", "upsert", "delete")


@dataclass
class Limits:
    default_k: int
    max_k: int
    max_bytes: int | None = None
    max_chars: int | None = None
    max_id_bytes: int = 512

    @classmethod
    def from_params(cls, params: RetrievalParameters) -> "Limits":
        return cls(params.default_k, params.max_k, params.max_text_bytes, params.max_text_chars, params.max_id_bytes)


@dataclass
class Request:
    op: str = "search"
    texts: list[str] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)
    k: int = 0
    error: str | None = None


def _column(values: np.ndarray | None, name: str, rows: int) -> np.ndarray | None:
    return None if values is None else column(values, name, rows)


def _one(values: list, name: str) -> object:
    if len(set(values)) != 1:
        raise TextInputError(f"every item of one request must have the same {name}")
    return values[0]


def _decode(values: np.ndarray, name: str, max_bytes: int | None = 512) -> list[str]:
    try:
        return decode_utf8(values, max_bytes)
    except TextInputError as exc:   # its message names TEXT
        raise TextInputError(str(exc).replace("TEXT[", f"{name}[")) from None


def _parse(text, top_k, op, ident, limits: Limits) -> Request:
    rows = len(column(required(text, "TEXT", "BYTES [batch, 1]: the queries, or the documents of an upsert"),
                      "TEXT"))
    texts = decode_utf8(text, limits.max_bytes, limits.max_chars)
    ops = _column(op, "OP", rows)
    name = "search" if ops is None or not rows else _one(_decode(ops, "OP"), "OP")
    if name not in OPS:
        raise TextInputError(f"OP must be one of {', '.join(OPS)}, got {name[:40]!r}")
    if name == "search":
        ks = _column(top_k, "TOP_K", rows)
        k = limits.default_k if ks is None or not rows else _one(integers(ks, "TOP_K", 1, limits.max_k), "TOP_K")
        for i, t in enumerate(texts):
            if not t.strip():
                raise TextInputError(f"TEXT[{i}] is empty")
        return Request("search", texts, k=k)
    ids = _column(ident, "ID", rows)
    if ids is None:
        raise TextInputError(f"OP {name} needs an ID per item")
    id_texts = _decode(ids, "ID", limits.max_id_bytes)
    for i, doc_id in enumerate(id_texts):
        if not doc_id:
            raise TextInputError(f"ID[{i}] is empty")
    if len(set(id_texts)) != len(id_texts):
        raise TextInputError("the IDs of one write request must differ")
    if name == "upsert":
        for i, t in enumerate(texts):
            if not t.strip():
                raise TextInputError(f"TEXT[{i}] (the document) is empty")
    return Request(name, texts if name == "upsert" else [], id_texts, k=1)


def parse_request(text: np.ndarray | None, top_k: np.ndarray | None, op: np.ndarray | None, ident: np.ndarray | None,
                  limits: Limits) -> Request:
    """One request's inputs -> a Request; an invalid one carries its error message instead."""
    try:
        return _parse(text, top_k, op, ident, limits)
    except InputError as exc:
        return Request(error=str(exc))
