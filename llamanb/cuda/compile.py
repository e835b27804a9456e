"""kernels/cuda/llama_kernels.cu to PTX and SASS (a cubin) for an NVIDIA architecture, without a GPU.

Two compilers, the first found wins:

    nvcc    CUDA's compiler driver ($CUDA_HOME/bin/nvcc or nvcc on PATH):
            nvcc -arch=sm_90 -ptx / -cubin
    NVRTC   CUDA's runtime compiler library, from the `nvidia-cuda-nvrtc` wheel (or the toolkit):
            nvrtcCompileProgram with --gpu-architecture=compute_90 (PTX) or sm_90 (cubin)

A cubin holds SASS, the architecture's own machine code; `cuobjdump -sass` (the
`nvidia-cuda-cuobjdump` wheel with nvdisasm from `nvidia-cuda-nvdisasm`, or the toolkit) prints it with one `Function : name` header per
kernel, and PTX names each kernel in an `.entry name(` line. Nothing here runs a kernel.
"""
from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from llamanb.errors import LlamanbError

SOURCE = Path(__file__).resolve().parents[2] / "kernels" / "cuda" / "llama_kernels.cu"
ARCHS = ("sm_80", "sm_90")          # A100 (Ampere) and H100/H200 (Hopper)
ENTRY_POINTS = ("gemm_nt", "rmsnorm", "rope", "fill_kv", "qkt", "softmax_rows", "softmax_v",
                "silu_mul", "argmax_decode")


def _wheel_dirs(sub: str) -> list[Path]:
    """nvidia/<cu13|cu12|cuda_nvrtc|...>/<sub> directories of the installed NVIDIA wheels."""
    out = []
    for base in map(Path, sys.path):
        root = base / "nvidia"
        if root.is_dir():
            out += sorted(d for d in root.glob(f"*/{sub}") if d.is_dir())
    return out


def nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def ptxas() -> str | None:
    """The PTX assembler: on PATH, beside $CUDA_HOME's nvcc, or in /usr/local/cuda/bin."""
    found = shutil.which("ptxas")
    if found:
        return found
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "ptxas").is_file():
            return str(Path(home) / "bin" / "ptxas")
    return None


def nvrtc_library() -> str | None:
    for d in _wheel_dirs("lib"):
        libs = sorted(d.glob("libnvrtc.so.*"))
        libs = [p for p in libs if "builtins" not in p.name]
        if libs:
            return str(libs[0])
    import ctypes.util

    return ctypes.util.find_library("nvrtc")


def cuobjdump() -> str | None:
    for d in _wheel_dirs("bin"):
        if (d / "cuobjdump").is_file():
            return str(d / "cuobjdump")
    return shutil.which("cuobjdump")


def compiler(prefer: str | None = None) -> str | None:
    """'nvcc' or 'nvrtc' (the first found, or the one asked for if present), else None."""
    found = {"nvcc": nvcc() is not None, "nvrtc": nvrtc_library() is not None}
    if prefer is not None:
        return prefer if found.get(prefer) else None
    return next((c for c in ("nvcc", "nvrtc") if found[c]), None)


def compile_cuda(arch: str, kind: str, using: str | None = None, source: Path = SOURCE) -> bytes:
    """PTX text (kind "ptx") or a cubin (kind "cubin") of `source` for `arch` (sm_80, sm_90)."""
    if kind not in ("ptx", "cubin") or not re.fullmatch(r"sm_\d+", arch):
        raise LlamanbError(f"compile: kind must be ptx or cubin and arch sm_NN, got {kind}, {arch}")
    using = compiler(using)
    if using is None:
        raise LlamanbError("compiling CUDA needs nvcc (the CUDA toolkit) or NVRTC "
                           "(pip install nvidia-cuda-nvrtc, part of 'llamanb[cuda]')")
    if using == "nvcc":
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / f"k.{kind}"
            r = subprocess.run([nvcc(), f"-arch={arch}", f"-{kind}", "-O3", "-o", str(out),
                                str(source)], capture_output=True, text=True)
            if r.returncode:
                raise LlamanbError(f"nvcc failed on {source.name}: {r.stderr.strip()[:400]}")
            return out.read_bytes()
    return _nvrtc(source.read_text(), source.name, arch, kind)


def _nvrtc(src: str, name: str, arch: str, kind: str) -> bytes:
    lib = ctypes.CDLL(nvrtc_library())
    prog = ctypes.c_void_p()

    def check(rc, what):
        if rc:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise LlamanbError(f"NVRTC {what}: {lib.nvrtcGetErrorString(rc).decode()}")

    check(lib.nvrtcCreateProgram(ctypes.byref(prog), src.encode(), name.encode(), 0, None, None),
          "create")
    target = arch if kind == "cubin" else arch.replace("sm_", "compute_")
    opts = [f"--gpu-architecture={target}".encode(), b"-default-device"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
    if rc:
        n = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        raise LlamanbError(f"NVRTC failed on {name}: {log.value.decode(errors='replace')[:400]}")
    get_size, get = ((lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN) if kind == "cubin"
                     else (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX))
    n = ctypes.c_size_t()
    check(get_size(prog, ctypes.byref(n)), "size")
    buf = ctypes.create_string_buffer(n.value)
    check(get(prog, buf), "output")
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    data = buf.raw[:n.value]
    return data.rstrip(b"\0") if kind == "ptx" else data


def ptx_entries(ptx: str) -> list[str]:
    """Kernel names declared in PTX text: `.visible .entry name(`."""
    return re.findall(r"\.entry\s+(\w+)\s*\(", ptx)


def ptx_target(ptx: str) -> str | None:
    m = re.search(r"^\.target\s+(\w+)", ptx, re.M)
    return m.group(1) if m else None


def sass(cubin: bytes) -> str:
    """`cuobjdump -sass` of a cubin: per kernel a `Function : name` header and its SASS."""
    tool = cuobjdump()
    if tool is None:
        raise LlamanbError("reading SASS needs cuobjdump (pip install nvidia-cuda-cuobjdump, "
                           "part of 'llamanb[cuda]')")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "k.cubin"
        path.write_bytes(cubin)
        env = dict(os.environ)
        dis = next((str(d / "nvdisasm") for d in _wheel_dirs("bin") if (d / "nvdisasm").is_file()),
                   None)                          # cuobjdump -sass runs nvdisasm
        if dis:
            env["NVDISASM_PATH"] = str(Path(dis).parent)
        r = subprocess.run([tool, "-sass", str(path)], capture_output=True, text=True, env=env)
    if r.returncode:
        raise LlamanbError(f"cuobjdump failed: {r.stderr.strip()[:300]}")
    return r.stdout


def sass_functions(listing: str) -> list[str]:
    return re.findall(r"Function\s*:\s*(\w+)", listing)


def sass_arch(listing: str) -> set[str]:
    return set(re.findall(r"code for (sm_\d+)", listing))
