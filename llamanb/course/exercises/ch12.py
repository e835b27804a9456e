"""Chapter 12 exercises: where a key lives in the transposed cache, the launch grid of the tiled
cache fill, and one length-masked softmax row.

    kt_offset(slot, head, c, j, n_kv, d, S) -> int
        flat index of key j's dimension c (K/V head `head`, cache slot `slot`) in
        kt [slots, N_kv, d, S]; checked against numpy's ravel_multi_index
    fill_grid(seg_lengths, n_kv, d, tile) -> ((gx, gy, gz), (bx, by))
        the launch of fill_kv for a step's segments; checked against llamanb.cuda.launch.fill_kv
    masked_softmax_row(scores, length) -> [n] float64
        softmax of scores[:length], zeros after it; checked against llamanb.model.ops.softmax_ in float64
"""
from __future__ import annotations

import numpy as np

from llamanb.cuda import launch
from llamanb.model.ops import softmax_
from llamanb.course.exercises.check import Case, Exercise


def _kt_cases() -> list[Case]:
    rng = np.random.default_rng(121)
    cases = []
    for slots, n_kv, d, S in ((1, 1, 4, 8), (3, 2, 16, 32), (8, 3, 64, 2048), (2, 8, 128, 4096)):
        for _ in range(3):
            slot, head = int(rng.integers(slots)), int(rng.integers(n_kv))
            c, j = int(rng.integers(d)), int(rng.integers(S))
            want = int(np.ravel_multi_index((slot, head, c, j), (slots, n_kv, d, S)))
            cases.append(Case(f"kt [{slots}, {n_kv}, {d}, {S}], slot {slot} head {head} c {c} j {j}",
                              (slot, head, c, j, n_kv, d, S), want))
    return cases


kt_offset = Exercise(
    "12.1", "kt_offset", _kt_cases, rtol=0, atol=0,
    hint="row-major [slots, N_kv, d, S]: the last index, the key position j, moves by 1 -- which is "
         "why consecutive threads taking consecutive j read consecutive floats; c moves by S")


def _grid_cases() -> list[Case]:
    cases = []
    for segs, n_kv, d, tile in (([1], 1, 64, 16), ([5], 3, 64, 16), ([128, 1, 1], 3, 64, 16),
                                ([17, 16], 8, 128, 16), ([1, 40, 3], 3, 64, 16), ([3, 1], 1, 16, 4),
                                ([9], 2, 6, 4)):
        cases.append(Case(f"segments {segs}, N_kv {n_kv}, d {d}, tile {tile}",
                          (segs, n_kv, d, tile), launch.fill_kv(segs, n_kv, d, tile)))
    return cases


def _same_launch(expected, got) -> str | None:
    try:
        got = (tuple(int(g) for g in got[0]), tuple(int(b) for b in got[1]))
    except (TypeError, ValueError, IndexError):
        return f"expected ((gx, gy, gz), (bx, by)), got {got!r:.60}"
    return None if got == expected else f"expected {expected}, got {got}"


fill_grid = Exercise(
    "12.2", "fill_grid", _grid_cases, compare=_same_launch,
    hint="a T x T block covers T dimensions (x) by T rows (y); y must cover the LONGEST segment "
         "(blocks past a shorter one return at once); z has one slice per segment AND K/V head")


def _softmax_cases() -> list[Case]:
    rng = np.random.default_rng(122)
    cases = []
    for n, length in ((8, 8), (8, 3), (12, 1), (40, 33), (5, 0), (64, 64)):
        s = (rng.standard_normal(n) * 4).astype(np.float32)
        s[length:] = rng.standard_normal(n - length) * 50          # garbage past the length
        want = np.zeros(n)
        if length:
            want[:length] = softmax_(s[:length].astype(np.float64), axis=-1)
        cases.append(Case(f"n={n}, length={length}", (s, length), want))
    return cases


masked_softmax_row = Exercise(
    "12.3", "masked_softmax_row", _softmax_cases, rtol=1e-12, atol=1e-15,
    hint="only scores[:length] take part (the rest is stale cache space): subtract their maximum, "
         "exponentiate, divide by the sum; zeros after `length`, and a length-0 row is all zeros")

EXERCISES = (kt_offset, fill_grid, masked_softmax_row)
