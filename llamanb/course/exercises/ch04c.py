"""Chapter 04c exercises: what the KV cache costs in bytes, and how many sequences fit beside the weights.

    kv_bytes_per_token(c, bytes_per_element) -> int     against LlamaConfig.kv_bytes_per_token
    max_batch(c, seq, memory_bytes) -> int              against LlamaConfig.weight_bytes and kv_bytes
"""
from __future__ import annotations

from llamanb.course.exercises.ch01 import small_configs
from llamanb.course.exercises.check import Case, Exercise
from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, LLAMA32_1B, SMOLLM2_135M

_FMT = {2: "bf16", 4: "fp32"}
GiB = 2**30


def _bytes_cases() -> list[Case]:
    cases = []
    for c in (SMOLLM2_135M, LLAMA32_1B, LLAMA31_8B, LLAMA3_70B, *small_configs(8, 3)):
        for b in (2, 4):
            cases.append(Case(f"{c.name} (N_h={c.n_heads}, N_kv={c.n_kv_heads}), {b} bytes per number",
                              (c, b), int(c.kv_bytes_per_token(_FMT[b]))))
    return cases


kv_bytes_per_token = Exercise(
    "04c.1", "kv_bytes_per_token", _bytes_cases,
    hint="one key and one value vector of d_h numbers per layer and per KV head (N_kv, not N_h: "
         "with GQA the query heads share them)")


def _fits(c, seq: int, memory: int) -> int:
    room = memory - c.weight_bytes("bf16")
    return max(0, int(room // c.kv_bytes(seq, "bf16", 1)))


def _batch_cases() -> list[Case]:
    cases = []
    for c, seq, mem in ((LLAMA31_8B, 8192, 80 * GiB), (LLAMA31_8B, 2048, 24 * GiB),
                        (LLAMA3_70B, 8192, 8 * 80 * GiB), (LLAMA3_70B, 8192, 80 * GiB),
                        (LLAMA32_1B, 2048, 4 * GiB), (SMOLLM2_135M, 8192, GiB),
                        (LLAMA32_1B, 131072, 16 * GiB), (SMOLLM2_135M, 2048, 270_000_000)):      # the weights fit, one sequence does not
        size = f"{mem // GiB} GiB" if mem % GiB == 0 else f"{mem:,} B"
        cases.append(Case(f"{c.name}, {seq} tokens each, {size}", (c, seq, mem), _fits(c, seq, mem)))
    return cases


max_batch = Exercise(
    "04c.2", "max_batch", _batch_cases,
    hint="the bf16 weights come first (weight_bytes('bf16')); what is left holds whole sequences of "
         "kv_bytes(seq, 'bf16') each: floor division, and 0 when the weights alone do not fit")

EXERCISES = (kv_bytes_per_token, max_batch)
