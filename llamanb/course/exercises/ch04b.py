"""Chapter 04b exercises: the distributions a sampler draws from.

    top_p_probs(logits [V], top_p) -> [V] float64                against llamanb.engine.generate.next_token_probs
    top_k_probs(logits [V], temperature, k) -> [V] float64       the same, with temperature and top-k
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.sampling import SamplingParams, next_token_probs
from llamanb.course.exercises.check import Case, Exercise


def _top_p_cases() -> list[Case]:
    rng = np.random.default_rng(9)
    cases = []
    for V, p, scale in ((5, 0.5, 1.0), (10, 0.9, 2.0), (50, 0.3, 3.0), (8, 1.0, 1.0), (6, 0.01, 1.0)):
        logits = (rng.standard_normal(V) * scale).astype(np.float32)
        cases.append(Case(f"V={V}, top_p={p}", (logits, p),
                          next_token_probs(logits, SamplingParams(temperature=1.0, top_p=p))))
    # a case on the boundary: the two most likely tokens hold exactly 0.75 of the mass
    logits = np.log(np.array([0.5, 0.25, 0.125, 0.125])).astype(np.float64)
    cases.append(Case("probabilities [0.5, 0.25, 0.125, 0.125], top_p=0.6", (logits, 0.6),
                      next_token_probs(logits, SamplingParams(temperature=1.0, top_p=0.6))))
    return cases


def _softmax_steps(case: Case) -> int:
    """Roundings of a softmax computed in the logits' own precision: z / T (1) and z - max(z) (its
    error, at most u |z / T - max|, comes out of exp as a relative error of that size), exp (1), the
    sum over V (V - 1) and divide (1), then a renormalising sum (V) and divide (1): relative error
    <= (max|z / T - max| + 2 V + 4) u for every probability (check.py's precision note)."""
    z = np.asarray(case.args[0], np.float64)
    t = case.args[1] if len(case.args) == 3 else 1.0          # top_k_probs(logits, temperature, k)
    return int(np.ceil(np.ptp(z) / t)) + 2 * z.size + 4


top_p_probs = Exercise(
    "04b.1", "top_p_probs", _top_p_cases, rtol=1e-9, atol=1e-12, steps=_softmax_steps,
    hint="softmax, sort descending, keep the smallest prefix whose mass reaches top_p (the token "
         "that crosses top_p is kept), zero the rest, renormalise")


def _top_k_cases() -> list[Case]:
    rng = np.random.default_rng(10)
    cases = []
    for V, T, k, scale in ((6, 1.0, 2, 1.0), (10, 0.5, 3, 2.0), (50, 1.5, 10, 3.0), (8, 0.7, 8, 1.0),
                           (20, 2.0, 1, 1.0), (12, 0.25, 5, 0.5)):
        logits = (rng.standard_normal(V) * scale).astype(np.float32)
        assert np.unique(logits).size == V                  # no ties at the k-th logit
        cases.append(Case(f"V={V}, temperature={T}, k={k}", (logits, T, k),
                          next_token_probs(logits, SamplingParams(temperature=T, top_k=k))))
    return cases


top_k_probs = Exercise(
    "04b.2", "top_k_probs", _top_k_cases, rtol=1e-9, atol=1e-12, steps=_softmax_steps,
    hint="divide the logits by the temperature, keep the k largest (the others get probability 0), "
         "then the softmax over the survivors -- it sums to 1 by itself")

EXERCISES = (top_p_probs, top_k_probs)
