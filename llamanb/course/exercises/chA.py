"""Appendix A exercises: calibrating a two-constant launch model by hand, and how far a held-back
prediction moves with each calibration figure.

    fit_two(calls, seconds) -> (launch_s, bytes_per_s)
        calls = [(launches, bytes), (launches, bytes)], seconds = each call's time less its
        dispatch; the two constants of seconds = launches x launch_s + bytes / bytes_per_s,
        checked against the constants the cases were made from
    elasticity(calls, seconds, held) -> (e0, e1)
        held = (launches, bytes): d log(prediction) / d log(seconds[i]) for the fit above,
        checked against the closed form (the inverse of the 2 x 2 system)
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LLAMA32_1B
from llamanb.npu import cost
from llamanb.course.exercises.check import Case, Exercise


def _upstream() -> tuple:
    """The NPU2 cost model's 8-launch decode calls for Llama-3.2-1B (llamanb.npu.cost):
    o_gemv_ffn (8 launches, ~109 MB of GEMV bytes) and rms_gemv_rope (6, ~12.6 MB), and the LM
    head (8, ~525 MB) held back; the constants near the fitted ones."""
    calls = {c.name: c for c in cost.decode_calls(LLAMA32_1B, 1024, 8) + [cost.lm_head_call(LLAMA32_1B)]}

    def pair(name):
        ls = calls[name].launches
        return len(ls), sum(x.ddr_bytes for x in ls if x.kind == "gemv")
    return (pair("o_gemv_ffn"), pair("rms_gemv_rope")), (76e-6, 37.8e9), pair("lm_head_gemv")


def _cases_raw() -> list[tuple[str, tuple, tuple, tuple]]:
    """(label, calls, (launch_s, bytes_per_s), held): the upstream-like case, then random ones
    from a fixed seed with two calls of different launches-per-byte (a solvable system)."""
    out = [("NPU2 decode calls, 76 us and 37.8 GB/s", *_upstream())]
    rng = np.random.default_rng(14)
    for i in range(6):
        n = [int(x) for x in rng.integers(1, 13, 2)]
        w = [int(x) for x in rng.integers(10**5, 10**9, 2)]
        if n[0] * w[1] == n[1] * w[0]:
            continue
        truth = (float(rng.uniform(5e-6, 2e-4)), float(rng.uniform(5e9, 2e11)))
        held = (int(rng.integers(1, 17)), int(rng.integers(10**5, 2 * 10**9)))
        out.append((f"random case {i + 1}", tuple(zip(n, w)), truth, held))
    return out


def _seconds(calls, truth) -> list[float]:
    t, bw = truth
    return [n * t + w / bw for n, w in calls]


def _fit_cases() -> list[Case]:
    return [Case(label, ([list(c) for c in calls], _seconds(calls, truth)), truth)
            for label, calls, truth, _ in _cases_raw()]


fit_two = Exercise(
    "A.1", "fit_two", _fit_cases, rtol=1e-6, atol=0,
    hint="two equations, two unknowns: n0 t + w0 u = s0 and n1 t + w1 u = s1 with u = 1 / "
         "bytes_per_s; solve for t and u (Cramer's rule or numpy.linalg.solve), return (t, 1 / u)")


def _elasticities(calls, seconds, held) -> tuple[float, float]:
    """Closed form: prediction p = h . A^-1 s, so dp/ds_i = (h . A^-1)_i and the elasticity is
    s_i (h . A^-1)_i / p."""
    A = np.array(calls, dtype=float)
    g = np.array(held, dtype=float) @ np.linalg.inv(A)
    p = float(g @ np.array(seconds))
    return tuple(float(s * gi / p) for s, gi in zip(seconds, g))


def _elasticity_cases() -> list[Case]:
    out = []
    for label, calls, truth, held in _cases_raw():
        s = _seconds(calls, truth)
        out.append(Case(f"{label}, held back {held[0]} launches / {held[1]:,} bytes",
                        ([list(c) for c in calls], s, tuple(held)), _elasticities(calls, s, held)))
    return out


elasticity = Exercise(
    "A.2", "elasticity", _elasticity_cases, rtol=1e-6, atol=1e-9,
    hint="the prediction is linear in the two measured times: p = g0 s0 + g1 s1 with (g0, g1) = "
         "held . A^-1; the elasticity to s_i is s_i g_i / p (it can be negative or above 1)")

EXERCISES = (fit_two, elasticity)
