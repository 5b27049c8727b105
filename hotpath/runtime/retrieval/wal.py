"""The write-ahead log of the in-process index: length- and CRC-framed records, fsync'd before a write
is acknowledged, read back from any offset.

A record is `<u32 payload length><u32 crc32(payload)>payload`, the payload a JSON header, a NUL and
(for an upsert) the float32 vector's raw bytes. The header names the record's collection (a tenant's, or
"shared": hotpath.runtime.tenancy); a record written before collections existed has none and replays into
"shared". Op "drop" (no id) empties its collection: every write to it with a lower seq is gone. A crash
can leave at most the last record torn: a reader stops at the first short or corrupt record and reports
the offset of the last good one, so a writer (under the store's lock) truncates the torn tail before
appending after it.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np

from hotpath.runtime.tenancy import SHARED

_FRAME = struct.Struct("<II")
MAX_RECORD = 1 << 26   # a length beyond this is garbage, not a record


@dataclass(frozen=True)
class Record:
    """One write: `op` is "upsert" (with vector and document), "delete" or "drop" (the whole collection);
    `seq` orders all writes, of every collection."""

    seq: int
    op: str
    id: str
    document: str = ""
    vector: np.ndarray | None = None
    collection: str = SHARED

    def encode(self) -> bytes:
        head = {"seq": self.seq, "op": self.op, "id": self.id, "collection": self.collection}
        if self.op == "upsert":
            head["document"] = self.document
        payload = json.dumps(head, ensure_ascii=False).encode() + b"\0"
        if self.vector is not None:
            payload += np.ascontiguousarray(self.vector, dtype="<f4").tobytes()
        return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload

    @staticmethod
    def decode(payload: bytes) -> "Record":
        head, _, raw = payload.partition(b"\0")
        meta = json.loads(head)
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32) if raw else None
        return Record(int(meta["seq"]), meta["op"], meta["id"], meta.get("document", ""), vector,
                      meta.get("collection", SHARED))   # a record from before collections: the shared corpus


def read_records(path: Path, offset: int = 0) -> tuple[list[Record], int]:
    """Records from `offset` to the first torn or corrupt one; returns them and the offset after the last
    good record (a missing file reads as empty)."""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read()
    except FileNotFoundError:
        return [], 0
    records, pos = [], 0
    while pos + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, pos)
        end = pos + _FRAME.size + length
        if length > MAX_RECORD or end > len(data):
            break
        payload = data[pos + _FRAME.size:end]
        if zlib.crc32(payload) != crc:
            break
        try:
            records.append(Record.decode(payload))
        except (ValueError, KeyError, UnicodeDecodeError):
            break
        pos = end
    return records, offset + pos


def append_records(path: Path, records: Iterable[Record], at: int) -> int:
    """Write `records` at offset `at` (dropping any torn bytes after it), fsync, return the new end.

    The caller holds the store's lock, so no other writer is mid-record."""
    blob = b"".join(r.encode() for r in records)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size != at:
            os.ftruncate(fd, at)
        os.pwrite(fd, blob, at)
        os.fsync(fd)
    finally:
        os.close(fd)
    return at + len(blob)


def write_file_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a crash leaves the old or the new content, never a mix."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename or a new file in `folder` durable."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
