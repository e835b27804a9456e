"""Chapter 02 exercises: RoPE frequencies, the [S, d/2, 2, 2] rotation table, and its einsum.

    inv_freq(d, theta) -> [d/2] float32                        against llamanb.model.rope.inv_freq
    rotation_table(positions [S], freqs [d/2]) -> [S, d/2, 2, 2]   against llamanb.model.rope_tables
    apply_table(x [S, H, d] interleaved, table) -> [S, H, d]   against apply_rotation_table
"""
from __future__ import annotations

import numpy as np

from llamanb.model.rope import inv_freq as _inv_freq
from llamanb.model.rope_tables import apply_rotation_table, rotation_table as _rotation_table
from llamanb.course.exercises.check import Case, Exercise


def _freq_cases() -> list[Case]:
    return [Case(f"d={d}, theta={theta:g}", (d, theta), _inv_freq(d, theta))
            for d, theta in ((2, 1e4), (8, 1e4), (64, 1e5), (64, 5e5), (128, 5e5), (16, 10.0))]


inv_freq = Exercise(
    "02.1", "inv_freq", _freq_cases, rtol=1e-6, atol=0,
    hint="frequency i (i = 0 .. d/2-1) is theta^(-2i/d): the exponents step by 2 over d, and "
         "there are d/2 of them")


def _table_cases() -> list[Case]:
    rng = np.random.default_rng(4)
    cases = []
    for positions, d, theta in (([0, 1, 2], 4, 1e4), (list(range(6)), 8, 1e4),
                                ([5, 17, 1000], 64, 1e5), (rng.integers(0, 8192, 5).tolist(), 16, 5e5)):
        freqs = _inv_freq(d, theta)
        pos = np.array(positions)
        cases.append(Case(f"positions {positions}, d={d}", (pos, freqs),
                          _rotation_table(pos, freqs)))
    return cases


rotation_table = Exercise(
    "02.2", "rotation_table", _table_cases, rtol=1e-5, atol=2e-6,
    hint="angle a = position * freq, shape [S, d/2]; the 2x2 is stored [in, out]: "
         "[[cos a, sin a], [-sin a, cos a]] (the transpose of the textbook rotation matrix)")


def _apply_cases() -> list[Case]:
    rng = np.random.default_rng(5)
    cases = []
    for S, H, d in ((1, 1, 2), (3, 2, 8), (5, 3, 64), (4, 9, 16)):
        x = rng.standard_normal((S, H, d)).astype(np.float32)
        table = _rotation_table(np.arange(S) * 7, _inv_freq(d, 1e4))
        cases.append(Case(f"x [{S}, {H}, {d}]", (x, table), apply_rotation_table(x, table)))
    return cases


apply_table = Exercise(
    "02.3", "apply_table", _apply_cases, rtol=1e-5, atol=1e-5,
    hint="the pairs are (x_2i, x_2i+1): reshape to [S, H, d/2, 2], not [S, H, 2, d/2] (that pairs "
         "i with i + d/2, the half-split layout); the einsum contracts the pair member f of the table's [f, o]")

EXERCISES = (inv_freq, rotation_table, apply_table)
