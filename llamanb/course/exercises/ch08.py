"""Chapter 08 exercises: a TCP einsum from named axes -- its subscripts, its FLOPs, one by hand.

    subscripts(arg_axes, out_axes) -> str        against Op.subscripts, for every einsum of the
                                                 prefill, decode and extend programs
    einsum_flops(arg_axes, out_axes, dims) -> int    against Op.flops
    rope_q(Q2 [B, s_in, h_q, d_k', f], t_rope [s_in, d_k', f, r]) -> [B, h_q, s_in, d_k', r]
                                                 against np.einsum(op.subscripts) of rope_q
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LLAMA3_70B, SMOLLM2_135M
from llamanb.model.rope import inv_freq
from llamanb.model.rope_tables import rotation_table
from llamanb.tcp.program import PHASES, dims, program
from llamanb.course.exercises.check import Case, Exercise


def _einsums(cfg=SMOLLM2_135M):
    seen = {}
    for phase in PHASES:
        for op, _ in program(cfg, phase).ops():
            if op.kind == "einsum":
                seen.setdefault((op.arg_axes, op.out_axes), (phase, op))
    return list(seen.values())


def _sub_cases() -> list[Case]:
    return [Case(f"{phase} {op.name}: {op.formula()}", (list(map(list, op.arg_axes)), list(op.out_axes)),
                 op.subscripts) for phase, op in _einsums()]


subscripts = Exercise(
    "08.1", "subscripts", _sub_cases,
    hint="map every axis NAME to its letter with llamanb.tcp.ops.AXES (s_in -> i, s -> j, d_k' -> p: "
         "first letters collide); operands joined by ',', then '->' and the result's letters")


def _flops_cases() -> list[Case]:
    cases = []
    for cfg, B, s_in, s in ((SMOLLM2_135M, 1, 7, 7), (SMOLLM2_135M, 4, 1, 100),
                            (LLAMA3_70B, 2, 128, 640)):
        d = dims(cfg, B, s_in, s)
        for phase, op in _einsums(cfg):
            cases.append(Case(f"{cfg.name} B={B} s_in={s_in} s={s}: {op.formula()}",
                              (list(map(list, op.arg_axes)), list(op.out_axes), d), op.flops(d)))
    return cases


einsum_flops = Exercise(
    "08.2", "einsum_flops", _flops_cases,
    hint="the Contraction Engine walks the product of EVERY axis that occurs (result axes and the "
         "reduced ones), each axis once even if two operands share it; 2 FLOPs per point")


def _rope_cases() -> list[Case]:
    op = next(o for o in program(SMOLLM2_135M, "prefill").layer if o.name == "rope_q")
    rng = np.random.default_rng(14)
    cases = []
    for B, s_in, h, d in ((1, 1, 1, 4), (1, 3, 2, 8), (2, 4, 3, 16), (1, 5, 9, 64)):
        Q2 = rng.standard_normal((B, s_in, h, d // 2, 2)).astype(np.float32)
        table = rotation_table(np.arange(s_in) + 3, inv_freq(d, 1e4))
        cases.append(Case(f"Q2 [{B}, {s_in}, {h}, {d // 2}, 2]", (Q2, table),
                          np.einsum(op.subscripts, Q2, table)))
    return cases


rope_q = Exercise(
    "08.3", "rope_q", _rope_cases, rtol=1e-5, atol=1e-5,
    hint="contract the pair member f (the table is stored [f, r] = [in, out]); the result puts the "
         "heads before s_in, [B, h_q, s_in, d_k', r] -- an einsum may write its axes in any order")

EXERCISES = (subscripts, einsum_flops, rope_q)
