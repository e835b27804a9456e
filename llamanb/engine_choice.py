"""Which engine answers a command: the --backend a user named, or for `auto` (the default of
generate and chat, and the capstone's main run) the best real hardware ready here -- an NVIDIA GPU
(`cuda`) or a Ryzen AI NPU (`npu2`) where `llamanb.readiness` finds its stack and its device, else
the compiled `cpu` backend where a C++ compiler is found, else the numpy reference -- said on one
line to stderr. The CLI, the terminal chat and chapter 13 all ask here."""
from __future__ import annotations

import sys

from llamanb.errors import LlamanbError

AUTO = "auto"

# Real devices `auto` prefers to the host, first ready first; each runs its own precision (cuda
# float32, npu2 bf16), so `auto` takes one only for the default --dtype float32. Both pass the
# reference gate where they run (chapter 13 asserts it); neither is bit-identical to numpy.
DEVICES = ("cuda", "npu2")
DEVICE_NAMES = {"cuda": "the NVIDIA GPU", "npu2": "the Ryzen AI NPU"}


def note(line: str) -> None:
    print(f"llamanb: {line}", file=sys.stderr, flush=True)


def ready_devices(rows=None) -> list[str]:
    """The DEVICES this machine can run now, in preference order (rows: llamanb.readiness's table,
    read here when not given)."""
    if rows is None:
        from llamanb.readiness import readiness

        rows = readiness()
    ready = {r.name for r in rows if r.ready and r.runs_on == "device"}
    return [d for d in DEVICES if d in ready]


def choose_engine(model, backend: str, dtype: str = "float32", rows=None, make=None):
    """The engine for --backend; `auto` is the best ready one: a device of DEVICES (float32 only),
    else cpu where a compiler is found (its kernels compiled once into the cache, said on one
    line), else numpy (one line says why). A device that is ready but fails to start gives one line
    and the host engine. cpu's greedy tokens are numpy's (tests/cpu/test_cpu_backend.py,
    tests/test_cli.py). rows and make (Engine's signature) stand in for the probes in tests."""
    from llamanb.cpu.backend import QUANT_DTYPES, check_dtype

    if make is None:
        from llamanb.engine.engine import Engine as make
    if backend != AUTO:
        check_dtype(backend, dtype)
        return make(model, backend, **({"dtype": dtype} if backend in ("numpy", "cpu") else {}))
    if dtype == "float32":
        for dev in ready_devices(rows):
            try:
                engine = make(model, dev)
            except (LlamanbError, OSError, ImportError, RuntimeError) as e:
                note(f"engine {dev}: {DEVICE_NAMES[dev]} is ready but did not start "
                     f"({type(e).__name__}: {e}); the host answers")
                continue
            note(f"engine {dev}: {DEVICE_NAMES[dev]} (--backend cpu or numpy for the host)")
            return engine
    from llamanb.cpu.readiness import cpu_compiler_missing

    missing = cpu_compiler_missing()
    if missing:
        check_dtype("numpy", dtype)
        note(without_compiler(missing[0]))
        return make(model, "numpy", dtype=dtype)
    from llamanb.cpu import kernels as cpu_kernels

    if not cpu_kernels.built():
        note(f"engine cpu: compiling its C++ kernels for this CPU, once (about 15 s; kept in "
             f"{cpu_kernels.cache_dir()}); --backend numpy skips this")
    try:
        return make(model, "cpu", dtype=dtype)
    except (LlamanbError, OSError) as e:
        if dtype in QUANT_DTYPES:     # only cpu runs it: its own reason (the file's format, ...)
            raise LlamanbError(str(e)) from None
        note(f"engine numpy, the reference: the cpu backend could not start ({e})")
        return make(model, "numpy", dtype=dtype)


def without_compiler(missing: str) -> str:
    """The line `auto` prints where the cpu backend cannot be built: what is missing, and that
    the numpy reference engine runs instead."""
    return (f"engine numpy, the reference: the faster cpu backend is compiled from C++ and needs "
            f"{missing}, so the numpy engine runs instead")
