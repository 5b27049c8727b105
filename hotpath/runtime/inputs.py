"""Request inputs checked before use, testable without Triton: every refusal is an InputError whose message
names the input and the rule, which the Python models answer with INVALID_ARGUMENT for that request alone.

Triton checks names, datatypes and per-item shapes against the config, but not everything: a model with
optional inputs gets requests without a required one (2.51 checks only the number of inputs then), and a
batch dimension of 2^32 or more reaches a model truncated to 32 bits (2^32 -> no batch dimension at all).
"""

from __future__ import annotations

import numpy as np

from hotpath.runtime.errors import InputError

__all__ = ["InputError", "column", "integers", "required"]


def required(values: np.ndarray | None, name: str, spec: str) -> np.ndarray:
    """`values` of the input `name` (None: the request lacks it), or InputError saying what to send (`spec`)."""
    if values is None:
        raise InputError(f"input {name} is required ({spec})")
    return values


def column(values: np.ndarray, name: str, rows: int | None = None) -> np.ndarray:
    """A [batch, 1] input (`rows` items when given, i.e. as many as the request's first input) -> [batch]."""
    if values.ndim != 2 or values.shape[1] != 1 or (rows is not None and values.shape[0] != rows):
        want = f"[{rows}, 1]" if rows is not None else "[batch, 1]"
        raise InputError(f"{name} must have shape {want}, got {list(values.shape)}")
    return values.reshape(-1)


def integers(values: np.ndarray, name: str, low: int, high: int) -> list[int]:
    """Integer items, each within low..high, as Python ints: checked on the values as sent (INT64 on the wire),
    so nothing is narrowed before the range check (2^32 + 5 is refused, never read as 5)."""
    if values.dtype.kind not in "iu":
        raise InputError(f"{name} must be an integer tensor, got {values.dtype}")
    items = [int(v) for v in values.reshape(-1).tolist()]
    for i, v in enumerate(items):
        if not low <= v <= high:
            raise InputError(f"{name} must be within {low}..{high}, got {v}" + (f" at [{i}]" if len(items) > 1 else ""))
    return items
