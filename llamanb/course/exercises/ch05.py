"""Chapter 05 exercises: the two pieces of arithmetic every kernel of the chapter leans on.

    bf16_round(x float32 array) -> float32 array   round to the nearest bfloat16, ties to even,
                                                   with integer operations on the float32 bits;
                                                   against ml_dtypes' bfloat16 (llamanb.model.numerics.to_bf16)
    merge_partials((m1, l1, acc1), (m2, l2, acc2)) -> (m, l, acc)
                                                   FlashAttention's merge of two partial softmaxes;
                                                   against the partials of the whole key range,
                                                   computed in float64

(The GEMV tile-plan exercises are chapter 05b's: `ch05b`.)
"""
from __future__ import annotations

import numpy as np

from llamanb.course.exercises.check import Case, Exercise
from llamanb.model.numerics import to_bf16


def _round_cases() -> list[Case]:
    rng = np.random.default_rng(5)
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2**-130 + 2**-138], np.float32)  # halfway
    cases = [Case("8 values exactly halfway between two bf16 numbers (ties to even)",
                  (np.concatenate([ties, ties * 4]),), None),
             Case("1,000 normal values", (rng.standard_normal(1000).astype(np.float32),), None),
             Case("values from 1e-30 to 1e30, both signs",
                  ((np.logspace(-30, 30, 61) * np.resize([1, -1], 61)).astype(np.float32),), None),
             Case("0, -0, the largest float32, inf, -inf",
                  (np.array([0.0, -0.0, np.finfo(np.float32).max, np.inf, -np.inf], np.float32),), None),
             Case("a [4, 6] matrix", (rng.standard_normal((4, 6)).astype(np.float32) * 100,), None)]
    for c in cases:
        c.expected = to_bf16(c.args[0])
    return cases


bf16_round = Exercise(
    "05.1", "bf16_round", _round_cases, rtol=0, atol=0,
    hint="view the float32 as uint32 bits; add 0x7FFF plus the lowest kept bit (bit 16) so that a "
         "tie rounds to even, clear the low 16 bits, view back as float32 (the largest float32 "
         "rounds up to inf, as ml_dtypes does)")


def _partials(s: np.ndarray, v: np.ndarray):
    m = s.max(axis=1, keepdims=True)
    e = np.exp(s - m)
    return m, e.sum(axis=1, keepdims=True), e @ v


def _merge_cases() -> list[Case]:
    rng = np.random.default_rng(9)
    cases = []
    for rows, keys, split, d, scale in ((1, 2, 1, 1, 1.0), (4, 10, 6, 5, 3.0), (3, 64, 32, 8, 10.0),
                                        (2, 9, 1, 4, 1.0), (5, 40, 37, 16, 30.0)):
        s, v = rng.standard_normal((rows, keys)) * scale, rng.standard_normal((keys, d))
        whole = _partials(s, v)                                        # the answer, in float64
        cases.append(Case(f"{rows} rows, {keys} keys split {split} + {keys - split}, d={d}, "
                          f"scores x{scale:g}", (_partials(s[:, :split], v[:split]),
                                                 _partials(s[:, split:], v[split:])), whole))
    return cases


merge_partials = Exercise(
    "05.2", "merge_partials", _merge_cases, rtol=1e-9, atol=1e-12,
    hint="m = max(m1, m2); each side's l and acc were summed relative to its own max, so rescale "
         "them by exp(m_i - m) before adding: l = l1 e^(m1-m) + l2 e^(m2-m), acc likewise")

EXERCISES = (bf16_round, merge_partials)
