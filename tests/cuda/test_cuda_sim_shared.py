"""The race in numba-cuda's simulator that made chapter 12's accuracy check fail once, and its fix
(llamanb/cuda/sim_shared.py): `cuda.shared.array` was a check-then-store on a dict shared by the
Python threads of a launch, so two threads of the first block could each allocate a buffer for one
source line and the block's shared memory split in two.

The race needs the interpreter to switch threads inside a window of a few bytecodes; at Python's
default switch interval that is about one launch in a few hundred. The test makes it happen at
will: the allocation dict of each launch sleeps 2 ms when a line has no buffer yet (the window
between upstream's `get` and its store: every thread that arrives meanwhile finds no buffer
either) and fills each new buffer with NaN (or -1) before any thread sees it, so a thread that
reads a slot whose writer got another buffer reads poison, not recycled memory that may happen to
hold the right value. The same poison checks the kernels themselves: a kernel that read a shared
slot before (or without) a barrier after its write would read it too. Each shared-memory kernel
runs three times at a 1 us switch interval, against numpy in float64 and bit for bit against its
own first run. Without sim_shared.install() every case fails here (checked: 7 of 7)."""
from __future__ import annotations

import sys
import time

import numpy as np
import pytest

pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")

from llamanb.cuda import runtime  # noqa: E402

U = 2.0 ** -24
RUNS = 3


@pytest.fixture(scope="module")
def k():
    runtime.load(simulated=True)
    from llamanb.cuda import kernels

    return kernels.build(kernels.SIM_TILE)


class _WideWindow(dict):
    """A launch's FakeCUDAShared._allocations (numba_cuda/numba/cuda/simulator/kernelapi.py:108,
    132-135 at 0.30.4): a miss sleeps, letting the block's other threads in; a new buffer is
    poisoned before any thread gets it."""

    def get(self, key, default=None):
        res = super().get(key, default)
        if res is None:
            time.sleep(2e-3)
        return res

    def __setitem__(self, key, buf):
        buf.fill(np.nan if buf.dtype.kind == "f" else -1)
        super().__setitem__(key, buf)


@pytest.fixture
def wide_window(k, monkeypatch):
    from numba.cuda.simulator import kernelapi

    init = kernelapi.FakeCUDAShared.__init__

    def widened(self, dynshared_size):
        init(self, dynshared_size)
        self._allocations = _WideWindow()

    monkeypatch.setattr(kernelapi.FakeCUDAShared, "__init__", widened)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _close(got, exact, n_terms):
    """float32 against float64: a few roundings per term of at most n_terms (gamma_n-sized; a
    lost shared slot gives NaN here, or a wrong partial sum orders of magnitude past this)."""
    tol = 4 * n_terms * U * (1 + np.abs(exact)).max()
    return bool(np.all(np.abs(np.asarray(got, np.float64) - exact) <= tol))


def _case(name, k, rng):
    """(launch, check): launch() runs the kernel on fresh copies of one set of inputs and returns
    its outputs; check(outputs) compares them with numpy in float64."""
    f = lambda *s: rng.standard_normal(s).astype(np.float32)      # noqa: E731
    T, B, W = k.tile, k.block, k.warps_per_block
    R, Nh, Nkv, d, S = 3, 2, 1, 16, 8
    qkv, kt, v = f(R, (Nh + 2 * Nkv) * d), f(1, Nkv, d, S), f(1, Nkv, S, d)
    row_slot, row_len = np.zeros(R, np.int32), np.array([3, 6, 8], np.int32)
    x64 = lambda a: np.asarray(a, np.float64)                       # noqa: E731
    if name == "gemm_nt":
        a, w = f(5, 9), f(6, 9)

        def launch():
            c = np.zeros((5, 6), np.float32)
            k.gemm_nt[(2, 2), (T, T)](a, w, c, 0)
            return c
        return launch, lambda c: _close(c, x64(a) @ x64(w).T, 9)
    if name == "rmsnorm":
        x, w = f(R, 40), f(40)

        def launch():
            o = np.zeros((R, 40), np.float32)
            k.rmsnorm[-(-R // W), 32 * W](x, w, o, np.float32(1e-5))
            return o
        ex = x64(x) / np.sqrt((x64(x) ** 2).mean(1, keepdims=True) + 1e-5) * x64(w)
        return launch, lambda o: _close(o, ex, 40)
    if name == "fill_kv":
        seg = [np.array(s, np.int32) for s in ([0], [0], [2], [3])]

        def launch():
            kt2, v2 = np.zeros_like(kt), np.zeros_like(v)
            k.fill_kv[(-(-d // T), 1, Nkv), (T, T)](qkv, *seg, kt2, v2, Nh)
            return kt2, v2
        ekt, ev = np.zeros_like(kt), np.zeros_like(v)
        ekt[0, :, :, 2:5] = qkv[:3, Nh * d:(Nh + Nkv) * d].reshape(3, Nkv, d).transpose(1, 2, 0)
        ev[0, :, 2:5] = qkv[:3, (Nh + Nkv) * d:].reshape(3, Nkv, d).transpose(1, 0, 2)
        return launch, lambda o: np.array_equal(o[0], ekt) and np.array_equal(o[1], ev)
    q = x64(qkv[:, :Nh * d]).reshape(R, Nh, d)
    K, V = x64(kt[0, 0]).T, x64(v[0, 0])                            # [S, d] both
    s64 = np.einsum("rhc,jc->rhj", q, K) / 4.0                      # scale d^-1/2 = 1/4
    if name == "qkt":
        def launch():
            sc = np.zeros((R * Nh, S), np.float32)
            k.qkt[(1, R * Nh), B](qkv, kt, row_slot, row_len, sc, Nh, Nh // Nkv,
                                  np.float32(0.25))
            return sc
        return launch, lambda sc: all(_close(sc[r * Nh:(r + 1) * Nh, :n], s64[r, :, :n], d)
                                      for r, n in enumerate(row_len))
    p = f(R * Nh, S)
    if name == "softmax_rows":
        def launch():
            sc = p.copy()
            k.softmax_rows[-(-(R * Nh) // W), 32 * W](sc, row_len, Nh)
            return sc

        def check(sc):
            for rh in range(R * Nh):
                n = row_len[rh // Nh]
                e = np.exp(x64(p[rh, :n]) - p[rh, :n].max())
                if not _close(sc[rh, :n], e / e.sum(), n + 8):
                    return False
            return True
        return launch, check
    if name == "softmax_v":
        def launch():
            o = np.zeros((R, Nh * d), np.float32)
            k.softmax_v[(1, R * Nh), B](p, v, row_slot, row_len, o, Nh, Nh // Nkv)
            return o

        def check(o):
            return all(_close(o[r, h * d:(h + 1) * d], x64(p[r * Nh + h, :n]) @ V[:n], n)
                       for r, n in enumerate(row_len) for h in range(Nh))
        return launch, check
    if name == "argmax_decode":
        Vv, H = 50, 6
        lg, emb = f(4, Vv), f(Vv, H)
        lg[2, 7] = lg[2, 30] = 9.0                                  # a tie: the lower id wins
        lengths0 = np.array([3, 0, 5, 15], np.int32)       # block 0, the one that races, live

        def launch():
            ln, tok, xn = lengths0.copy(), np.zeros(4, np.int32), np.zeros((4, H), np.float32)
            k.argmax_decode[4, B](lg, ln, tok, 1, 16, emb, xn)
            return tok, ln, xn

        want = [int(np.argmax(r)) if L else -1 for r, L in zip(lg, lengths0)]  # eos 1, max 16
        live = [L > 0 and t != 1 and L + 1 < 16 for L, t in zip(lengths0, want)]
        want_len = [L + 1 if ok else 0 for L, ok in zip(lengths0, live)]
        want_x = np.stack([emb[t] if ok else np.zeros(H, np.float32) for t, ok in zip(want, live)])

        def check(o):
            tok, ln, xn = o
            return tok.tolist() == want and ln.tolist() == want_len and np.array_equal(xn, want_x)
        return launch, check
    raise AssertionError(name)


SHARED_KERNELS = ("gemm_nt", "rmsnorm", "fill_kv", "qkt", "softmax_rows", "softmax_v",
                  "argmax_decode")


def _bits(out):
    return b"".join(np.ascontiguousarray(a).tobytes() for a in (out if isinstance(out, tuple)
                                                                  else (out,)))


@pytest.mark.parametrize("name", SHARED_KERNELS)
def test_shared_memory_kernels_exact_when_threads_race_to_allocate(k, wide_window, name):
    launch, check = _case(name, k, np.random.default_rng(7))
    first = None
    for run in range(RUNS):
        out = launch()
        assert check(out), f"{name}, run {run}: differs from float64 numpy"
        if first is None:
            first = _bits(out)
        assert _bits(out) == first, f"{name}, run {run}: bits differ from run 0"


def test_runtime_load_installs_the_fix(k):
    from llamanb.cuda import sim_shared
    from numba.cuda.simulator import kernelapi

    assert sim_shared.installed()
    assert sim_shared.install() == []                              # idempotent
    # one buffer per line and launch, as upstream: a second call from the same line shares it
    sh = kernelapi.FakeCUDAShared(0)
    bufs = [sh.array(4, np.float32) for _ in range(2)]
    assert bufs[0] is bufs[1] and sh.array(4, np.float32) is not bufs[0]
