"""What makes a file in the cache llamanb's, and whole: ownership markers and integrity records.

Ownership. Every directory llamanb creates in the cache holds a marker file, `.llamanb-cache`, a
JSON object {"llamanb_cache": 1, "kind": ...}: listing and pruning (llamanb.io.cache_inventory)
touch only what a marker or a record below proves llamanb wrote, so $LLAMANB_CACHE may point at a
directory that also holds the user's own files. The marker's mtime is the entry's "last used".

Integrity. A file llamanb writes into the cache gets a record when it is written:
    {"size": bytes, "crc32": of the whole file, "sampled_crc32": of SAMPLES stripes of STRIPE bytes}
A load checks the size and the sampled checksum: the stripes are evenly spaced over the file
(the first at byte 0, the last ending at the last byte), so any damaged run longer than the
spacing (538 MB / 1024 = 0.53 MB for SmolLM2-135M's weights) changes at least one stripe, and
truncation or growth changes the size -- at the cost of reading 4 MiB, not the whole file. A file
of up to SAMPLES * STRIPE bytes (the tokenizer, the kernel library) is read whole, so there the
two checksums are the same. `python -m llamanb cache verify` checks the whole-file crc32 of
every entry (every bit, 0.6 s per 538 MB).
"""
from __future__ import annotations

import json
import os
import zlib
from pathlib import Path

MARKER = ".llamanb-cache"
SAMPLES = 1024
STRIPE = 4096
_CHUNK = 8 << 20


# ---- ownership ------------------------------------------------------------------------------------
def mark(d: Path, kind: str) -> None:
    """Write d's ownership marker (d was just created by llamanb)."""
    (Path(d) / MARKER).write_text(json.dumps({"llamanb_cache": 1, "kind": kind}) + "\n")


def marked(d: Path) -> str | None:
    """The kind d's marker names, or None when d holds no llamanb marker (not a directory,
    no marker, or a file of that name that is not one)."""
    try:
        with open(Path(d) / MARKER, encoding="utf-8") as f:
            got = json.loads(f.read(4096))
    except (OSError, ValueError):
        return None
    if isinstance(got, dict) and got.get("llamanb_cache") == 1 and isinstance(got.get("kind"), str):
        return got["kind"]
    return None


def touch(d: Path) -> None:
    """Note that the entry in d was used now (its marker's mtime); silent where the cache is
    read-only."""
    try:
        os.utime(Path(d) / MARKER)
    except OSError:
        pass


def make_dirs(d: Path, kind: str, top: Path | None = None) -> Path:
    """Create d and its missing parents, marking each one created from `top` (the cache root)
    down (d with `kind`, the others "dir"; parents above `top` are created unmarked: they are
    not the cache's); an existing directory is left as it is, unmarked if it was: llamanb did not
    create it. OSErrors propagate (FileExistsError where a file stands in the way)."""
    d = Path(d)
    top = d if top is None else Path(top)
    missing = []
    p = d
    while not p.is_dir() and p != p.parent:
        missing.append(p)
        if p == top:
            break
        p = p.parent
    for i, p in enumerate(reversed(missing)):
        try:
            p.mkdir(parents=(i == 0))     # above the first: created unmarked (not the cache's)
        except FileExistsError:
            if not p.is_dir():
                raise
            continue                      # another process made it at the same moment
        mark(p, kind if p == d else "dir")
    return d


# ---- integrity -------------------------------------------------------------------------------------
def _sampled(fd: int, size: int) -> int:
    if size <= SAMPLES * STRIPE:
        return _whole(fd, size)
    crc = 0
    last = size - STRIPE
    for i in range(SAMPLES):
        crc = zlib.crc32(os.pread(fd, STRIPE, i * last // (SAMPLES - 1)), crc)
    return crc


def _whole(fd: int, size: int) -> int:
    crc, off = 0, 0
    while off < size:
        chunk = os.pread(fd, min(_CHUNK, size - off), off)
        if not chunk:
            break
        crc = zlib.crc32(chunk, crc)
        off += len(chunk)
    return crc


def record(path: Path) -> dict:
    """The integrity record of a file just written (reads it whole once)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        return {"size": size, "crc32": _whole(fd, size), "sampled_crc32": _sampled(fd, size)}
    finally:
        os.close(fd)


def problem(path: Path, rec, whole: bool = False) -> str | None:
    """What is wrong with the file at path against its record (None: it matches): the size
    always, then the sampled checksum, or the whole-file one with whole=True."""
    path = Path(path)
    if not isinstance(rec, dict) or not isinstance(rec.get("size"), int):
        return f"{path.name} has no valid integrity record"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return f"{path.name} is missing"
    except OSError as e:
        return f"{path.name} cannot be read ({e.strerror})"
    try:
        size = os.fstat(fd).st_size
        if size != rec["size"]:
            return f"{path.name} is {size:,} bytes, {rec['size']:,} when written"
        key = "crc32" if whole else "sampled_crc32"
        got = _whole(fd, size) if whole else _sampled(fd, size)
    except OSError as e:
        return f"{path.name} cannot be read ({e.strerror})"
    finally:
        os.close(fd)
    if got != rec.get(key):
        return f"{path.name} does not match its checksum (its bytes changed since it was written)"
    return None


def write_json_atomic(path: Path, obj) -> None:
    """Write JSON to a temporary beside path and rename it into place (never half a file under
    the final name). OSErrors propagate; the temporary is removed."""
    import tempfile

    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(json.dumps(obj, indent=1))
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def touch_file(f: Path) -> None:
    """Note that the file (a record) was used now; silent where the cache is read-only."""
    try:
        os.utime(f)
    except OSError:
        pass
