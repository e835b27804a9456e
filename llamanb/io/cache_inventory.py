"""What the cache holds, and pruning it: `python -m llamanb cache [list | verify | prune [--all]]`.

Only what llamanb can prove it wrote is listed or removed ($LLAMANB_CACHE may be a directory that
also holds the user's own files):
  model entry    a directory `<name>-<16 hex>` holding llamanb's marker (kind "model"), or, from
                 an older llamanb, its llamanb.json (format 1: name, source, source_kind) beside a
                 model.safetensors whose header says llamanb wrote it
  kernel library `<name>-<24 hex>.so` beside its record `<library>.json` (llamanb_cache: kernels),
                 or, from an older llamanb, `cpu-kernels-`/`host-kernels-<24 hex>.so` in `cpu/` or
                 `npu-host/`, an ELF file
  bookkeeping    the memo of source digests (llamanb-sources.json), abandoned temporaries (their
                 lock is free: a killed conversion's or build's), the markers themselves
Anything else -- other files, directories without a marker, symlinks -- is left alone.

`prune` removes, and says why:
  - a damaged entry (a file's size or sampled checksum differs from its record; `verify` checks
    every byte) -- the next run would convert or build it again anyway;
  - a model entry none of whose source paths (every path it was loaded from) still holds the
    bytes it was converted from: its source is gone or changed, so no run can find it again;
  - a kernel library none of whose source directories still gives its key with this machine's
    compiler (sources edited or gone, flags changed, compiler upgraded); where no compiler is
    found, libraries are kept (nothing can tell);
  - entries of an older llamanb (keyed by path and mtime: never found again);
  - abandoned temporaries.
`prune --all` removes every llamanb entry and its bookkeeping, then the directories llamanb
created if they are left empty. `make clean-cache` runs it.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from llamanb.platform import cache_files, cxx_build, locks
from llamanb.platform.paths import CACHE_VAR, cache_root, megabytes

_MODEL_NAME = re.compile(r"^.+-[0-9a-f]{16}$")
_LIB_NAME = re.compile(r"^.+-[0-9a-f]{24}\.so$")
_LEGACY_LIB = re.compile(r"^(cpu-kernels|host-kernels)-[0-9a-f]{24}\.so$")
_LEGACY_LIB_DIRS = ("cpu", "npu-host")


@dataclass
class Entry:
    path: Path
    kind: str                   # "model" or "kernels"
    nbytes: int
    origin: str                 # what it came from
    last_used: float            # seconds since the epoch
    stale: str | None           # why prune removes it (None: kept)


def _tree_bytes(d: Path) -> int:
    return sum(f.stat().st_size for f in d.rglob("*") if f.is_file() and not f.is_symlink())


def _legacy_model(d: Path) -> bool:
    """An entry of llamanb format 1 (keyed by path and mtime), proven by its llamanb.json and the
    llamanb tag in its safetensors header."""
    try:
        info = json.loads((d / "llamanb.json").read_text(encoding="utf-8"))
        if not (isinstance(info, dict) and info.get("format_version") == 1
                and {"name", "source", "source_kind"} <= info.keys()):
            return False
        with open(d / "model.safetensors", "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(min(n, 1 << 24)))
        return str(header.get("__metadata__", {}).get("llamanb")) == "1"
    except (OSError, ValueError, AttributeError):
        return False


def _model_entry(d: Path, check: bool, whole: bool) -> Entry | None:
    from llamanb.io.cache_keys import entry_key
    from llamanb.io.store import entry_problem

    if d.is_symlink() or not d.is_dir() or not _MODEL_NAME.match(d.name) or d.name.startswith("."):
        return None
    if cache_files.marked(d) != "model":
        if _legacy_model(d):
            return Entry(d, "model", _tree_bytes(d), "(an older llamanb's entry)",
                         (d / "llamanb.json").stat().st_mtime,
                         "made by an older llamanb, keyed by path and mtime: never found again")
        return None
    marker = d / cache_files.MARKER
    try:
        info = json.loads((d / "llamanb.json").read_text(encoding="utf-8"))
        sources = [s for s in info.get("sources", []) if isinstance(s, str)]
    except (OSError, ValueError, AttributeError):
        info, sources = None, []
    origin = ", ".join(sources) or "(unknown)"
    stale = None
    if check:
        bad = entry_problem(d, whole=whole)
        if bad:
            stale = f"damaged: {bad}"
        else:
            key = d.name.rsplit("-", 1)[1]
            alive = []
            for s in sources:
                try:
                    if Path(s).exists() and entry_key(Path(s)) == key:
                        alive.append(s)
                except OSError:
                    pass
            if not alive:
                stale = "its source is gone or changed: " + origin
    return Entry(d, "model", _tree_bytes(d), origin, marker.stat().st_mtime, stale)


def _library_entries(sub: Path, check: bool) -> list[Entry]:
    out = []
    legacy_dir = sub.name in _LEGACY_LIB_DIRS
    if cache_files.marked(sub) != "kernels" and not legacy_dir:
        return out
    cxx = cxx_build.compiler()[0] if check else None
    for lib in sorted(sub.iterdir()):
        if lib.is_symlink() or not lib.is_file() or not _LIB_NAME.match(lib.name):
            continue
        try:
            rec = json.loads(cxx_build.record_path(lib).read_text(encoding="utf-8"))
            ours = isinstance(rec, dict) and rec.get("llamanb_cache") == "kernels"
        except (OSError, ValueError):
            rec, ours = None, False
        if not ours:
            with open(lib, "rb") as f:
                elf = f.read(4) == b"\x7fELF"
            if legacy_dir and _LEGACY_LIB.match(lib.name) and elf:
                out.append(Entry(lib, "kernels", lib.stat().st_size, "(an older llamanb's build)",
                                 lib.stat().st_mtime, "built by an older llamanb: no record to "
                                 "check it by, so it would be built again"))
            continue
        nbytes = lib.stat().st_size + cxx_build.record_path(lib).stat().st_size
        origin = f"{rec.get('kernels_dir')} ({' '.join(f for f in rec.get('flags', []) if f.startswith('-m'))})"
        stale = None
        if check:
            bad = cxx_build.library_problem(lib)
            if bad:
                stale = f"damaged: {bad}"
            elif cxx is not None:
                src = Path(str(rec.get("kernels_dir")))
                flags = tuple(rec.get("flags", ()))
                if not src.is_dir() or not any(src.glob("*.cc")):
                    stale = f"its sources are gone: {src}"
                elif cxx_build.build_key(cxx, src, flags) != rec.get("key"):
                    stale = f"its sources, flags or compiler changed: {src}"
        out.append(Entry(lib, "kernels", nbytes, origin.replace(" ()", ""),
                         cxx_build.record_path(lib).stat().st_mtime, stale))
    return out


def inventory(root: Path | None = None, check: bool = True, whole: bool = False) -> list[Entry]:
    """Every entry llamanb can prove it wrote under the cache root, with why prune would remove
    it (check=False: nothing is checked, `stale` is None)."""
    root = cache_root() if root is None else Path(root)
    if not root.is_dir():
        return []
    out = []
    for d in sorted(root.iterdir()):
        if d.is_symlink() or not d.is_dir():
            continue
        e = _model_entry(d, check, whole)
        if e is not None:
            out.append(e)
        else:
            out += _library_entries(d, check)
    return out


def _remove(e: Entry) -> None:
    if e.kind == "model":
        from llamanb.io.store import discard

        discard(e.path)
    else:
        with locks.locked(e.path.parent):
            e.path.unlink(missing_ok=True)
            cxx_build.record_path(e.path).unlink(missing_ok=True)


def prune(root: Path | None = None, everything: bool = False) -> tuple[list[Entry], list[Path]]:
    """Remove the stale entries (everything=True: all of llamanb's) and abandoned temporaries;
    returns (entries removed, temporaries removed)."""
    from llamanb.io.cache_keys import MEMO, is_memo
    from llamanb.io.store import sweep_abandoned

    root = cache_root() if root is None else Path(root)
    if not root.is_dir():
        return [], []
    temps = sweep_abandoned(root)
    for sub in sorted(root.iterdir()):
        if sub.is_dir() and not sub.is_symlink() and (cache_files.marked(sub) == "kernels"
                                                       or sub.name in _LEGACY_LIB_DIRS):
            temps += cxx_build.sweep_abandoned(sub)
    removed = []
    for e in inventory(root, check=not everything):
        if everything or e.stale:
            _remove(e)
            removed.append(e)
    if everything:
        memo = root / MEMO
        if not memo.is_symlink() and is_memo(memo):
            memo.unlink(missing_ok=True)
        for sub in sorted(root.iterdir()):                 # llamanb's own directories, if empty
            if sub.is_dir() and not sub.is_symlink() and cache_files.marked(sub):
                _rmdir_if_only_marker(sub)
        if cache_files.marked(root):
            _rmdir_if_only_marker(root)
    return removed, temps


def _rmdir_if_only_marker(d: Path) -> None:
    try:
        if {p.name for p in d.iterdir()} == {cache_files.MARKER}:
            (d / cache_files.MARKER).unlink()
            d.rmdir()
    except OSError:
        pass


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def _where(root: Path) -> str:
    how = f"set by {CACHE_VAR}" if os.environ.get(CACHE_VAR) else f"the default; {CACHE_VAR} moves it"
    return f"{root} ({how})"


def main(action: str = "list", everything: bool = False) -> int:
    """The `cache` command: list (with why prune would remove an entry), verify (every byte),
    or prune."""
    from llamanb.errors import LlamanbError

    root = cache_root()
    if root.exists() and not root.is_dir():
        raise LlamanbError(f"cache {_where(root)} is not a directory")
    if everything and action != "prune":
        raise LlamanbError("--all goes with `cache prune`")
    try:
        if action == "prune":
            removed, temps = prune(root, everything)
            for e in removed:
                print(f"removed {megabytes(e.nbytes):>10}  {e.path.relative_to(root)}"
                      + ("" if everything else f"  ({e.stale})"))
            freed = sum(e.nbytes for e in removed)
            print(f"llamanb cache {_where(root)}: removed {len(removed)} "
                  f"entr{'y' if len(removed) == 1 else 'ies'} ({megabytes(freed)}) and "
                  f"{len(temps)} abandoned temporar{'y' if len(temps) == 1 else 'ies'}; "
                  "anything llamanb did not write is left alone")
            return 0
        entries = inventory(root, check=True, whole=(action == "verify"))
    except OSError as e:
        raise LlamanbError(f"cache {_where(root)}: {e.strerror or e} "
                           f"({e.filename or ''})") from None
    total = sum(e.nbytes for e in entries)
    print(f"llamanb cache {_where(root)}: {len(entries)} entr{'y' if len(entries) == 1 else 'ies'}, "
          f"{megabytes(total)}")
    for e in entries:
        state = f"  [prune: {e.stale}]" if e.stale else ("  [whole]" if action == "verify" else "")
        print(f"  {megabytes(e.nbytes):>10}  {e.kind:<7}  {e.path.relative_to(root)}\n"
              f"              from {e.origin}; last used {_when(e.last_used)}{state}")
    return 0
