"""kernels/cuda/llama_kernels.cu compiled without a GPU by nvcc (else NVRTC) to PTX and to a cubin
(SASS) for sm_80 and sm_90: every entry point of the design is in the PTX (`.entry`) and in the
SASS that cuobjdump prints (`Function :`), for the architecture asked."""
from __future__ import annotations

import pytest

from llamanb.cuda import compile as cc


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
