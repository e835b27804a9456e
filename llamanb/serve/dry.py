"""A dry run: the serving loop with a stand-in for the model, to look at scheduling alone.

`DryEngine` does to the cache exactly what Engine.step does (reserve the step's positions all
or nothing, advance each sequence's length) and returns logits that always pick token 0. With
no stop ids, every request then generates exactly its max_new_tokens, so a dry run's timeline
(who ran in which step, blocks in use, preemptions) is the one the real engine would follow on
the same workload -- in microseconds instead of minutes. Nothing here is a measurement of speed.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..config import SMOLLM2_135M, LlamaConfig
from ..errors import LlamanbError
from ..kv.paged import PagedKVCache


class DryEngine:
    batch_invariant = True

    def __init__(self, config: LlamaConfig = SMOLLM2_135M, vocab: int = 8):
        # one layer and one KV head are enough to hold the block tables; the shapes of the
        # model do not change a single scheduling decision
        self.config = dataclasses.replace(config, n_layers=1, n_kv_heads=1, n_heads=1,
                                          head_dim=2, vocab=vocab, eos_ids=())
        self.steps = 0

    def new_cache(self, max_seq, slots=1, block=None, n_blocks=None):
        return PagedKVCache(self.config, min(max_seq, self.config.max_seq), n_blocks=n_blocks,
                            block=block, slots=slots)

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise LlamanbError("empty prompt: nothing to run")
        return ids

    def step(self, step, cache) -> np.ndarray:
        for seg in step.segments:
            if seg.start != cache.lengths[seg.slot]:
                raise LlamanbError(f"slot {seg.slot}: step starts at {seg.start}, cache holds "
                                   f"{cache.lengths[seg.slot]}")
        cache.reserve({seg.slot: seg.end for seg in step.segments})
        for seg in step.segments:
            cache.lengths[seg.slot] = seg.end
        self.steps += 1
        logits = np.zeros((step.logit_rows.size, self.config.vocab), dtype=np.float32)
        logits[:, 0] = 1.0
        return logits
