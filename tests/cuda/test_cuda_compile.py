"""Both forms of the kernels compiled without a GPU, for sm_80 and sm_90:

- kernels/cuda/llama_kernels.cu by nvcc (else NVRTC) to PTX and to a cubin (SASS): every entry
  point is in the PTX (`.entry`) and in the SASS that cuobjdump prints (`Function :`);
- the numba-cuda kernels (llamanb.cuda.kernels, GPU branch: warp shuffles) by numba-cuda's NVVM
  path to PTX, and by ptxas to SASS where a toolkit is present -- the code a GPU would run, which
  the simulator never compiles."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from llamanb.cuda import compile as cc

from conftest import REPO_ROOT

# Run in a fresh process: this one may hold numba in simulator mode. numba-cuda compiles a
# kernel's device functions for "the current device" (numba_cuda/numba/cuda/dispatcher.py,
# CUDADispatcher.compile_device: get_current_device().compute_capability); with no GPU a
# stand-in device answers the one attribute it reads.
NUMBA_PTX = r"""
import json, sys
import numba.cuda.dispatcher as D
from numba import cuda
from llamanb.cuda import kernels
out = {}
for arch in sys.argv[1:]:
    cc = (int(arch[3]), int(arch[4:]))
    class Device:
        compute_capability = cc
    D.get_current_device = lambda: Device()
    kernels.build.cache_clear()                 # device functions compile per build
    k = kernels.build(kernels.GPU_TILE)
    out[arch] = {name: cuda.compile_ptx(getattr(k, name).py_func, sig, cc=cc)[0]
                 for name, sig in kernels.signatures().items()}
print(json.dumps(out))
"""


def _compiler():
    using = cc.compiler()
    if using is None:
        pytest.skip("neither nvcc nor NVRTC is installed (make test installs nvidia-cuda-nvrtc)")
    return using


@pytest.mark.slow
@pytest.mark.parametrize("arch", cc.ARCHS)
def test_every_entry_point_in_ptx_and_sass(arch):
    using = _compiler()
    ptx = cc.compile_cuda(arch, "ptx", using).decode()
    assert cc.ptx_target(ptx) == arch
    assert sorted(cc.ptx_entries(ptx)) == sorted(cc.ENTRY_POINTS), using
    if cc.cuobjdump() is None:
        pytest.skip("cuobjdump absent: the cubin's SASS cannot be listed")
    listing = cc.sass(cc.compile_cuda(arch, "cubin", using))
    assert cc.sass_arch(listing) == {arch}
    assert sorted(cc.sass_functions(listing)) == sorted(cc.ENTRY_POINTS)


def test_entry_points_are_the_numba_kernels():
    """The CUDA C++ form and the numba-cuda form hold the same kernels (one list each)."""
    import ast

    src = (cc.SOURCE.parents[2] / "llamanb" / "cuda" / "kernels.py").read_text()
    tree = ast.parse(src)
    names = next(n.value for n in tree.body if isinstance(n, ast.Assign)
                 and getattr(n.targets[0], "id", "") == "ENTRY_POINTS")
    assert tuple(ast.literal_eval(names)) == cc.ENTRY_POINTS


def test_nvrtc_error_is_one_line(tmp_path):
    if cc.compiler("nvrtc") is None:
        pytest.skip("NVRTC absent")
    bad = tmp_path / "bad.cu"
    bad.write_text('extern "C" __global__ void k() { undeclared = 1; }\n')
    from llamanb.errors import LlamanbError

    with pytest.raises(LlamanbError, match="NVRTC failed on bad.cu"):
        cc.compile_cuda("sm_80", "ptx", "nvrtc", source=bad)


@pytest.mark.slow
def test_numba_kernels_compile_for_the_gpu(tmp_path):
    pytest.importorskip("numba_cuda")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    r = subprocess.run([sys.executable, "-c", NUMBA_PTX, *cc.ARCHS], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode and "NVVM" in r.stderr and "not found" in r.stderr.lower():
        pytest.skip("libnvvm absent (pip install nvidia-nvvm, part of 'llamanb[cuda]')")
    assert r.returncode == 0, r.stderr[-2000:]
    by_arch = json.loads(r.stdout.strip().splitlines()[-1])
    ptxas = cc.ptxas()
    for arch in cc.ARCHS:
        ptx = by_arch[arch]
        assert sorted(ptx) == sorted(cc.ENTRY_POINTS)
        for name, text in ptx.items():
            assert cc.ptx_target(text) == arch and len(cc.ptx_entries(text)) == 1, name
        # the GPU branch of the one-place warp reduction: shuffles, where the simulator has none
        assert "shfl.sync.bfly" in ptx["softmax_rows"] and "shfl.sync.bfly" in ptx["rmsnorm"]
        if not ptxas:
            continue
        for name, text in ptx.items():                 # SASS: the PTX assembles for the card
            src = tmp_path / f"{name}.ptx"
            src.write_text(text)
            a = subprocess.run([ptxas, f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")],
                               capture_output=True, text=True)
            if "Unsupported .version" in a.stderr:
                pytest.skip(f"this ptxas is older than the PTX ISA NVVM wrote: {a.stderr.strip()}")
            assert a.returncode == 0, (arch, name, a.stderr[-1000:])
