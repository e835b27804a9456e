"""Chapter 04 exercises: appending to the KV cache, and one decode step's attention read from it.

    kv_append(k_cache [N_kv, cap, d], length, k_new [n, N_kv, d]) -> (k_cache, length + n)
                                               against llamanb.engine.kv.KVCache.write (one layer)
    decode_attention(q [N_h, d], k_cache [N_kv, cap, d], v_cache [N_kv, cap, d], length) -> [N_h d]
                                               against llamanb.engine.attention.attention (one row)

(The sampling exercises are chapter 04b's, `ch04b`; the cache's bytes are 04c's, `ch04c`.)
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.attention import attention
from llamanb.model.config import LlamaConfig
from llamanb.engine.kv.contiguous import KVCache
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

def _attention_cases() -> list[Case]:
    rng = np.random.default_rng(11)
    cases = []
    for Nh, Nkv, d, cap, length in ((1, 1, 4, 8, 1), (2, 1, 8, 16, 5), (9, 3, 64, 256, 52),
                                    (4, 2, 16, 32, 32), (6, 2, 8, 24, 9)):
        q = rng.standard_normal((Nh, d)).astype(np.float32)
        k_cache, v_cache = (np.zeros((Nkv, cap, d), np.float32) for _ in range(2))
        k_cache[:, :length] = rng.standard_normal((Nkv, length, d))
        v_cache[:, :length] = rng.standard_normal((Nkv, length, d))
        # the engine's decode path: one query row at position length - 1 over keys 0 .. length - 1
        out = attention(q[None], lambda T: k_cache[:, :T], lambda T: v_cache[:, :T], length - 1,
                        np.float32(1 / np.sqrt(d)), Nkv)[0]
        cases.append(Case(f"N_h={Nh}, N_kv={Nkv}, d={d}, capacity {cap}, length {length}",
                          (q, k_cache, v_cache, length), out))
    return cases


decode_attention = Exercise(
    "04.2", "decode_attention", _attention_cases,
    hint="read only rows 0 .. length-1 (the rest of the capacity is zeros, which a softmax would "
         "still weigh); query head h uses KV head h // (N_h / N_kv); scores q.k / sqrt(d), softmax "
         "over the positions, then the weighted sum of the values; heads concatenated")


EXERCISES = (kv_append, decode_attention)
