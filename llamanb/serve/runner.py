"""The serving loop: one engine, a paged KV cache, a scheduler, and a three-line step.

    plan   = scheduler.schedule()                      who runs now, with which rows
    logits = engine.step(Step.build(plan rows), cache)  one forward over all of them
    done   = postprocess(plan, logits)                 sample, advance, retire finished requests

Every step is recorded (which slot ran what, blocks in use, who was admitted, preempted,
finished) so that the notebook can draw the timeline and the benchmark can count the work.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

from llamanb.errors import LlamanbError
from llamanb.engine.sampling import SamplingParams
from llamanb.engine.step import Step
from llamanb.model.token_ids import token_ids
from llamanb.serve.request import Request
from llamanb.serve.scheduler import BLOCK_Q, Scheduler


@dataclass
class StepRecord:
    index: int
    t0: float
    t1: float
    rows: list[tuple[int, str, str, int]]     # (slot, request name, prefill|replay|decode, rows)
    blocks_used: int
    admitted: list[str] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    finished: list[str] = field(default_factory=list)


class BatchRunner:
    def __init__(self, engine, slots: int = 8, block: int = 16, kv_positions: int = 4096,
                 token_budget: int = 256, chunk: int = BLOCK_Q, policy: str = "continuous",
                 order: str = "fifo"):
        """slots: requests running at once. block: positions per KV block. kv_positions: the
        pool's size in positions (all requests together). token_budget: rows per step at most.
        order: the queue's, "fifo" or "longest-first" (most max_new_tokens first; scheduler.py)."""
        for name, v in (("slots", slots), ("block", block), ("kv_positions", kv_positions)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise LlamanbError(f"{name} must be an integer >= 1, got {v!r}")
        self.engine = engine
        self.cache = engine.new_cache(engine.config.max_seq, slots=slots, block=block,
                                      n_blocks=-(-kv_positions // block))
        self.scheduler = Scheduler(self.cache, token_budget, chunk, policy,
                                   query_tile=engine.query_tile, order=order)
        self.history: list[StepRecord] = []

    def add(self, prompt, max_new_tokens: int = 64, params: SamplingParams = SamplingParams(),
            stop_ids=None, name: str = "") -> Request:
        """Queue a request (stop_ids default: the model's EOS ids). A bad request raises a
        LlamanbError and is not queued; the ones already queued are unaffected."""
        cfg = self.engine.config
        prompt = token_ids(prompt, cfg.vocab, f"request {name or '?'}").tolist()
        if len(prompt) >= cfg.max_seq:
            raise LlamanbError(f"request {name or '?'}: prompt of {len(prompt)} tokens leaves no "
                               f"room in the {cfg.max_seq}-token context")
        if isinstance(max_new_tokens, int) and not isinstance(max_new_tokens, bool):
            max_new_tokens = min(max_new_tokens, cfg.max_seq - len(prompt))   # as generate() does
        stop = cfg.eos_ids if stop_ids is None else stop_ids
        req = Request(prompt, max_new_tokens, params, frozenset(stop), name)
        self.scheduler.add(req)
        return req

    # --- the loop ------------------------------------------------------------------------------
    def step(self) -> list[Request]:
        """One iteration; returns the requests that finished in it."""
        t0 = time.perf_counter()
        plan = self.scheduler.schedule()
        if not plan.pieces:
            raise LlamanbError("the scheduler found nothing to run (pool too small for the queue head?)")
        logits = self.engine.step(Step.build([(p.request.slot, p.start, p.ids) for p in plan.pieces],
                                             [p.logits for p in plan.pieces]), self.cache)
        return self.postprocess(plan, logits, t0)

    def postprocess(self, plan, logits, t0: float) -> list[Request]:
        now = time.perf_counter()
        rows = [(p.request.slot, p.request.name, p.kind, len(p.ids)) for p in plan.pieces]
        blocks = sum(len(t) for t in self.cache.tables)
        done, k = [], 0
        for p in plan.pieces:
            p.request.cached += len(p.ids)
            if p.logits:
                if p.request.take(logits[k], now):
                    done.append(p.request)
                k += 1
        for r in done:
            self.scheduler.finish(r, now)
        self.history.append(StepRecord(len(self.history), t0, now, rows, blocks,
                                       [r.name for r in plan.admitted],
                                       [r.name for r in plan.preempted], [r.name for r in done]))
        return done

    def run(self) -> list[Request]:
        """Step until every queued request has finished; returns them in finishing order."""
        out = []
        while self.scheduler.busy:
            out += self.step()
        return out
