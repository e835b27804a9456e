"""llamanb.platform.blas's facts about row placement, measured on the BLAS this process loaded."""
import numpy as np

from llamanb.platform.blas import row_align, row_multiple


def test_rows_keep_their_bits_at_aligned_offsets_and_multiples():
    """A row's result is the same at any offset that is a multiple of row_align() in a GEMM whose
    row count is a multiple of row_multiple() -- what the engine relies on for bit-exact batching."""
    rng = np.random.default_rng(0)
    a, m = row_align(), row_multiple()
    for k, n in ((576, 960), (1536, 576)):
        w = rng.standard_normal((n, k)).astype(np.float32)
        x = rng.standard_normal((40, k)).astype(np.float32)
        ref = (np.vstack([x, np.zeros((-40 % m, k), np.float32)]) @ w.T)[:40]
        for off in range(0, 2 * max(a, 12), a):
            rows = -(-(off + 40) // m) * m
            y = np.zeros((rows, k), np.float32)
            y[off:off + 40] = x
            assert np.array_equal((y @ w.T)[off:off + 40], ref), (k, n, off, rows)


def test_the_portability_run_really_loads_another_kernel_family():
    """`make test-portability` is only worth its time if the variables take effect: in a child
    process with them, OpenBLAS reports the forced core (not the native one), numpy has the
    named vector targets switched off, and torch runs at the forced capability."""
    import json
    import os
    import subprocess
    import sys

    from llamanb.platform.blas import openblas_info, portability_env

    env = portability_env()
    probe = ("import json, numpy; from llamanb.platform.blas import openblas_info; "
             "from numpy._core._multiarray_umath import __cpu_features__ as f; "
             "import torch; print(json.dumps([openblas_info()['core'], "
             "{k: bool(f.get(k)) for k in %r}, torch.backends.cpu.get_cpu_capability()]))"
             % env.get("NPY_DISABLE_CPU_FEATURES", "").split())
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, check=True,
                         capture_output=True, text=True).stdout
    core, features, capability = json.loads(out.strip().splitlines()[-1])
    assert core.casefold() == env["OPENBLAS_CORETYPE"].casefold() != openblas_info()["core"].casefold()
    assert not any(features.values()), features
    if "ATEN_CPU_CAPABILITY" in env:
        assert capability.casefold() == env["ATEN_CPU_CAPABILITY"].casefold()
