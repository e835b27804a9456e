"""Every kernel launch of a cuda backend's step, checked against float64 on its own inputs: what
chapter 12 asserts about the CUDA simulator instead of a guessed tolerance.

    with recorded(backend) as log:      # every launch: its arguments before and after
        engine.prefill(...); engine.decode(...)
    ratios = [launch_error_ratio(*entry) for entry in log]    # error / derived bound, per launch
    assert max(ratios) <= 1

Why per launch. A bound on the logits' distance from float64 must carry every rounding through
two layers of matmuls, attention and norms; taken in the worst case (absolute values, n u per
n-term sum) it grows by orders of magnitude per layer and says nothing at the end. One kernel,
though, given the float32 values it actually read, has a tight bound: its own roundings only,
the standard forward error bound evaluated on those values (u = 2^-24, gamma_n = n u / (1 - n u);
Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1: a sum of n products
computed in any order is within gamma_n sum |a_i b_i|). A kernel that reads a wrong key, a stale
shared slot or a neighbour's row misses its bound by orders of magnitude; rounding never does.

    kernel         checked against float64 of its inputs, bound
    gemm_nt        sum a w (+ c): gamma_{K+1} (sum |a w| + |c|)
    rmsnorm        x r w: relative (1 - delta)^-1/2 (1 + gamma_2)^2 - 1, delta = mean x^2's own
                   rounding (gamma_{H+1}) and + eps's (u) over (mean x^2 + eps)
    rope           x1 c - x2 s, x2 c + x1 s: gamma_2 (|x1 c| + |x2 s|); columns past the rotated
                   heads unchanged
    fill_kv        copies: exact
    qkt            q.k scale: gamma_{d+1} scale sum |q k|
    softmax_rows   relative 2 u R + gamma_{2L+6}, R the row's score range (rounding s - max moves
                   exp by u |s - max|; exp, the running rescalings, the sum, the division)
    softmax_v      sum p v: gamma_L sum |p v|
    silu_mul       g / (1 + e^-g) * up: gamma_4 |result| (the simulator's exp is float64's)

The bounds assume exp, sqrt and division correctly rounded in float32: numba-cuda's simulator
evaluates them in float64 and rounds once. A GPU's `__expf` is not correctly rounded; this check
is for the simulator.
"""
from __future__ import annotations

import contextlib
import dataclasses

import numpy as np

U = 2.0 ** -24


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def _host(a):
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return a.copy() if isinstance(a, np.ndarray) else a


class _Recording:
    def __init__(self, name, kernel, log):
        self.name, self.kernel, self.log = name, kernel, log

    def __getitem__(self, config):
        def launch(*args):
            before = [_host(a) for a in args]
            self.kernel[config](*args)
            self.log.append((self.name, before, [_host(a) for a in args]))
        return launch


@contextlib.contextmanager
def recorded(backend):
    """Within: every kernel launch of `backend` (a CudaBackend) appends (name, arguments before,
    arguments after) to the list yielded, host copies. The kernels are restored on exit."""
    from llamanb.cuda.kernels import ENTRY_POINTS

    log: list = []
    kernels = backend.k
    backend.k = dataclasses.replace(kernels, **{n: _Recording(n, getattr(kernels, n), log)
                                                for n in ENTRY_POINTS})
    try:
        yield log
    finally:
        backend.k = kernels


def _ratio(got, exact, bound) -> float:
    err = np.abs(np.asarray(got, np.float64) - exact)
    if np.any((bound == 0) & (err != 0)) or not np.all(np.isfinite(err)):
        return float("inf")
    return float(np.max(np.where(bound > 0, err / np.where(bound > 0, bound, 1), 0.0), initial=0))


def launch_error_ratio(name: str, before: list, after: list) -> float:
    """max |kernel output - float64 of its inputs| / derived bound over the launch's outputs
    (<= 1: within its own rounding; inf: a value that must be exact is not, or NaN)."""
    f = lambda a: np.asarray(a, np.float64)                                  # noqa: E731
    if name == "gemm_nt":
        a, w, c, acc = before
        c0 = f(c) if acc else np.zeros(c.shape)
        return _ratio(after[2], f(a) @ f(w).T + c0,
                      gamma(a.shape[1] + 1) * (np.abs(f(a)) @ np.abs(f(w)).T + np.abs(c0)))
    if name == "rmsnorm":
        x, w, _, eps = before
        x, H = f(x), x.shape[1]
        m = (x * x).mean(1, keepdims=True) + float(eps)
        delta = (gamma(H + 1) * (m - float(eps)) + U * m) / m
        y = x / np.sqrt(m) * f(w)
        return _ratio(after[2], y, ((1 - delta) ** -0.5 * (1 + gamma(2)) ** 2 - 1) * np.abs(y))
    if name == "rope":
        qkv, cos, sin, n_rot, d = before
        x, c, s, h = f(qkv), f(cos), f(sin), d // 2
        R = x.shape[0]
        rot = x[:, :n_rot * d].reshape(R, n_rot, d)
        x1, x2, c, s = rot[..., :h], rot[..., h:], c[:, None], s[:, None]
        want = x.copy()
        want[:, :n_rot * d] = np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], -1).reshape(R, -1)
        bound = np.zeros_like(x)
        b = gamma(2) * (np.abs(x1 * c) + np.abs(x2 * s) + np.abs(x2 * c) + np.abs(x1 * s))
        bound[:, :n_rot * d] = np.concatenate([b, b], -1).reshape(R, -1)
        return _ratio(after[0], want, bound)
    if name == "fill_kv":
        qkv, seg_slot, seg_row, seg_start, seg_n, kt, v, n_heads = before
        kt, v = kt.copy(), v.copy()
        n_kv, d = kt.shape[1], kt.shape[2]
        for slot, row, start, n in zip(seg_slot, seg_row, seg_start, seg_n):
            rows = qkv[row:row + n]
            kt[slot, :, :, start:start + n] = rows[:, n_heads * d:(n_heads + n_kv) * d].reshape(
                n, n_kv, d).transpose(1, 2, 0)
            v[slot, :, start:start + n] = rows[:, (n_heads + n_kv) * d:(n_heads + 2 * n_kv) * d
                                               ].reshape(n, n_kv, d).transpose(1, 0, 2)
        exact = np.array_equal(after[5], kt) and np.array_equal(after[6], v)
        return 0.0 if exact else float("inf")
    if name in ("qkt", "softmax_v"):
        src, cache, row_slot, row_len, _, n_heads, group = before[:7]
        worst = 0.0
        d = cache.shape[2] if name == "qkt" else cache.shape[3]
        for r, (slot, L) in enumerate(zip(row_slot, row_len)):
            for h in range(n_heads if L else 0):
                rh = r * n_heads + h
                if name == "qkt":
                    q, K = f(src[r, h * d:(h + 1) * d]), f(cache[slot, h // group, :, :L])
                    sc = float(before[7])
                    got, exact = after[4][rh, :L], q @ K * sc
                    bound = gamma(d + 1) * (np.abs(q) @ np.abs(K)) * abs(sc)
                else:
                    p, V = f(src[rh, :L]), f(cache[slot, h // group, :L])
                    got, exact = after[4][r, h * d:(h + 1) * d], p @ V
                    bound = gamma(L) * (np.abs(p) @ np.abs(V))
                worst = max(worst, _ratio(got, exact, bound))
        return worst
    if name == "softmax_rows":
        s, row_len, n_heads = before
        worst = 0.0
        for rh in range(s.shape[0]):
            L = int(row_len[rh // n_heads])
            if L:
                x = f(s[rh, :L])
                p = np.exp(x - x.max())
                p /= p.sum()
                rel = 2 * U * (x.max() - x.min()) + gamma(2 * L + 6)
                worst = max(worst, _ratio(after[0][rh, :L], p, rel * p))
        return worst
    if name == "silu_mul":
        gu = f(before[0])
        F = after[1].shape[1]
        y = gu[:, :F] / (1 + np.exp(-gu[:, :F])) * gu[:, F:]
        return _ratio(after[1], y, gamma(4) * np.abs(y))
    raise ValueError(f"no local bound for kernel {name!r}")
