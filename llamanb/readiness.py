"""What this machine can run, backend by backend: the one table every command and chapter reads
(`llamanb info`, `auto`, chapter 00's map, the capstone). Each track says what it lacks in its own
readiness.py; this module lists them in the order the course introduces them."""
from __future__ import annotations

from llamanb.cpu.readiness import cpu_compiler_missing
from llamanb.cuda.readiness import cuda_missing
from llamanb.engine.registry import BACKENDS, LAZY
from llamanb.mesh.readiness import ttlang_sim_missing, ttnn_missing
from llamanb.npu.readiness import npu2_missing
from llamanb.platform.hardware import Readiness, amd_npu_devices, has_module, tenstorrent_devices
from llamanb.tcp.readiness import furiosa_tool, tcp_compiler_missing, tcp_compiler_note


def readiness(module=has_module, npu_devices=amd_npu_devices,
              tt_devices=tenstorrent_devices, tool=furiosa_tool) -> list[Readiness]:
    """Every registered backend, in the order the course introduces them, with what it lacks.
    The probes are arguments so that tests can stand in for modules and device nodes."""

    rows = [Readiness("numpy", "host CPU", note="the reference engine")]
    if "cpu" in {**BACKENDS, **LAZY}:
        rows.append(Readiness("cpu", "host CPU", cpu_compiler_missing(),
                              "the course's C++ kernels compiled for this CPU"))
    rows += [
        Readiness("npu2-emulated", "emulated", note="the stitched MLIR-AIR groups, run on the host"),
        Readiness("npu2", "device", npu2_missing(module, npu_devices), "AMD NPU2 through XRT"),
        Readiness("tcp", "emulated", note="Furiosa's TCP einsum program, interpreted on the host"),
        Readiness("tcp-compiler", "host CPU", tcp_compiler_missing(module, tool), tcp_compiler_note(tool)),
        Readiness("galaxy-emulated", "emulated", note="a Tenstorrent mesh of numpy devices"),
        Readiness("galaxy-ttnn", "device", ttnn_missing(module, tt_devices),
                  "every op a ttnn call on a Tenstorrent device"),
        Readiness("galaxy-ttlang-sim", "emulated", ttlang_sim_missing(module),
                  "the mesh's matmuls as TT-Lang kernels on tt-lang-sim (simulated)"),
    ]
    if "cuda" in {**BACKENDS, **LAZY}:
        rows += [Readiness("cuda-simulated", "emulated",
                           () if module("numba_cuda") else ("python module numba-cuda (pip install "
                                                            "'llamanb[cuda]')",),
                           "numba-cuda's simulator: every CUDA thread a Python thread, tiny "
                           "models only"),
                 Readiness("cuda", "device", cuda_missing(module),
                           "the CUDA kernels on an NVIDIA GPU (untested on hardware so far)")]
    return rows


def readiness_report(rows: list[Readiness] | None = None, width: int | None = 120) -> str:
    """One entry per backend, wrapped to `width` columns (Readiness.lines; a notebook's column by
    default), or one line each with width=None (what `python -m llamanb info` prints)."""
    rows = rows if rows is not None else readiness()
    return "\n".join(r.line() if width is None else r.lines(width) for r in rows)
