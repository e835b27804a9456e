"""Greedy decoding for the checks, whatever produces the logits: the package's one token loop
(llamanb.engine.generate.token_loop) with a greedy Sampler, recording what each choice came from.

    first logits --argmax--> token --advance(token)--> logits --argmax--> ... (until a stop id)

A check needs the chosen ids and, at every step, the top-k ids and logits the choice came from
(the shared reference stores transformers' top-5 per step). The loop does not care whose model
it drives: `engine_steps` adapts the llamanb engine, `check.hf_reference.hf_steps` transformers;
the benchmark times the same loop with k = 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from llamanb.engine.generate import token_loop
from llamanb.engine.sampling import Sampler


@dataclass
class GreedyRun:
    ids: list[int]                   # chosen tokens (a stop token included, if one was hit)
    top_ids: list[list[int]]         # per step: the k most likely ids, most likely first
    top_logits: list[list[float]]    # per step: their logits
    logits: list[np.ndarray] = field(default_factory=list, repr=False)   # per step, if kept

    def tops(self) -> list[dict]:
        """Per step {"ids", "logits"}: the shared reference file's `top5` schema."""
        return [{"ids": i, "logits": v} for i, v in zip(self.top_ids, self.top_logits)]


def top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """The k largest logits' ids, largest first; ties go to the lower id (a stable order)."""
    if k == 1:
        return np.array([int(np.argmax(logits))])
    return np.argsort(-np.asarray(logits), kind="stable")[:k]


def greedy(first: np.ndarray, advance: Callable[[int], np.ndarray], steps: int, stop_ids=(),
           k: int = 5, keep_logits: bool = False, until_differs=None) -> GreedyRun:
    """Up to `steps` greedy tokens starting from the logits `first`; advance(token) feeds the
    chosen token to the model and returns the next logits. Stops after a token in stop_ids, and
    (given a reference sequence `until_differs`) after the first token that differs from it: a
    gate compares nothing past that step."""
    run = GreedyRun([], [], [])
    for step, (tok, logits) in enumerate(token_loop(first, advance, Sampler(), steps, frozenset(stop_ids))):
        order = top_k(logits, k)
        run.top_ids.append([int(i) for i in order])
        run.top_logits.append([float(logits[i]) for i in order])
        if keep_logits:
            run.logits.append(np.asarray(logits))
        run.ids.append(tok)                                  # == order[0]: argmax, lowest id on ties
        if until_differs is not None and (step >= len(until_differs) or tok != until_differs[step]):
            break                                            # the loop advances no further
    return run


def engine_steps(engine, prompt_ids, steps: int):
    """(first logits, advance) for the llamanb engine: prefill, then one decode per token."""
    cache = engine.new_cache(len(prompt_ids) + steps)
    first = engine.prefill(prompt_ids, cache)
    return first, (lambda tok: engine.decode(tok, cache))


def engine_greedy(engine, prompt_ids, steps: int, stop_ids=(), k: int = 5,
                  keep_logits: bool = False, until_differs=None) -> GreedyRun:
    return greedy(*engine_steps(engine, prompt_ids, steps), steps, stop_ids, k, keep_logits,
                  until_differs)
