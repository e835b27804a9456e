"""What this machine is and what it can do: CPU, BLAS, memory bandwidth, process memory.

Used by the benchmark (the decode roofline is bandwidth / bytes per token) and by the course's
overview. Linux-first (/proc); every probe degrades to "unknown" elsewhere.
"""
from __future__ import annotations

import gc
import os
import platform
import statistics
import threading
import time
from importlib import metadata

import numpy as np

from llamanb.platform.blas import openblas_info

BANDWIDTH_BYTES = 1 << 30                # 1 GiB: far larger than any cache
BANDWIDTH_REPEATS = 7
ROUND_PROBE_REPEATS = 3                  # each later probe (bench --backend cpu: every round, every turn)


# --- process memory --------------------------------------------------------------------------

def _status_kb(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise OSError(f"{field} not in /proc/self/status")


def rss_mb() -> float:
    return _status_kb("VmRSS") * 1024 / 1e6


def peak_rss_mb() -> float:
    return _status_kb("VmHWM") * 1024 / 1e6


def release_memory() -> None:
    """Drop garbage and hand free heap pages back to the OS (after the bandwidth probe)."""
    from llamanb.cpu.kernels import release_heap

    gc.collect()
    release_heap()


# --- machine ---------------------------------------------------------------------------------

def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict:
    mem_total = None
    try:
        with open("/proc/meminfo") as f:
            mem_total = int(f.readline().split()[1]) * 1024 / 2**30
    except (OSError, ValueError, IndexError):
        pass
    return {"cpu": cpu_model(), "cores": os.cpu_count(),
            "cores_usable": len(os.sched_getaffinity(0)),
            "memory_gib": round(mem_total, 1) if mem_total else None,
            "python": platform.python_version(), "numpy": np.__version__,
            "torch": _version("torch"), "transformers": _version("transformers"),
            "openblas": openblas_info()}


class CpuShare:
    """How much CPU other processes (and the hypervisor: steal) took between start and now, as a
    share of all cores."""

    @staticmethod
    def _sample() -> tuple[float, float, float]:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:9]]
        hz, t = os.sysconf("SC_CLK_TCK"), os.times()
        busy = v[0] + v[1] + v[2] + v[5] + v[6]            # user nice system irq softirq
        own = t.user + t.system + t.children_user + t.children_system
        return busy / hz, v[7] / hz, own

    def __init__(self):
        self.t0, self.s0 = time.perf_counter(), self._sample()

    def pct(self) -> dict | None:
        try:
            (b0, st0, o0), (b1, st1, o1) = self.s0, self._sample()
        except (OSError, ValueError):
            return None
        total = (time.perf_counter() - self.t0) * (os.cpu_count() or 1) / 100
        return {"other_processes": max(0.0, (b1 - b0) - (o1 - o0)) / total,
                "steal": (st1 - st0) / total}


# --- memory-read bandwidth -------------------------------------------------------------------

def _threaded(fn, parts) -> float:
    """Seconds for every part to go through fn, one thread per part, started together."""
    barrier = threading.Barrier(len(parts) + 1)

    def work(p):
        barrier.wait()
        fn(p)

    threads = [threading.Thread(target=work, args=(p,)) for p in parts]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - t0


def memory_read_bandwidth(nbytes: int = BANDWIDTH_BYTES, repeats: int = BANDWIDTH_REPEATS,
                          extra: dict | None = None, array: np.ndarray | None = None) -> dict:
    """Median GB/s of each method over `repeats` passes (after one warm-up), and the best.
    `extra`: more methods, name -> fn(float32 array) that reads the whole array (the cpu
    backend's own streaming sum, when it is benchmarked: a roofline must not be slower than
    what the engine under test already reads at). `array`: a float32 array to read instead of
    allocating one (the per-round probe keeps one)."""
    # written once: every page is resident (`array`: one the caller keeps between probes)
    a = np.ones(nbytes // 4, dtype=np.float32) if array is None else array
    parts = np.array_split(a, os.cpu_count() or 1)
    cols = 4096
    matrix, vec = a[: a.size // cols * cols].reshape(-1, cols), np.ones(cols, dtype=np.float32)
    row = np.ones(matrix.shape[0], dtype=np.float32)

    def timed(f):
        t0 = time.perf_counter()
        f()
        return time.perf_counter() - t0

    methods = {
        f"np.add.reduce, {len(parts)} threads": lambda: _threaded(np.add.reduce, parts),
        f"np.maximum.reduce, {len(parts)} threads": lambda: _threaded(np.maximum.reduce, parts),
        f"sgemv [{matrix.shape[0]}, {cols}] @ [{cols}], OpenBLAS":
            lambda: timed(lambda: matrix @ vec),
        # the same bytes read as [rows] @ [rows, cols]: OpenBLAS's other GEMV kernel streams
        # faster on this machine (the one llamanb uses for gate/up and the LM head)
        f"sgemv [{matrix.shape[0]}] @ [{matrix.shape[0]}, {cols}], OpenBLAS":
            lambda: timed(lambda: row @ matrix),
    }
    for name, fn in (extra or {}).items():
        methods[name] = lambda fn=fn: timed(lambda: fn(a))
    out = {}
    for name, run in methods.items():
        size = matrix.nbytes if name.startswith("sgemv") else a.nbytes
        run()                                                # warm-up
        samples = [size / run() / 1e9 for _ in range(repeats)]
        out[name] = {"samples_gb_s": samples, "median_gb_s": statistics.median(samples)}
    best = max(out, key=lambda k: out[k]["median_gb_s"])
    return {"array_mib": nbytes / 2**20, "repeats": repeats, "methods": out, "best": best,
            "gb_s": out[best]["median_gb_s"]}
