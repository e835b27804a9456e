"""A small safetensors reader/writer: memory-mapped reads, streamed atomic writes.

File layout (the safetensors spec): 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype", "shape", "data_offsets": [begin, end]}}, then the raw tensor bytes. Writing the
tensors ourselves lets us choose their order: q, k, v of a layer (and gate, up) sit back to back,
so the engine can view them as one fused matrix straight out of the map, without a copy.
"""
from __future__ import annotations

import json
import os
import struct
from contextlib import ExitStack
from pathlib import Path
from typing import Iterable

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.platform import locks

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "I64": np.int64,
           "I32": np.int32, "I8": np.int8, "U8": np.uint8, "BF16": np.uint16}
_WRITES = {"F32": np.float32, "BF16": np.uint16}        # what write_safetensors writes (BF16: bits)
_NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}


def read_header(path: Path) -> tuple[dict, int]:
    """(tensor table, byte offset where tensor data starts)."""
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise LlamanbError(f"{path}: too short to be a safetensors file")
            (n,) = struct.unpack("<Q", head)
            size = os.fstat(f.fileno()).st_size
            if n > size - 8:
                raise LlamanbError(f"{path}: corrupt safetensors header (length {n})")
            table = json.loads(f.read(n))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise LlamanbError(f"{path}: unreadable safetensors file ({e.__class__.__name__})") from None
    table.pop("__metadata__", None)
    end = max((t["data_offsets"][1] for t in table.values()), default=0)
    if 8 + n + end > size:
        raise LlamanbError(f"{path}: truncated safetensors file ({size} bytes, needs {8 + n + end})")
    return table, 8 + n


class SafetensorsFile:
    """Memory-mapped tensors of one file. `get` returns float32 for F32, converts F16/BF16."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.table, self.start = read_header(self.path)
        # Plain ndarray views of the map: slicing a np.memmap subclass costs bookkeeping on every
        # view, which the decode loop would pay thousands of times per token. `.base` still
        # leads to the np.memmap, which keeps the file mapped.
        self.map = np.memmap(self.path, dtype=np.uint8, mode="r").view(np.ndarray)

    def names(self) -> list[str]:
        return list(self.table)

    def raw(self, name: str) -> np.ndarray:
        t = self.table[name]
        if t["dtype"] not in _DTYPES:
            raise LlamanbError(f"{self.path.name}: tensor {name} has unsupported dtype {t['dtype']}")
        b, e = t["data_offsets"]
        return self.map[self.start + b:self.start + e].view(_DTYPES[t["dtype"]]).reshape(t["shape"])

    def get(self, name: str) -> np.ndarray:
        t = self.table[name]
        a = self.raw(name)
        if t["dtype"] == "BF16":
            return (a.astype(np.uint32) << 16).view(np.float32)
        if t["dtype"] != "F32":
            return a.astype(np.float32)
        return a

    def span(self, names: list[str]) -> np.ndarray | None:
        """One [sum(rows), cols] float32 view over consecutive F32 tensors, or None if they are not
        stored back to back with equal column counts."""
        ts = [self.table[n] for n in names]
        if any(t["dtype"] != "F32" or len(t["shape"]) != 2 for t in ts):
            return None
        cols = ts[0]["shape"][1]
        for a, b in zip(ts, ts[1:]):
            if a["data_offsets"][1] != b["data_offsets"][0] or b["shape"][1] != cols:
                return None
        rows = sum(t["shape"][0] for t in ts)
        b0, e1 = ts[0]["data_offsets"][0], ts[-1]["data_offsets"][1]
        return self.map[self.start + b0:self.start + e1].view(np.float32).reshape(rows, cols)


def write_safetensors(path: Path, tensors: Iterable[tuple[str, tuple[int, ...], "callable"]],
                      metadata: dict | None = None, lock: bool = True) -> None:
    """Stream tensors to `path` in the given order. Each item is (name, shape, produce) where
    produce() returns the float32 array, or (name, shape, produce, "BF16") where it returns
    bfloat16 bit patterns (uint16); only one tensor is in memory at a time. The header needs
    the shapes up front, which is why they are given separately. Writes to a temp file, then
    renames, so a crash never leaves a half-written file under `path`. With `lock`, the temp file
    is created under its directory's lock and flocked until renamed, so that a later run can tell
    the debris of a killed writer from a live one's (platform.locks; the store sweeps it)."""
    items = [(t[0], t[1], t[2], t[3] if len(t) > 3 else "F32") for t in tensors]
    header: dict = {"__metadata__": {k: str(v) for k, v in (metadata or {}).items()}}
    offset = 0
    for name, shape, _, dt in items:
        if dt not in _WRITES:
            raise LlamanbError(f"tensor {name}: cannot write dtype {dt} (only {', '.join(_WRITES)})")
        nbytes = int(np.prod(shape)) * np.dtype(_WRITES[dt]).itemsize
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)                  # keep tensor data 8-byte aligned
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    try:
        with ExitStack() as stack:
            if lock:
                with locks.locked(path.parent):
                    f = stack.enter_context(open(tmp, "wb"))
                    locks.lock_open_file(f)
            else:
                f = stack.enter_context(open(tmp, "wb"))
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, shape, produce, dt in items:
                a = np.ascontiguousarray(produce(), dtype=_WRITES[dt])
                if a.shape != tuple(shape):
                    raise LlamanbError(f"tensor {name}: shape {a.shape}, expected {tuple(shape)}")
                f.write(a.tobytes())
            f.flush()
            os.fsync(f.fileno())
            os.replace(tmp, path)                  # still locked: the name is never unlocked debris
    finally:
        if tmp.exists():
            tmp.unlink()
