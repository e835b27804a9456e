"""The NPU's external kernels: what each computes (a numpy model) and the real C++ (a host build).

    symbol                object          model / host signature (float32 arrays of bf16 values)
    rope_halfsplit_bf16   rope.o          (x [rows, dim], lut [rows, dim]) -> y [rows, dim]
                                          lut = cos | sin of each row's angles, [rows, dim/2] each
    silu_and_mul_bf16     silu_and_mul.o  (gate [...], up [...]) -> silu(gate) * up   [...]
    matvec_bf16           mv.o            (a [m, k], x [k]) -> a @ x   [m]

The contract (kernels/bf16.h): bfloat16 storage, float32 arithmetic one operation at a time, one
rounding to bfloat16 (nearest, ties to even) per result. Inputs are rounded to bfloat16 on entry,
as writing them into a bf16 buffer would. The models build on the package's shared math:

  * rope: llamanb.model.rope.rope_inplace with tables (cos|cos) and (-sin|sin). Every product of two
    bfloat16 numbers is exact in float32, so model and C++ round the same single sum: bit-exact.
  * silu_and_mul: llamanb.model.ops.silu_mul's formula g / (1 + e^-g) * u, with numpy's float32 exp
    replaced by `exp_f32`, the operation-for-operation twin of kernels/exp_f32.h: bit-exact.
  * matvec: float32 `a @ x` (numpy's BLAS). The C++ sums in 16 lanes and then a tree, BLAS in its
    own blocks; the float32 sums differ in the last bits, so results agree to one bfloat16 ulp.

`model(symbol)` returns the numpy function, `host_kernel(symbol)` the same function running the
C++ built for this machine (llamanb.platform.cxx_build), or None without a compiler; `kernel(symbol)`
picks the host build when there is one and says which it picked.
"""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import Callable

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.numerics import bf16_bits, from_bf16_bits, to_bf16
from llamanb.model.rope import rope_inplace
from llamanb.platform import cxx_build as hostbuild

SOURCES = {"rope_halfsplit_bf16": "rope_halfsplit.cc", "silu_and_mul_bf16": "silu_and_mul.cc",
           "matvec_bf16": "mv.cc"}
OBJECTS = {"rope_halfsplit_bf16": "rope.o", "silu_and_mul_bf16": "silu_and_mul.o",
           "matvec_bf16": "mv.o"}          # the `link_with` of each declaration in the MLIR


# ---- float32 e^x, the twin of kernels/exp_f32.h ----------------------------------------------
def _f(hex_literal: str) -> np.float32:
    return np.float32(float.fromhex(hex_literal))


_OVERFLOW, _UNDERFLOW = _f("0x1.62e42ep+6"), np.float32(-104.0)
_LOG2E, _ROUND = _f("0x1.715476p+0"), _f("0x1.8p+23")
_LN2_HI, _LN2_LO = _f("0x1.63p-1"), _f("-0x1.bd0106p-13")
_TAYLOR = [_f(h) for h in ("0x1.a01a02p-13", "0x1.6c16c2p-10", "0x1.111112p-7", "0x1.555556p-5",
                           "0x1.555556p-3", "0x1.0p-1", "0x1.0p+0", "0x1.0p+0")]   # 1/7! .. 1/0!


def _pow2(k: np.ndarray) -> np.ndarray:
    """2^k for -126 <= k <= 127, from the exponent bits (as pow2i in exp_f32.h)."""
    return ((k.astype(np.int32) + 127) << 23).astype(np.uint32).view(np.float32)


def _reduce(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x = k ln2 + r: k (nearest integer, ties to even) and the Taylor polynomial p(r) ~ e^r."""
    kf = x * _LOG2E
    kf = kf + _ROUND
    kf = kf - _ROUND
    r = x - kf * _LN2_HI
    r = r - kf * _LN2_LO
    p = np.full_like(r, _TAYLOR[0])
    for c in _TAYLOR[1:]:
        p = p * r
        p = p + c
    return kf.astype(np.int32), p


def exp_f32(x: np.ndarray) -> np.ndarray:
    """e^x in float32 by the same operations, in the same order, as kernels/exp_f32.h."""
    x = np.asarray(x, dtype=np.float32)
    inside = (x <= _OVERFLOW) & (x >= _UNDERFLOW)                       # False for NaN
    if inside.all():             # the common case: no clamping, no NaN (same operations below)
        k, p = _reduce(x)
        if k.size == 0 or (k.min() >= -126 and k.max() <= 127):
            with np.errstate(over="ignore", under="ignore"):
                return p * _pow2(k)              # what np.where below selects when k is in range
    k, p = _reduce(np.where(inside, x, np.float32(0)))                  # NaN -> 0 here
    with np.errstate(over="ignore", under="ignore"):     # the branches np.where discards
        scaled = p * _pow2(np.clip(k, -126, 127))
        high = (p * _pow2(np.full_like(k, 127))) * np.float32(2.0)
        low = (p * _pow2(np.clip(k + 64, -126, 127))) * _pow2(np.full_like(k, -64))
    out = np.where(k > 127, high, np.where(k < -126, low, scaled))
    out = np.where(x > _OVERFLOW, np.float32(np.inf), out)
    out = np.where(x < _UNDERFLOW, np.float32(0), out)
    return np.where(np.isnan(x), x, out).astype(np.float32)


# ---- argument checks shared by the models and the host builds --------------------------------
# Arrays already checked to hold bfloat16 values: id -> weak reference (the id alone could be reused
# by a later array). Only read-only float32 arrays that own their memory are recorded, so their
# values cannot change while recorded; a recorded array made writeable again is checked again.
_VERIFIED: dict[int, weakref.ref] = {}


def _is_bf16(a: np.ndarray) -> bool:
    """True when every float32 value of `a` (C-contiguous) has its low 16 bits zero."""
    return bool(a.size) and not int(np.bitwise_or.reduce(a.reshape(-1).view(np.uint32))) & 0xFFFF


def mark_bf16(a) -> bool:
    """Check `a` once and, if it holds only bfloat16 values, let later kernel calls skip the check.

    For static buffers (weights written once): `a` must be a read-only float32 C-contiguous array
    that owns its memory. Returns whether it was recorded (False: not such an array, or values
    that are not bfloat16 -- those are still rounded on every call, as before)."""
    _VERIFIED.pop(id(a), None)                 # a record from an earlier freeze no longer holds
    if not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous
            and a.flags.owndata and not a.flags.writeable and 0 < a.size < 2**31):
        return False
    if not _is_bf16(a):
        return False
    key = id(a)
    _VERIFIED[key] = weakref.ref(a, lambda _r, key=key: _VERIFIED.pop(key, None))
    return True


def is_marked_bf16(a) -> bool:
    """Whether `a` is recorded by mark_bf16 and still read-only (its check is skipped)."""
    r = _VERIFIED.get(id(a))
    return r is not None and r() is a and not a.flags.writeable


def _bf16_input(name: str, a) -> np.ndarray:
    r = _VERIFIED.get(id(a))
    if r is not None and r() is a and not a.flags.writeable:
        return a                                   # a static buffer checked once (mark_bf16)
    a = np.asarray(a)
    if a.dtype == np.float32:
        if a.size >= 2**31:
            raise LlamanbError(f"{name}: {a.size} elements do not fit the kernels' int32 sizes")
        if a.flags.c_contiguous and _is_bf16(a):
            return a        # low 16 bits all zero: already bfloat16 values, no rounding pass
        return to_bf16(a)
    if a.dtype.name != "bfloat16":
        raise LlamanbError(f"{name}: expected float32 (bfloat16 values) or bfloat16, got {a.dtype}")
    if a.size >= 2**31:
        raise LlamanbError(f"{name}: {a.size} elements do not fit the kernels' int32 sizes")
    return a.astype(np.float32)                                    # exact


def _rope_args(x, lut):
    x, lut = _bf16_input("rope x", x), _bf16_input("rope lut", lut)
    if x.ndim != 2 or x.shape[1] % 2 or x.shape[1] == 0:
        raise LlamanbError(f"rope x: expected [rows, dim] with dim even, got shape {x.shape}")
    if lut.shape != x.shape:
        raise LlamanbError(f"rope lut: expected shape {x.shape} (cos | sin per row), got {lut.shape}")
    return x, lut


def _silu_args(gate, up):
    gate, up = _bf16_input("silu_and_mul gate", gate), _bf16_input("silu_and_mul up", up)
    if gate.shape != up.shape:
        raise LlamanbError(f"silu_and_mul: gate {gate.shape} and up {up.shape} differ in shape")
    return gate, up


def _matvec_args(a, x):
    a, x = _bf16_input("matvec a", a), _bf16_input("matvec x", x)
    if a.ndim != 2 or x.ndim != 1 or a.shape[1] != x.shape[0]:
        raise LlamanbError(f"matvec: expected a [m, k] and x [k], got {a.shape} and {x.shape}")
    return a, x


# ---- the numpy models -----------------------------------------------------------------------
def _rope_model(x, lut):
    x, lut = _rope_args(x, lut)                                    # [rows, dim]
    h = x.shape[1] // 2
    cos, sin = lut[:, :h], lut[:, h:]                              # [rows, dim/2]
    y = x[:, None, :].copy()                                       # [rows, 1 head, dim]
    rope_inplace(y, np.concatenate([cos, cos], -1), np.concatenate([-sin, sin], -1))
    return to_bf16(y[:, 0, :])


def _silu_and_mul_model(gate, up):
    gate, up = _silu_args(gate, up)
    den = exp_f32(np.negative(gate))           # ops.silu_mul's steps, with exp_f32 for np.exp
    den += np.float32(1.0)
    return to_bf16(gate / den * up)


def _matvec_model(a, x):
    a, x = _matvec_args(a, x)
    return to_bf16(a @ x)                                          # [m], float32 accumulation


_MODELS = {"rope_halfsplit_bf16": _rope_model, "silu_and_mul_bf16": _silu_and_mul_model,
           "matvec_bf16": _matvec_model}


def _known(symbol: str) -> str:
    if symbol not in _MODELS:
        raise LlamanbError(f"unknown external kernel {symbol!r}; known: {', '.join(_MODELS)}")
    return symbol


def model(symbol: str) -> Callable[..., np.ndarray]:
    """The numpy model of an external kernel (signatures in the module docstring)."""
    return _MODELS[_known(symbol)]


# ---- the host builds, called through ctypes -------------------------------------------------
_U16P, _I32 = ctypes.POINTER(ctypes.c_uint16), ctypes.c_int32


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(_U16P)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bf16_bits(a))


def _host_call(lib: ctypes.CDLL, symbol: str) -> Callable[..., np.ndarray]:
    fn = getattr(lib, symbol)
    fn.restype = None
    if symbol == "rope_halfsplit_bf16":
        fn.argtypes = [_U16P, _U16P, _U16P, _I32, _I32]

        def run(x, lut):
            x, lut = _rope_args(x, lut)
            xb, lb, yb = _bits(x), _bits(lut), np.empty(x.shape, np.uint16)
            fn(_ptr(xb), _ptr(lb), _ptr(yb), x.shape[0], x.shape[1])
            return from_bf16_bits(yb)
    elif symbol == "silu_and_mul_bf16":
        fn.argtypes = [_U16P, _U16P, _U16P, _I32]

        def run(gate, up):
            gate, up = _silu_args(gate, up)
            gb, ub, ob = _bits(gate), _bits(up), np.empty(gate.shape, np.uint16)
            fn(_ptr(gb), _ptr(ub), _ptr(ob), gate.size)
            return from_bf16_bits(ob)
    else:
        fn.argtypes = [_U16P, _U16P, _U16P, _I32, _I32]

        def run(a, x):
            a, x = _matvec_args(a, x)
            ab, xb, yb = _bits(a), _bits(x), np.empty(a.shape[0], np.uint16)
            fn(_ptr(ab), _ptr(xb), _ptr(yb), a.shape[0], a.shape[1])
            return from_bf16_bits(yb)
    run.__name__ = run.__qualname__ = f"host_{symbol}"
    return run


def host_kernel(symbol: str) -> Callable[..., np.ndarray] | None:
    """The C++ kernel built for this machine with the model's signature, or None when there is
    no host build (`hostbuild.reason()` says why)."""
    _known(symbol)
    lib = hostbuild.load()
    return None if lib is None else _host_call(lib, symbol)


@dataclass(frozen=True)
class Kernel:
    fn: Callable[..., np.ndarray]
    how: str            # "host build (g++ ...)" or "numpy model (...why...)"


def kernel(symbol: str) -> Kernel:
    """The host build when there is one, else the numpy model -- and which one it is, in words."""
    fn = host_kernel(symbol)
    if fn is not None:
        built = hostbuild.build()
        return Kernel(fn, f"host build of kernels/{SOURCES[symbol]} ({built.compiler})")
    return Kernel(model(symbol), f"numpy model of {symbol} ({hostbuild.reason()})")
