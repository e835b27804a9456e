"""Chapter 03b exercises: padding with the real length carried, and a sum trailing zeros cannot change.

    pad_prompt(ids, length, pad_id) -> (padded [length] int64, n)    against llamanb.engine.engine.pad_to
    in_order_sum(xs [n] float32) -> float32                         bit for bit against a
                                                                    left-to-right accumulation
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.engine import pad_to
from llamanb.course.exercises.check import Case, Exercise


def _pad_cases() -> list[Case]:
    eos = 2
    cases = []
    for ids, length in (([5, 6, 7], 8), ([1, 9, 9, 2, 4, 2], 16),        # EOS (2) inside the prompt
                        ([2, 2], 4), ([3] * 12, 12), ([7], 1), ([4, 2, 8, 2, 2], 64)):
        cases.append(Case(f"{len(ids)} ids (EOS inside: {eos in ids}), padded to {length}",
                          (list(ids), length, eos), pad_to(ids, length, eos)))
    return cases


pad_prompt = Exercise(
    "03b.1", "pad_prompt", _pad_cases,
    hint="append length - len(ids) copies of pad_id and return len(ids) beside the array; never "
         "recover the length by counting the non-pad ids (a chat prompt holds EOS tokens itself)")


def _left_to_right(xs: np.ndarray) -> np.float32:
    """np.add.accumulate adds each term to the running total of the ones before it, in order."""
    xs = np.asarray(xs, np.float32)
    return np.float32(np.add.accumulate(xs, dtype=np.float32)[-1]) if xs.size else np.float32(0)


def _sum_cases() -> list[Case]:
    rng = np.random.default_rng(11)
    cases = [Case("[1e8, 1, -1e8, 1] (1e8 + 1 rounds back to 1e8)",
                  (np.array([1e8, 1, -1e8, 1], np.float32),), np.float32(1.0)),
             Case("1e8 then fifteen 1s (each 1 alone rounds away: 1e8 + 1 == 1e8 in float32)",
                  (np.array([1e8] + [1] * 15, np.float32),), np.float32(1e8)),
             Case("[1, 1e8, -1e8] and 13 zeros",
                  (np.array([1, 1e8, -1e8] + [0] * 13, np.float32),), np.float32(0.0))]
    for n in (1, 7, 40, 300):
        xs = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
        cases.append(Case(f"{n} terms of mixed magnitude", (xs,), _left_to_right(xs)))
    xs = rng.standard_normal(33).astype(np.float32)
    cases.append(Case("33 terms and 95 zeros", (np.concatenate([xs, np.zeros(95, np.float32)]),),
                      _left_to_right(xs)))
    assert cases[0].expected == _left_to_right(cases[0].args[0])      # the closed forms above
    assert all(c.expected == _left_to_right(c.args[0]) for c in cases[1:3])
    return cases


in_order_sum = Exercise(
    "03b.2", "in_order_sum", _sum_cases, rtol=0, atol=0,
    hint="a float32 running total, one term at a time from the left (total = total + x); np.sum "
         "adds in a pairwise, unrolled order, and a float64 total rounds differently (two float32 "
         "values can print alike and still differ in the last bit)")

EXERCISES = (pad_prompt, in_order_sum)
