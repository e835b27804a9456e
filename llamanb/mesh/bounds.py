"""Error bounds for comparing two float32 evaluations of the same products (derived, not tuned).

Two runs of one matmul that differ only in how the BLAS kernel orders its sums (another layout,
another CPU, another library) need not agree bit for bit. What both must satisfy is the classical
bound on any float32 evaluation of an inner product of K terms, in any order, with or without
fused multiply-adds (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., eq. 3.5):

    |fl(A B) - A B|  <=  gamma_K |A| |B|   elementwise,   gamma_K = K u / (1 - K u),  u = 2^-24

A collective that adds the partial products of a split contraction only changes the order of the
same K - 1 additions, so the bound covers "matmul per device, then all-reduce" as a whole. Two
sides that each satisfy it differ by at most twice the bound. The bound follows from the values
alone, so it holds on every CPU; a wrong shard or a missing all-reduce moves results by the size
of the values themselves, thousands of times more than gamma_K.

    gamma(K)                  the constant above
    matmul_bound(a, b)        gamma_K |a| @ |b| in float64 (K = a.shape[-1]), for a @ b
    swiglu_bound(...)         the same propagated through silu(g) * u and the W2 product
    eval_error(f, exact, *x)  largest relative error of an elementwise float32 function, measured
                              on this machine against float64 at the same inputs
"""
from __future__ import annotations

import numpy as np

from llamanb.model.numerics import U_FLOAT32 as U32, gamma, matmul_bound  # noqa: F401  (one definition)

SILU_SLOPE = 1.0999                  # max |d silu(x) / dx| (1.09984 at x = 2.3994), so silu is
                                     # Lipschitz with this constant


def eval_error(f, exact, *inputs: np.ndarray) -> float:
    """max |f(x) - exact(x)| / |exact(x)| over the float32 inputs (exact in float64): the
    relative error of an elementwise float32 routine (numpy's exp, a divide, a multiply), measured
    here, because libm's and numpy's SIMD exp are allowed a few ulp and differ by CPU."""
    xs = [np.asarray(x, np.float32) for x in inputs]
    got = np.asarray(f(*xs), np.float64)
    want = exact(*[x.astype(np.float64) for x in xs])
    nz = want != 0
    return float((np.abs(got - want)[nz] / np.abs(want[nz])).max(initial=0.0))


def silu64(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def swiglu_bound(h: np.ndarray, w1: np.ndarray, w3: np.ndarray, w2: np.ndarray,
                 eps_eval: float) -> tuple[np.ndarray, np.ndarray]:
    """The exact y = (silu(h W1) * (h W3)) W2 in float64 and a bound on |fl(y) - y| for one float32
    evaluation (weights [in, out]; h, W exact as given). With g = h W1, u = h W3, a = silu(g) u:

        dg, du <= gamma_H |h| |W1|, gamma_H |h| |W3|             (matmul_bound; any sum order)
        da     <= 1.1 dg (|u| + du) + |silu(g)| du                (silu is 1.1-Lipschitz)
                  + eps_eval (|a| + that)                          (the elementwise evaluation)
        dy     <= da |W2| + gamma_F (|a| + da) |W2|                (W2 on the perturbed a)
    """
    h64 = np.asarray(h, np.float64)
    g, u = h64 @ w1.astype(np.float64), h64 @ w3.astype(np.float64)
    dg, du = matmul_bound(h, w1), matmul_bound(h, w3)
    a = silu64(g) * u
    da = SILU_SLOPE * dg * (np.abs(u) + du) + np.abs(silu64(g)) * du
    da = da + eps_eval * (np.abs(a) + da)
    w2a = np.abs(w2.astype(np.float64))
    y = a @ w2.astype(np.float64)
    dy = da @ w2a + gamma(w2.shape[0]) * ((np.abs(a) + da) @ w2a)
    return y, dy
