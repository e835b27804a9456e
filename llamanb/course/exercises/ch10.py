"""Chapter 10 exercises: who gives way when the KV pool runs short, and reading a paged sequence.

    preempt(cached, block, free_blocks) -> [indices preempted, in order]
        running requests, oldest first, all decoding, request i holding cached[i] positions in
        whole blocks of `block`; checked against llamanb.serve.scheduler.Scheduler.schedule
    gather_keys(k_pool [n_blocks, N_kv, block, d], table, n) -> [N_kv, n, d]
        against llamanb.engine.kv.paged.PagedKVCache.keys
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LlamaConfig
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.serve.request import Request, Status
from llamanb.serve.scheduler import Scheduler
from llamanb.course.exercises.check import Case, Exercise

TINY = LlamaConfig(name="tiny", n_layers=1, hidden=8, n_heads=2, n_kv_heads=2, head_dim=4, ffn=8,
                   vocab=16, rope_theta=1e4, max_seq=4096)


def _scheduled(cached: list[int], block: int, free_blocks: int) -> list[int]:
    """What the package's scheduler preempts, from a state built to match the arguments."""
    held = sum(-(-c // block) for c in cached)
    cache = PagedKVCache(TINY, TINY.max_seq, n_blocks=held + free_blocks, block=block,
                         slots=len(cached))
    sched = Scheduler(cache, token_budget=256)
    running = []
    for i, c in enumerate(cached):
        p = max(1, c - 2)                                  # a prompt, then c - p + 1 sampled tokens
        r = Request([1] * p, max_new_tokens=4096 - c, name=f"r{i}")
        r.output = [0] * (c - p + 1)                       # decoding: cached == len(tokens) - 1
        r.slot, r.status, r.cached = sched.free_slots.pop(), Status.RUNNING, c
        cache.reserve({r.slot: c})
        sched.running.append(r)
        running.append(r)
    assert len(cache.free_blocks) == free_blocks
    plan = sched.schedule()
    return [running.index(r) for r in plan.preempted]


def _preempt_cases() -> list[Case]:
    fixed = [([16, 31, 40], 16, 1), ([16, 32, 48], 16, 3), ([16, 32, 48], 16, 1),
             ([16, 32, 48], 16, 0), ([5, 7, 9], 4, 0), ([64, 17, 33, 48], 16, 1),
             ([15], 16, 0), ([16], 16, 0), ([10, 20, 30, 40], 10, 2)]
    cases = [Case(f"cached {c}, blocks of {b}, {f} free", (c, b, f), _scheduled(c, b, f))
             for c, b, f in fixed]
    rng = np.random.default_rng(16)
    for i in range(8):
        block = int(rng.choice([4, 8, 16]))
        cached = [int(x) for x in rng.integers(1, 6, size=int(rng.integers(2, 7))) * block
                  - rng.integers(0, 2, size=1)]
        cached = [max(1, c) for c in cached]
        free = int(rng.integers(0, 3))
        cases.append(Case(f"random {i + 1}: cached {cached}, blocks of {block}, {free} free",
                          (cached, block, free), _scheduled(cached, block, free)))
    return cases


preempt = Exercise(
    "10.1", "preempt", _preempt_cases,
    hint="a decoding request writes position cached[i] next and needs a new block when that "
         "position starts one (cached[i] % block == 0); while the running requests' new blocks "
         "exceed the free ones, preempt the NEWEST running request -- its blocks return to the pool "
         "and it needs none")


def _gather_cases() -> list[Case]:
    rng = np.random.default_rng(17)
    cases = []
    for n_a, n_b, block, n in ((5, 0, 4, 5), (9, 7, 4, 9), (20, 13, 8, 20), (33, 40, 16, 30),
                               (3, 3, 16, 3)):
        cache = PagedKVCache(TINY, 256, n_blocks=16, block=block, slots=2)
        # two sequences grow in turns, so each one's blocks are interleaved in the pool
        for p in range(max(n_a, n_b)):
            for slot, length in ((0, n_a), (1, n_b)):
                if p < length:
                    k = rng.standard_normal((1, TINY.n_kv_heads, TINY.head_dim)).astype(np.float32)
                    cache.write(0, slot, p, k, k)
        pool = np.array(cache.k_pool[:, 0])                       # [n_blocks, N_kv, block, d]
        table = list(cache.tables[0])
        cases.append(Case(f"blocks of {block}, table {table}, n={n}", (pool, table, n),
                          cache.keys(0, 0, n)))
    return cases


gather_keys = Exercise(
    "10.2", "gather_keys", _gather_cases, rtol=0, atol=0,
    hint="position p is row p % block of block table[p // block]; lay the blocks end to end per "
         "head: pool[table] is [blocks, N_kv, block, d] -- bring N_kv to the front before merging "
         "blocks and rows, then keep the first n positions")

EXERCISES = (preempt, gather_keys)
