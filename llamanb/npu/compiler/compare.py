"""Comparing an emulated NPU kernel with its numpy model and the numpy engine, in bf16 ulps.

    out, ref = run_kernel(spec, *inputs)     # the emulated NPU2 and the spec's numpy model
    within(ulps(out[0], ref[0]), 0, "rmsnorm vs model")   # asserted, and recorded in MEASURED
    scaled(out[0], engine_out, "q vs engine")             # sums of products: ulps of the output

Chapter 05 runs every kernel of layer 0 through these and prints MEASURED at the end.
"""
from __future__ import annotations

import numpy as np

MEASURED: list = []      # (what, measured ulps, asserted bound)


def ulps(x, y) -> float:
    """Largest distance between x and y in bf16 ulps of the larger magnitude."""
    big = np.maximum(np.abs(x), np.abs(y)).astype(np.float64)
    gap = np.exp2(np.floor(np.log2(np.where(big > 0, big, 1.0))) - 7)
    return float((np.abs(x.astype(np.float64) - y) / gap).max())


def within(u: float, limit: float = 1, what: str = "") -> str:
    """A measured ulp distance, asserted against a bound derived from it. Measured: 0 where both
    sides do the same float32 arithmetic, at most 1 where they sum in another order; the bound adds
    the one ulp by which another BLAS's summation order may move a bf16 result, so it holds on
    every machine. The exact measured value is recorded in MEASURED."""
    assert u <= limit, u
    MEASURED.append((what, u, limit))
    return "0 ulp (identical)" if u == 0 and limit == 0 else f"<= {limit} ulp"


def scaled(x, y, what: str = "") -> str:
    """For sums of products: the largest difference in ulps of the largest output. Where terms
    cancel, a small result carries the float32 rounding of the large terms, so its own ulp is
    the wrong ruler; the output's scale is the right one."""
    gap = np.exp2(np.floor(np.log2(np.abs(y).max())) - 7)
    return within(float(np.abs(x.astype(np.float64) - y).max() / gap), 1, what + " (output scale)")


def run_kernel(spec, *inputs):
    """Run spec on the emulated NPU2 and with its numpy model; (npu outputs, model outputs)."""
    from llamanb.npu.compiler.emulator import run

    arrays = [np.ascontiguousarray(x, np.float32) for x in inputs]
    arrays += [np.zeros(a.shape, np.float32) for a in spec.args[len(inputs):]]
    ref = [x.copy() for x in arrays]
    run(spec, *arrays)
    spec.model(*ref)
    return arrays[len(inputs):], ref[len(inputs):]
