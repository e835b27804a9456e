"""Where llamanb keeps what it builds and converts: $LLAMANB_CACHE, else ~/.cache/llamanb."""
from __future__ import annotations

import os
from pathlib import Path


CACHE_VAR = "LLAMANB_CACHE"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_VAR) or Path.home() / ".cache" / "llamanb")


def megabytes(n: int) -> str:
    return f"{n / 1e6:,.0f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def cache_fault(path, problem: str, need_bytes: int | None = None):
    """The one line for any fault of the cache location: the path, what is wrong, the variable
    that moves it, and how much room the model needs (when known)."""
    from llamanb.errors import LlamanbError

    root = cache_root()
    var = (f"set by {CACHE_VAR}" if os.environ.get(CACHE_VAR)
           else f"the default; {CACHE_VAR} moves it")
    where = f"{path}" if Path(path) == root else f"{path} (under the cache {root})"
    need = f"; the model needs about {megabytes(need_bytes)} there" if need_bytes else ""
    return LlamanbError(f"cache {where}, {var}: {problem}{need}; point {CACHE_VAR} at a writable "
                        f"directory with room, e.g. {CACHE_VAR}=/tmp/llamanb")


def os_problem(e: OSError) -> str:
    """An OSError in words ("Read-only file system", ...), without the traceback's path."""
    return e.strerror or type(e).__name__


def ensure_cache_root(need_bytes: int | None = None) -> Path:
    """The cache root, created if absent (and then marked as llamanb's: llamanb.platform.cache_files); a one-line LlamanbError if it is not a directory or
    cannot be created (below a regular file, no permission, a read-only filesystem). Whether it is
    writable is left to the first write: a complete, read-only cache still loads."""
    from llamanb.platform.cache_files import make_dirs

    root = cache_root()
    try:
        make_dirs(root, "root")                   # marked as llamanb's only if created here
    except FileExistsError:
        pass                                      # something that is not a directory: said below
    except OSError as e:
        raise cache_fault(root, f"cannot be created ({os_problem(e)})", need_bytes) from None
    if not root.is_dir():
        what = "a regular file" if root.is_file() else "not a directory"
        raise cache_fault(root, f"it is {what}", need_bytes)
    return root


def check_room(path: Path, need_bytes: int) -> None:
    """A one-line LlamanbError, before any work, when the filesystem of `path` is read-only or has
    less free space than need_bytes."""
    import shutil

    try:
        st = os.statvfs(path)
        if st.f_flag & os.ST_RDONLY:
            raise cache_fault(path, "Read-only file system", need_bytes)
        free = shutil.disk_usage(path).free
    except (OSError, AttributeError):
        return                                    # cannot tell: the write itself will say
    if free < need_bytes:
        raise cache_fault(path, f"No space left on device: only {megabytes(free)} free",
                          need_bytes)


# Outputs of independent systems (HF transformers' greedy tokens and top-5 logits, ttnn's
# block-float round trips) that the course and its tests check against. They ship inside the
# project (data/reference/, with the scripts that regenerate them), so a plain clone stands alone.
REFERENCE_DIR = Path(__file__).resolve().parents[2] / "data" / "reference"


def reference_file(name: str) -> Path:
    """data/reference/NAME of this checkout; a one-line LlamanbError if it is not there."""
    from llamanb.errors import LlamanbError

    path = REFERENCE_DIR / name
    if not path.is_file():
        raise LlamanbError(f"reference data {path} is missing (it ships with the repository: "
                           "restore it with `git checkout -- data/reference`)")
    return path


def check_output_file(path: str, option: str) -> Path:
    """A file an option names for output, checked before any work: its directory exists and takes
    a new file (a temporary is made and removed). Writers then write a temporary beside it and
    rename it into place, so a failed write never leaves half a file. One-line LlamanbError."""
    import tempfile

    from llamanb.errors import LlamanbError

    dest = Path(path).expanduser()
    if dest.is_dir():
        raise LlamanbError(f"{option} {path} is a directory; give a file name")
    if not dest.parent.is_dir():
        raise LlamanbError(f"{option} {path}: directory {dest.parent} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".probe", dir=dest.parent)
    except OSError as e:
        raise LlamanbError(f"{option} {path}: cannot write in {dest.parent} ({e.strerror}); "
                           "choose another file before anything runs") from None
    os.close(fd)
    os.unlink(tmp)
    return dest
