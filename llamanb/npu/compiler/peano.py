"""Compiling the external kernels for the NPU itself: Peano, AMD's LLVM for the AIE cores.

    $PEANO_INSTALL_DIR/bin/clang++ <PEANO_FLAGS> -c kernels/rope_halfsplit.cc -o rope.o
                                                 -c kernels/silu_and_mul.cc   -o silu_and_mul.o
                                                 -c kernels/mv.cc             -o mv.o

The flags are the ones the MLIR-AIR Llama example compiles its kernels with (Xilinx/mlir-air,
programming_examples/llms/shared/infra/external_kernels.py): AIE2P target, -O2, C++20, NDEBUG and
four warnings silenced. Upstream also passes `-I<mlir-aie include>` and
`-D__AIE_API_AIE_ADF_HPP__`, both for the AIE API headers (aie_api/aie.hpp); our kernels are
plain C++ over <stdint.h> and include none of them. aiecc links each .o into the tile programs
through the `link_with` attribute of the kernel's MLIR declaration (llamanb.npu.compiler.extern.OBJECTS).
Peano is found as mlir-air's XRTBackend finds it (llamanb.npu.locate.find_peano: PEANO_INSTALL_DIR,
else the llvm-aie wheel), the same lookup `python -m llamanb info` reports.
"""
from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.extern import OBJECTS, SOURCES
from llamanb.platform.cxx_build import KERNELS_DIR

PEANO_FLAGS = ("-O2", "-std=c++20", "--target=aie2p-none-unknown-elf", "-DNDEBUG",
               "-Wno-parentheses", "-Wno-attributes", "-Wno-macro-redefined", "-Wno-empty-body")


def peano_clang(peano_dir: str | os.PathLike | None = None) -> Path:
    """Peano's bin/clang++ (peano_dir, else where mlir-air looks: PEANO_INSTALL_DIR, else the
    llvm-aie wheel; llamanb.npu.locate.find_peano), or one LlamanbError line saying what is
    missing."""
    from llamanb.npu.locate import peano_clang_path

    found = peano_clang_path(peano_dir)
    if not found:
        if found.how:              # found a Peano directory, but not its clang++
            why = found.missing
        else:
            env = os.environ.get("PEANO_INSTALL_DIR", "")
            why = (f"Peano: PEANO_INSTALL_DIR={env} is not a directory (ignored, as mlir-air does)"
                   if env else "Peano: PEANO_INSTALL_DIR is not set") + \
                " and no llvm-aie package is installed"
        raise LlamanbError(f"missing {why}; the AIE2P objects need Peano's clang++ (the emulated "
                           f"NPU2 uses host builds instead)")
    return found.path


def commands(out_dir: str | os.PathLike, peano_dir: str | os.PathLike | None = None,
             kernels_dir: Path = KERNELS_DIR) -> dict[str, list[str]]:
    """{object name: argv} for every external kernel, writing into out_dir."""
    clang = peano_clang(peano_dir)
    return {obj: [str(clang), *PEANO_FLAGS, "-c", str(Path(kernels_dir) / SOURCES[sym]),
                  "-o", str(Path(out_dir) / obj)]
            for sym, obj in OBJECTS.items()}


def compile_objects(out_dir: str | os.PathLike, peano_dir: str | os.PathLike | None = None,
                    kernels_dir: Path = KERNELS_DIR) -> dict[str, Path]:
    """Compile rope.o, silu_and_mul.o and mv.o into out_dir; {object name: path}.

    Each object is compiled to a temporary name and renamed, so out_dir never holds half an
    object. A compiler error raises LlamanbError with its first error lines."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    done = {}
    for obj, argv in commands(out_dir, peano_dir, kernels_dir).items():
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=obj + ".", suffix=".tmp")
        os.close(fd)
        try:
            run = subprocess.run(argv[:-1] + [tmp], capture_output=True, text=True, timeout=600)
            if run.returncode != 0:
                errors = [ln for ln in run.stderr.splitlines() if "error" in ln.lower()][:3]
                raise LlamanbError(f"Peano failed on {argv[-3]}: " + " | ".join(errors))
            os.replace(tmp, out_dir / obj)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        done[obj] = out_dir / obj
    return done
