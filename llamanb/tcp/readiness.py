"""Can this machine run Furiosa's compiler on the TCP track's kernels? What it lacks, one phrase each."""
from __future__ import annotations

from pathlib import Path

from llamanb.platform.hardware import has_module


def furiosa_tool(name: str) -> bool:
    """A furiosa-tcc-style executable: beside this Python (a venv's bin/) or on PATH."""
    import os
    import shutil
    import sys

    here = Path(sys.executable).parent / name
    return (here.is_file() and os.access(here, os.X_OK)) or shutil.which(name) is not None

def tcp_compiler_missing(module=has_module, tool=furiosa_tool) -> tuple[str, ...]:
    """Furiosa's compiler on the block (llamanb.tcp.compiler): furiosa-tcc and furiosa-kernels."""
    missing = []
    if not tool("furiosa-tcc"):
        missing.append("furiosa-tcc (pip install furiosa-tcc)")
    if not module("furiosa.tcl"):
        missing.append("python module furiosa.tcl (pip install furiosa-kernels)")
    return tuple(missing)

def tcp_compiler_note(tool=furiosa_tool) -> str:
    edf = ("EDF binaries too (aarch64-linux-gnu-gcc present)" if tool("aarch64-linux-gnu-gcc") else
           "no EDF binaries: aarch64-linux-gnu-gcc missing (apt-get install gcc-aarch64-linux-gnu)")
    return "furiosa-tcc cycle estimates for the block's TCL kernels; " + edf
