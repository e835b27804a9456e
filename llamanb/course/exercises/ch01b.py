"""Chapter 01b exercises: the FLOPs of a prefill and of a decode step.

    prefill_flops(c: LlamaConfig, S) -> int          against llamanb.model.flops.prefill_flops (causal,
                                                     LM head on the last row only)
    decode_flops(c: LlamaConfig, context) -> int     against llamanb.model.flops.decode_flops
"""
from __future__ import annotations

from llamanb.model import flops
from llamanb.model.config import LLAMA3_70B, LLAMA32_1B, SMOLLM2_135M
from llamanb.course.exercises.ch01 import small_configs
from llamanb.course.exercises.check import Case, Exercise


def _flops_cases() -> list[Case]:
    cases = []
    for c, S in ((SMOLLM2_135M, 1), (SMOLLM2_135M, 64), (LLAMA32_1B, 2048), (LLAMA3_70B, 128),
                 *((c, S) for c, S in zip(small_configs(3, 3), (1, 7, 33)))):
        cases.append(Case(f"{c.name}, S={S}", (c, S), flops.total(flops.prefill_flops(c, S))))
    return cases


prefill_flops = Exercise(
    "01b.1", "prefill_flops", _flops_cases,
    hint="2 FLOPs per multiply-add; the projections are S-row matrix products; causal attention "
         "has S(S+1)/2 (query, key) pairs per head, for the scores and again for the values; the "
         "LM head runs on the last row only")


def _decode_cases() -> list[Case]:
    cases = []
    for c, ctx in ((SMOLLM2_135M, 0), (SMOLLM2_135M, 63), (LLAMA32_1B, 2047), (LLAMA3_70B, 8191),
                   *((c, ctx) for c, ctx in zip(small_configs(4, 3), (0, 5, 100)))):
        cases.append(Case(f"{c.name}, context={ctx}", (c, ctx),
                          flops.total(flops.decode_flops(c, ctx))))
    return cases


decode_flops = Exercise(
    "01b.2", "decode_flops", _decode_cases,
    hint="every projection and the LM head on one row (2 FLOPs per weight they hold); the new "
         "query attends to context + 1 keys, itself included, once for the scores and once for "
         "the values, in every query head")

EXERCISES = (prefill_flops, decode_flops)
