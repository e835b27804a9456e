"""A converted model's cache key: a hash of the source's bytes, not of its path or mtime.

    key = sha256("llamanb-cache-v2" + sha256 of the GGUF file's bytes)[:16]
        or sha256("llamanb-cache-v2" + for each file of an HF directory, by name: name, sha256)[:16]

So a new clone, a recreated venv (the embedded GGUF reinstalled) or a copied checkpoint finds the
entry made from the same bytes, and a changed file gets a new one. Hashing streams each file once
(98 MB for the embedded GGUF: about 0.4 s on a loaded 2-core machine); the digest is remembered
in the cache root's `llamanb-sources.json` under the file's (path, size, mtime_ns, inode, device),
so a later run with the same file pays a stat, not a hash. A file whose stat changed is hashed
again; the memo drops files that are gone whenever it is written. Where the cache is read-only
the memo is not written and every run hashes again (correct, only slower).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

KEY_FORMAT = "llamanb-cache-v2"
MEMO = "llamanb-sources.json"
_MEMO_TAG = "llamanb_source_digests"


def _stat_key(p: Path, st: os.stat_result) -> str:
    return f"{p}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_dev}"


def _load(path: Path) -> dict | None:
    try:
        got = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(got, dict) or got.get(_MEMO_TAG) != 1 or not isinstance(got.get("files"), dict):
        return None
    return got["files"]


def is_memo(path: Path) -> bool:
    """Whether the file at path is llamanb's memo of source digests (its tag proves it)."""
    return _load(path) is not None


def _read_memo(root: Path) -> dict:
    return _load(root / MEMO) or {}


def _write_memo(root: Path, files: dict) -> None:
    from llamanb.platform.cache_files import write_json_atomic

    keep = {}
    for k, v in files.items():               # forget files that are gone or changed
        path = k.rsplit("|", 4)[0]
        try:
            if _stat_key(Path(path), os.stat(path)) == k:
                keep[k] = v
        except OSError:
            pass
    try:
        write_json_atomic(root / MEMO, {_MEMO_TAG: 1, "files": keep})
    except OSError:
        pass                                 # a read-only or full cache: hash again next time


def file_digest(path: Path, memo: dict) -> tuple[str, bool]:
    """(sha256 hex of the file's bytes, whether it was hashed now rather than remembered)."""
    p = Path(path).resolve()
    st = p.stat()
    k = _stat_key(p, st)
    if isinstance(memo.get(k), str):
        return memo[k], False
    h = hashlib.sha256()
    with open(p, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    memo[k] = h.hexdigest()
    return memo[k], True


def source_files(path: Path) -> list[Path]:
    path = Path(path)
    return [path] if path.is_file() else sorted(p for p in path.iterdir() if p.is_file())


_PENDING: dict[Path, dict] = {}


def save_memo(root: Path) -> None:
    """Write the digests source_digest(..., save=False) computed under root (a load saves them
    once it has succeeded, so a run refused part-way leaves nothing in the cache)."""
    memo = _PENDING.pop(Path(root), None)
    if memo is not None and Path(root).is_dir():
        _write_memo(Path(root), memo)


def source_digest(path: Path, memo_root: Path | None = None, save: bool = True) -> str:
    """The sha256 hex that keys the conversion of `path` (a GGUF file or an HF directory); the
    per-file digests are remembered under memo_root (default: the cache root), at once, or with
    save=False when save_memo(memo_root) is called."""
    from llamanb.platform.paths import cache_root

    root = cache_root() if memo_root is None else Path(memo_root)
    memo = _read_memo(root)
    path = Path(path)
    h = hashlib.sha256(KEY_FORMAT.encode())
    hashed = False
    if path.is_file():
        d, hashed = file_digest(path, memo)
        h.update(d.encode())
    else:
        for p in source_files(path):
            d, now = file_digest(p, memo)
            hashed |= now
            h.update(b"\0" + p.name.encode() + b"\0" + d.encode())
    if hashed and save and root.is_dir():
        _write_memo(root, memo)
    elif hashed:
        _PENDING[root] = memo
    return h.hexdigest()


def entry_key(path: Path, memo_root: Path | None = None, save: bool = True) -> str:
    """The 16 hex characters a cache entry of `path` is named with (`<name>-<key>`)."""
    return source_digest(path, memo_root, save)[:16]
