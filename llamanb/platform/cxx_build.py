"""Building C++ kernels for this machine, once, into the cache: the one compiler lookup and build
cache that every user of host C++ shares (the emulated NPU2's kernels/*.cc, the cpu backend's
kernels/cpu/*.cc).

    kernels/*.cc, *.h --g++ -shared--> $LLAMANB_CACHE/npu-host/host-kernels-<key>.so --ctypes--> calls
    key = sha256(every source and header, the flags, `g++ --version`)

The defaults (kernels/, FLAGS, the npu-host directory) are the NPU host build's: the emulated NPU2
runs the same C++ the NPU would (through Peano, see llamanb.npu.compiler.peano), built by the host compiler;
the cpu backend (llamanb.cpu.kernels) passes its own directory, flags and name.

A build is written to a temporary file in the cache directory and renamed into place, so two
processes building at once each finish with a complete library and an interrupted build leaves
nothing that looks finished. Beside each library, `<library>.json` records its size and crc32 (and
what it was built from: llamanb.io.cache_inventory prunes by it); a cached library is checked
against it before ctypes loads it (a truncated .so would stop the process with SIGBUS) and a
damaged one is built again, said in one line on stderr. A link that exits 0 but leaves no shared
object (an empty file) is a failed build. A builder holds a flock on its temporary file and object
directory (llamanb.platform.locks); the next build removes those whose lock is free (a killed
build's).

No compiler means no host build: `build()` returns None
and `reason()` says why; callers then use the numpy models (llamanb.npu.compiler.extern) and say so.

    LLAMANB_CXX   the compiler to use (else $CXX, else g++, c++ or clang++: find_cxx below, which `info` uses too);
                  "none" turns host builds off.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from llamanb.platform import cache_files, locks
from llamanb.platform.paths import cache_root

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels"
FORMAT = "llamanb-host-kernels-v1"
# -ffp-contract=off: no fused multiply-add, so every float32 operation rounds as the numpy model's
# does (the headers also turn contraction off for clang). -ffreestanding-style rules (no libm, no
# libstdc++, no exceptions) are kept by the sources themselves; -fno-exceptions/-fno-rtti hold
# them to it.
FLAGS = ("-std=c++20", "-O2", "-shared", "-fPIC", "-ffp-contract=off", "-fno-exceptions",
         "-fno-rtti", "-Wall", "-Wextra")
_VERSIONS: dict[str, str] = {}          # compiler path -> `--version` text
_LOADED: dict[Path, ctypes.CDLL] = {}
_FAILED: dict[str, str] = {}            # build key -> the compiler's complaint


@dataclass(frozen=True)
class HostBuild:
    path: Path          # the shared library
    key: str            # sha256 hex of sources + flags + compiler version
    cache_hit: bool     # True when an earlier build was reused
    compiler: str       # first line of `--version`


CXX_CANDIDATES = ("g++", "c++", "clang++")


def find_cxx() -> tuple[str | None, str]:
    """The one C++ compiler lookup that `info` and every host build use: (absolute path, "") or
    (None, why there is none). $LLAMANB_CXX names it ("none" turns host builds off); else $CXX;
    else the first of g++, c++, clang++ on PATH."""
    import os
    import shutil

    for var in ("LLAMANB_CXX", "CXX"):
        name = os.environ.get(var, "").strip()
        if name:
            if var == "LLAMANB_CXX" and name.lower() == "none":
                return None, "host C++ builds are turned off (LLAMANB_CXX=none)"
            path = shutil.which(name)
            return (path, "") if path else (None, f"no C++ compiler: ${var}={name} is not an "
                                                  f"executable on PATH")
    for name in CXX_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path, ""
    return None, "no C++ compiler: 'g++' is not on PATH (nor c++, clang++; or set $LLAMANB_CXX)"


def compiler() -> tuple[str | None, str]:
    """(absolute path of the C++ compiler, "") or (None, why there is none)."""
    path, why = find_cxx()                       # the lookup `info` reports (llamanb.platform.hardware)
    if path is None:
        return None, why
    if path not in _VERSIONS:
        try:
            out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
        except OSError as e:
            return None, f"C++ compiler {path} does not run: {e}"
        if out.returncode != 0:
            return None, f"C++ compiler {path} does not run (`--version` exit {out.returncode})"
        _VERSIONS[path] = out.stdout
    return path, ""


def sources(kernels_dir: Path = KERNELS_DIR) -> list[Path]:
    """The files a build depends on: every .cc and .h, sorted by name."""
    return sorted(p for p in Path(kernels_dir).iterdir() if p.suffix in (".cc", ".h"))


def build_key(cxx: str, kernels_dir: Path = KERNELS_DIR, flags: tuple[str, ...] = FLAGS) -> str:
    h = hashlib.sha256(FORMAT.encode())
    h.update(_VERSIONS[cxx].encode())
    h.update("\0".join(flags).encode())
    for p in sources(kernels_dir):
        h.update(b"\0" + p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def library_name(name: str, key: str) -> str:
    """The file a build of key `key` (build_key) is cached as."""
    return f"{name}-{key[:24]}.so"


def record_path(lib: Path) -> Path:
    """The integrity record beside a cached library."""
    return Path(str(lib) + ".json")


def library_problem(lib: Path) -> str | None:
    """What is wrong with a cached library (None: it is the file its record describes)."""
    lib = Path(lib)
    try:
        rec = json.loads(record_path(lib).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no record of its size and checksum beside it"
    except (OSError, ValueError) as e:
        return f"its record is unreadable ({type(e).__name__})"
    if not isinstance(rec, dict) or rec.get("llamanb_cache") != "kernels":
        return "its record is not llamanb's"
    return cache_files.problem(lib, rec.get("file"), whole=True)


def _is_shared_object(path: str) -> bool:
    """Whether the linker's output is a non-empty object file (ELF or Mach-O magic)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xce\xfa\xed\xfe")


_TEMP_SO = re.compile(r"^.+\.so\.[a-z0-9_]{8}\.tmp$")            # mkstemp's 8 characters
_TEMP_OBJS = re.compile(r"^.+\.so\.obj\.[a-z0-9_]{8}$")


def sweep_abandoned(cache_dir: Path) -> list[Path]:
    """Remove a killed build's temporary library and object directory (their lock is free);
    a live build's are left alone. Returns what was removed."""
    removed = []
    if not locks.AVAILABLE or not Path(cache_dir).is_dir():
        return removed
    with locks.locked(cache_dir, blocking=False) as held:
        if not held:
            return removed
        for p in sorted(Path(cache_dir).iterdir()):
            if p.is_symlink() or not (_TEMP_SO.match(p.name) and p.is_file()
                                      or _TEMP_OBJS.match(p.name) and p.is_dir()):
                continue
            with locks.locked(p, blocking=False) as abandoned:
                if abandoned:
                    if p.is_dir():
                        shutil.rmtree(p, ignore_errors=True)
                    else:
                        p.unlink(missing_ok=True)
                    if not p.exists():
                        removed.append(p)
    return removed


def build(kernels_dir: Path = KERNELS_DIR, cache_dir: Path | None = None,
          flags: tuple[str, ...] = FLAGS, name: str = "host-kernels") -> HostBuild | None:
    """The host build of kernels_dir's sources, compiled now or found in the cache (checked
    against its record first); None when there is no compiler, no sources, or the compiler
    rejects them (an old g++ without C++20): `reason` then says which, quoting the compiler's
    first error lines. Other users of this machinery (the cpu backend) pass their own flags and
    library name."""
    cxx, _ = compiler()
    kernels_dir = Path(kernels_dir)
    if cxx is None or not kernels_dir.is_dir() or not any(kernels_dir.glob("*.cc")):
        return None
    key = build_key(cxx, kernels_dir, flags)
    cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "npu-host"
    lib = cache_dir / library_name(name, key)
    version = _VERSIONS[cxx].splitlines()[0] if _VERSIONS[cxx] else cxx
    if lib.is_file():
        bad = library_problem(lib)
        if bad is None:
            cache_files.touch_file(record_path(lib))
            return HostBuild(lib, key, True, version)
        with locks.locked(cache_dir):                  # re-checked: another build may have
            bad = library_problem(lib)                 # replaced it meanwhile
            if bad is not None:
                print(f"llamanb: the cached kernel library {lib} is damaged ({bad}); building it "
                      "again", file=sys.stderr, flush=True)
                lib.unlink(missing_ok=True)
        if bad is None:
            return HostBuild(lib, key, True, version)
    if key in _FAILED:
        return None
    cache_files.make_dirs(cache_dir, "kernels", top=cache_root())
    sweep_abandoned(cache_dir)
    with locks.locked(cache_dir):                      # made and locked before a sweep sees them
        fd, tmp = tempfile.mkstemp(dir=cache_dir, prefix=lib.name + ".", suffix=".tmp")
        objs = tempfile.mkdtemp(dir=cache_dir, prefix=lib.name + ".obj.")
        held = [locks.lock_fd(Path(tmp)), locks.lock_fd(Path(objs))]
    os.close(fd)
    cc_files = [p for p in sources(kernels_dir) if p.suffix == ".cc"]
    try:
        out = _compile_and_link(cxx, flags, cc_files, Path(objs), tmp)
        if out.returncode != 0:
            errors = [ln for ln in out.stderr.splitlines() if "error" in ln][:2]
            _FAILED[key] = f"{cxx} could not build {kernels_dir}: " + " | ".join(errors)
            return None
        if not _is_shared_object(tmp):
            _FAILED[key] = (f"{cxx} exited 0 but wrote no shared library for {kernels_dir} "
                            f"({os.path.getsize(tmp):,} bytes)")
            return None
        rec = {"llamanb_cache": "kernels", "file": cache_files.record(Path(tmp)),
               "kernels_dir": str(kernels_dir.absolute()), "flags": list(flags), "name": name,
               "key": key, "compiler": version, "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
        with locks.locked(cache_dir):                  # the record and its library, together
            cache_files.write_json_atomic(record_path(lib), rec)
            os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        shutil.rmtree(objs, ignore_errors=True)
        for h in held:
            if h is not None:
                os.close(h)
    return HostBuild(lib, key, False, version)


def _unit_size(cc: Path) -> int:
    """Bytes of a source and of the sources it includes by a quoted name from its own directory
    (one level: matmul_q8.cc is matmul.cc again)."""
    import re

    text = cc.read_text(errors="replace")
    inc = (cc.parent / m for m in re.findall(r'^#include "([^"]+\.cc)"', text, re.M))
    return len(text) + sum(p.stat().st_size for p in inc if p.is_file())


def _compile_and_link(cxx: str, flags: tuple[str, ...], cc_files: list[Path], objs: Path,
                      out: str) -> subprocess.CompletedProcess:
    """Each source compiled to its own object at once, one compiler process per core this
    process may use (the same flags less -shared, plus -c), then linked with the flags: the
    objects and the library are those of a single `cxx flags -o out *.cc`, which compiles the
    files one after another. The first failure is returned as it came."""
    from concurrent.futures import ThreadPoolExecutor

    cflags = [f for f in flags if f != "-shared"]
    jobs = [(cc, objs / f"{i}-{cc.stem}.o") for i, cc in enumerate(cc_files)]
    try:
        workers = len(os.sched_getaffinity(0))
    except AttributeError:                                   # not Linux
        workers = os.cpu_count() or 1

    def compile_one(job):
        cc, obj = job
        return subprocess.run([cxx, *cflags, "-c", str(cc), "-o", str(obj)], capture_output=True,
                              text=True, timeout=300)

    # the largest sources first (a unit's size stands in for its compile time), so that a long
    # unit started last does not run on alone while the other processes idle
    order = sorted(range(len(jobs)), key=lambda i: -_unit_size(jobs[i][0]))
    with ThreadPoolExecutor(max(1, min(workers, len(jobs)))) as pool:
        done = dict(zip(order, pool.map(compile_one, [jobs[i] for i in order])))
    results = [done[i] for i in range(len(jobs))]
    failed = next((r for r in results if r.returncode != 0), None)
    if failed is not None:
        return failed
    return subprocess.run([cxx, *flags, "-o", out, *(str(o) for _, o in jobs)],
                          capture_output=True, text=True, timeout=300)


def reason(kernels_dir: Path = KERNELS_DIR, flags: tuple[str, ...] = FLAGS) -> str:
    """Why there is no host build ("" when there is one or can be one)."""
    cxx, why = compiler()
    if cxx is None:
        return why
    if not Path(kernels_dir).is_dir() or not any(Path(kernels_dir).glob("*.cc")):
        return f"kernel sources not found in {kernels_dir}"
    return _FAILED.get(build_key(cxx, kernels_dir, flags), "")


def load(kernels_dir: Path = KERNELS_DIR, flags: tuple[str, ...] = FLAGS,
         name: str = "host-kernels", cache_dir: Path | None = None) -> ctypes.CDLL | None:
    """The host build loaded with ctypes (built first if needed), or None (see `reason`)."""
    built = build(kernels_dir, cache_dir, flags, name)
    if built is None:
        return None
    if built.path not in _LOADED:
        _LOADED[built.path] = ctypes.CDLL(str(built.path))
    return _LOADED[built.path]
