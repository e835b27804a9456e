"""Chapter 03 exercises: GQA scores with a group axis, and the causal mask of a chunk.

    gqa_scores(q [S, N_h, d], k [T, N_kv, d]) -> [N_kv, G, S, T]   against repeat_kv + matmul
    causal_mask(S, start) -> [S, start + S] float32 (0 / -inf)     against the closed form and
                                                                   llamanb.model.flops.attention_pairs
"""
from __future__ import annotations

import numpy as np

from llamanb.model.flops import attention_pairs
from llamanb.course.exercises.check import Case, Exercise


def _scores_reference(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """transformers' way: repeat every K head G times (query head h reads K head h // G), then
    one matmul per query head, scaled by 1/sqrt(d)."""
    S, Nh, d = q.shape
    T, Nkv, _ = k.shape
    G = Nh // Nkv
    k_rep = np.repeat(k, G, axis=1)                                  # [T, N_h, d]
    s = np.einsum("shd,thd->hst", q.astype(np.float64), k_rep.astype(np.float64)) / np.sqrt(d)
    return s.reshape(Nkv, G, S, T).astype(np.float32)


def _scores_cases() -> list[Case]:
    rng = np.random.default_rng(6)
    cases = []
    for S, T, Nkv, G, d in ((1, 1, 1, 1, 4), (3, 3, 1, 4, 8), (4, 6, 2, 3, 16), (5, 5, 3, 3, 64),
                            (2, 7, 4, 2, 8)):
        q = rng.standard_normal((S, Nkv * G, d)).astype(np.float32)
        k = rng.standard_normal((T, Nkv, d)).astype(np.float32)
        cases.append(Case(f"q [{S}, {Nkv * G}, {d}], k [{T}, {Nkv}, {d}] (G={G})", (q, k),
                          _scores_reference(q, k)))
    return cases


gqa_scores = Exercise(
    "03.1", "gqa_scores", _scores_cases, rtol=1e-4, atol=1e-5,
    hint="query head h belongs to group h // G (a reshape [S, N_h, d] -> [S, N_kv, G, d], not "
         "[S, G, N_kv, d]); contract d with the group's K head; scale by 1/sqrt(d)")


def _mask_reference(S: int, start: int) -> np.ndarray:
    T = start + S
    query_pos = start + np.arange(S)[:, None]                     # [S, 1]
    visible = np.arange(T)[None, :] <= query_pos                  # [S, T]
    assert int(visible.sum()) == attention_pairs(S, start)        # the triangle, counted
    return np.where(visible, np.float32(0), np.float32(-np.inf))


def _mask_cases() -> list[Case]:
    return [Case(f"S={S}, start={start}", (S, start), _mask_reference(S, start))
            for S, start in ((1, 0), (4, 0), (1, 9), (3, 5), (6, 2), (16, 16))]


causal_mask = Exercise(
    "03.2", "causal_mask", _mask_cases,
    hint="query row i sits at position start + i and sees keys 0 .. start + i (start cached keys "
         "plus the chunk's own triangle); the mask is added: 0 where visible, -inf where hidden")

EXERCISES = (gqa_scores, causal_mask)
