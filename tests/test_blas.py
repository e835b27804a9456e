"""llamanb.blas's facts about row placement, measured on the BLAS this process loaded."""
import numpy as np

from llamanb.blas import row_align, row_multiple


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
