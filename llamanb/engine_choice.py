"""Which engine answers a command: the --backend a user named, or for `auto` (the default of
generate and chat) the fastest one ready here -- the compiled `cpu` backend where a C++ compiler is
found, else the numpy reference -- said on one line to stderr. The CLI and the terminal chat both
ask here."""
from __future__ import annotations

import sys

from llamanb.errors import LlamanbError

AUTO = "auto"


def note(line: str) -> None:
    print(f"llamanb: {line}", file=sys.stderr, flush=True)


def choose_engine(model, backend: str, dtype: str = "float32"):
    """The engine for --backend; `auto` is the fastest ready one: cpu where a compiler is found
    (its kernels compiled once into the cache, said on one line), else numpy (one line says why).
    Greedy tokens are the same either way (tests/backends/test_cpu_backend.py, tests/test_cli.py)."""
    from llamanb.cpu.backend import QUANT_DTYPES, check_dtype
    from llamanb.engine.engine import Engine

    if backend != AUTO:
        check_dtype(backend, dtype)
        return Engine(model, backend, **({"dtype": dtype} if backend in ("numpy", "cpu") else {}))
    from llamanb.cpu.readiness import cpu_compiler_missing

    missing = cpu_compiler_missing()
    if missing:
        check_dtype("numpy", dtype)
        note(without_compiler(missing[0]))
        return Engine(model, "numpy", dtype=dtype)
    from llamanb.cpu import kernels as cpu_kernels

    if not cpu_kernels.built():
        note(f"engine cpu: compiling its C++ kernels for this CPU, once (about 15 s; kept in "
              f"{cpu_kernels.cache_dir()}); --backend numpy skips this")
    try:
        return Engine(model, "cpu", dtype=dtype)
    except (LlamanbError, OSError) as e:
        if dtype in QUANT_DTYPES:     # only cpu runs it: its own reason (the file's format, ...)
            raise LlamanbError(str(e)) from None
        note(f"engine numpy, the reference: the cpu backend could not start ({e})")
        return Engine(model, "numpy", dtype=dtype)


def without_compiler(missing: str) -> str:
    """The line `auto` prints where the cpu backend cannot be built: what is missing, and that
    the numpy reference engine runs instead."""
    return (f"engine numpy, the reference: the faster cpu backend is compiled from C++ and needs "
            f"{missing}, so the numpy engine runs instead")
