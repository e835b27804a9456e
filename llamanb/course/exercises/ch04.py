"""Chapter 04 exercises: appending to the KV cache, and its bytes per token.

    kv_append(k_cache [N_kv, cap, d], length, k_new [n, N_kv, d]) -> (k_cache, length + n)
                                               against llamanb.engine.kv.KVCache.write (one layer)
    kv_bytes_per_token(c, bytes_per_element) -> int    against LlamaConfig.kv_bytes_per_token

(The sampling exercise is chapter 04b's: `ch04b`.)
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, LLAMA32_1B, SMOLLM2_135M, LlamaConfig
from llamanb.engine.kv.contiguous import KVCache
from llamanb.course.exercises.ch01 import small_configs
from llamanb.course.exercises.check import Case, Exercise


def _append_cases() -> list[Case]:
    rng = np.random.default_rng(7)
    cases = []
    for Nkv, d, cap, length, n in ((1, 4, 8, 0, 3), (2, 8, 16, 5, 1), (3, 16, 32, 10, 7),
                                   (2, 4, 8, 7, 1), (4, 8, 20, 0, 20)):
        cfg = LlamaConfig(name="tiny", n_layers=1, hidden=8, n_heads=Nkv, n_kv_heads=Nkv,
                          head_dim=d, ffn=8, vocab=8, rope_theta=1e4, max_seq=cap)
        store = KVCache(cfg, cap)
        before = rng.standard_normal((length, Nkv, d)).astype(np.float32)
        if length:
            store.write(0, 0, 0, before, before)
        new = rng.standard_normal((n, Nkv, d)).astype(np.float32)
        k_cache = np.array(store.k[0])                            # [N_kv, cap, d], rows < length filled
        store.write(0, 0, length, new, new)
        cases.append(Case(f"N_kv={Nkv}, capacity {cap}, length {length}, appending {n} rows",
                          (k_cache, length, new), (np.array(store.k[0]), length + n)))
    return cases


kv_append = Exercise(
    "04.1", "kv_append", _append_cases, rtol=0, atol=0,
    hint="the cache is [N_kv, capacity, d] (heads first) while the new rows come as [n, N_kv, d]: "
         "transpose them to [N_kv, n, d] and write rows length .. length + n - 1; return the new length")

_FMT = {2: "bf16", 4: "fp32"}


def _bytes_cases() -> list[Case]:
    cases = []
    for c in (SMOLLM2_135M, LLAMA32_1B, LLAMA31_8B, LLAMA3_70B, *small_configs(8, 3)):
        for b in (2, 4):
            cases.append(Case(f"{c.name} (N_h={c.n_heads}, N_kv={c.n_kv_heads}), {b} bytes per number",
                              (c, b), int(c.kv_bytes_per_token(_FMT[b]))))
    return cases


kv_bytes_per_token = Exercise(
    "04.2", "kv_bytes_per_token", _bytes_cases,
    hint="one key and one value vector of d_h numbers per layer and per KV head (N_kv, not N_h: "
         "with GQA the query heads share them)")


EXERCISES = (kv_append, kv_bytes_per_token)
