"""Advisory locks (flock) that tell a live writer's temporaries from a dead one's.

A writer holds an exclusive flock on its temporary (a directory or a file) while it works; the
kernel drops the lock when the process ends, however it ends (SIGKILL included). A sweeper that
can take the lock without waiting knows the temporary is abandoned. Creating a temporary and
locking it are two steps, so both happen under a lock on the parent directory, which the sweeper
takes too (without waiting: if it is busy, the sweep is left for a later run).

Without fcntl (not POSIX) nothing is locked and nothing is swept.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

try:
    import fcntl
except ImportError:
    fcntl = None

AVAILABLE = fcntl is not None


def lock_fd(path: Path, blocking: bool = True) -> int | None:
    """An fd of `path` (a directory or a file) holding an exclusive flock on it, or None if
    another process holds it (when not blocking), the path is gone, or this system cannot lock."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except OSError:                    # held elsewhere (EWOULDBLOCK), or no locking on this fs
        os.close(fd)
        return None
    return fd


def lock_open_file(f) -> None:
    """Lock a file this process has just opened for writing (under its parent's lock)."""
    if fcntl is not None:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            pass                       # no locking here: the file just is not protected


@contextmanager
def locked(path: Path, blocking: bool = True):
    """Hold the lock on `path` for the block; yields whether it is held."""
    fd = lock_fd(path, blocking)
    try:
        yield fd is not None
    finally:
        if fd is not None:
            os.close(fd)
