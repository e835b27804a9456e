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

from llamanb.model.config import SMOLLM2_135M, LlamaConfig
from llamanb.engine.kv.paged import PagedKVCache


class DryEngine:
    batch_invariant = True
    query_tile = 1                  # no attention: any chunk

    def __init__(self, config: LlamaConfig = SMOLLM2_135M, vocab: int = 8):
        # one layer and one KV head are enough to hold the block tables; the shapes of the
        # model do not change a single scheduling decision (its vocabulary still checks the
        # prompts' ids; the logits are `vocab` wide)
        self.config = dataclasses.replace(config, n_layers=1, n_kv_heads=1, n_heads=1,
                                          head_dim=2, eos_ids=())
        self.vocab = vocab
        self.steps = 0

    def new_cache(self, max_seq, slots=1, block=None, n_blocks=None):
        return PagedKVCache(self.config, min(max_seq, self.config.max_seq), n_blocks=n_blocks,
                            block=block, slots=slots)

    def step(self, step, cache) -> np.ndarray:
        cache.admit(step)                   # as Engine.step: continues each slot; room, all or nothing
        cache.advance(step)
        self.steps += 1
        logits = np.zeros((step.logit_rows.size, self.vocab), dtype=np.float32)
        logits[:, 0] = 1.0
        return logits
