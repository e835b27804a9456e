"""Iteration-level scheduling (Orca, OSDI '22): before every engine step, decide again who runs.

    running requests, oldest first:   one row each (decode or replay), or the next prompt chunk
    memory short for a decode row?    preempt the newest running request (it goes back to the
                                      front of the queue, keeps its tokens, frees its blocks)
    rows and slots left?              admit waiting requests in queue order (no overtaking:
                                      the head waits rather than be passed), each only if the
                                      pool can hold its whole prompt now -- its blocks are
                                      taken at admission

A step holds at most `token_budget` rows. A long prompt goes in chunks of a multiple of `chunk`
rows, so it cannot stall the decoding rows behind it for more than one step's worth of work.

Where the rules come from: re-deciding the batch every step is Orca's iteration-level scheduling
(Orca itself runs each prompt whole and reserves a request's maximum length at admission, so it
never preempts). Preempting the newest running request, all its blocks at once, and putting it
back at the head of the queue is vLLM's FCFS policy (SOSP '23, section 4.5; `self.running.pop()`
in vllm/v1/core/sched/scheduler.py). Chunking prompts into steps that also carry decode rows is
chunked prefill (Sarathi-Serve), not in either paper. vLLM recovers a preempted request by one
prefill over prompt + generated tokens; this scheduler replays the generated tokens one per step
instead (request.py), because that prefill is not bit-identical to the decode steps.

The queue's order is arrival (`order="fifo"`, vLLM's FCFS) or, with `order="longest-first"`,
the most new tokens asked for first, ties in arrival order -- SGLang's "lof" policy (longest output
first: `CacheAgnosticPolicy.LOF`, which sorts the waiting queue by `-max_new_tokens` in
`SchedulePolicy._sort_by_longest_output`, python/sglang/srt/managers/schedule_policy.py). Either
way a preempted request goes back to the front. Longest-first is list scheduling's LPT rule: every
request runs one token a step once admitted, so the last steps of a queue served in arrival order
are often one long latecomer decoding alone, a full weight pass for one token; started first, the
long requests end together and the short ones fill the slots they leave. It knows only the
requests' `max_new_tokens` (an upper bound where a stop token may end a request sooner), and it
trades the short requests' waiting time for the total.

`policy="static"` is the baseline that continuous batching replaces: when no request runs, up to
`slots` waiting requests are admitted together (as memory allows) and nobody else joins until all
of them have finished, so a slot whose request ended early idles until the batch's longest member
is done. The batch's prompts go in over as many steps as the token budget needs.

Memory is the paged KV cache (llamanb.engine.kv.paged): a request takes blocks as its sequence grows and
returns all of them when it finishes or is preempted. The scheduler never asks the engine for a
step the pool cannot hold: every block the step needs is counted before the step is built.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from llamanb.engine.attention import BLOCK_Q
from llamanb.errors import LlamanbError
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.serve.request import Request, Status

POLICIES = ("continuous", "static")
ORDERS = ("fifo", "longest-first")


@dataclass
class Piece:
    """One request's rows in a step."""
    request: Request
    start: int              # first position fed
    ids: list[int]
    logits: bool            # sample from this piece's last row

    @property
    def kind(self) -> str:
        r = self.request
        if self.start < len(r.prompt):
            return "prefill"
        return "decode" if self.logits else "replay"


@dataclass
class Plan:
    pieces: list[Piece]
    preempted: list[Request]
    admitted: list[Request]

    @property
    def rows(self) -> int:
        return sum(len(p.ids) for p in self.pieces)


class Scheduler:
    def __init__(self, cache: PagedKVCache, token_budget: int = 256, chunk: int = BLOCK_Q,
                 policy: str = "continuous", query_tile: int = BLOCK_Q, order: str = "fifo"):
        if not isinstance(cache, PagedKVCache):
            raise LlamanbError("the scheduler needs a paged KV cache (engine.new_cache(..., "
                               "block=, n_blocks=))")
        if policy not in POLICIES:
            raise LlamanbError(f"policy must be one of {POLICIES}, got {policy!r}")
        if order not in ORDERS:
            raise LlamanbError(f"order must be one of {ORDERS}, got {order!r}")
        if chunk < 1 or chunk % query_tile:
            raise LlamanbError(f"chunk must be a multiple of {query_tile} (the backend's attention "
                               f"query tile, Backend.query_tile), got {chunk}")
        if token_budget < max(chunk, cache.slots):
            raise LlamanbError(f"token_budget {token_budget} must be >= the chunk ({chunk}) "
                               f"and the slot count ({cache.slots})")
        self.cache, self.budget, self.chunk, self.policy = cache, token_budget, chunk, policy
        self.order = order
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []           # in admission order
        self.free_slots = list(range(cache.slots - 1, -1, -1))

    # --- bookkeeping ---------------------------------------------------------------------------
    def blocks_for(self, positions: int) -> int:
        return -(-positions // self.cache.block)

    def add(self, req: Request) -> None:
        """Queue a request; refuse at once one the pool could never hold even alone."""
        need = self.blocks_for(len(req.prompt) + req.max_new_tokens)
        total = self.cache.k_pool.shape[0]
        if need > total:
            raise LlamanbError(f"request {req.name}: {len(req.prompt)} + {req.max_new_tokens} "
                               f"tokens need {need} blocks of {self.cache.block}; the pool has "
                               f"{total}")
        if len(req.prompt) + req.max_new_tokens > self.cache.max_seq:
            raise LlamanbError(f"request {req.name}: {len(req.prompt)} + {req.max_new_tokens} "
                               f"tokens exceed the {self.cache.max_seq}-position context")
        i = len(self.waiting)
        if self.order == "longest-first":   # behind the preempted, and behind no shorter request
            while i and not self.waiting[i - 1].preemptions and \
                    self.waiting[i - 1].max_new_tokens < req.max_new_tokens:
                i -= 1
        self.waiting.insert(i, req)

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def _release(self, req: Request) -> None:
        self.cache.free(req.slot)
        self.free_slots.append(req.slot)
        self.running.remove(req)
        req.slot = None

    def finish(self, req: Request, now: float) -> None:
        self._release(req)
        req.status, req.t_finished = Status.FINISHED, now

    def preempt(self, req: Request) -> None:
        """Recompute-style preemption: drop the request's cache, keep its tokens, and put it at
        the front of the queue (it was admitted before everything still waiting)."""
        self._release(req)
        req.status, req.cached = Status.WAITING, 0
        req.preemptions += 1
        self.waiting.appendleft(req)

    # --- the decision, once per step ---------------------------------------------------------
    def schedule(self) -> Plan:
        preempted: list[Request] = []
        # 1. running requests: each needs its next piece; decode/replay rows may need a block
        while True:
            growth = sum(self.cache.blocks_needed(r.slot, r.cached + 1) for r in self.running
                         if r.cached >= len(r.prompt))
            if growth <= len(self.cache.free_blocks):
                break
            victim = self.running[-1]                      # the newest gives way (LIFO)
            self.preempt(victim)
            preempted.append(victim)
        pieces, room = [], self.budget
        for r in self.running:                             # rows of decoding requests first
            if r.cached >= len(r.prompt):
                ids, logits = r.next_piece(room, self.chunk)
                pieces.append(Piece(r, r.cached, ids, logits))
                room -= 1
        for r in self.running:                             # then prompt chunks, oldest first
            if r.cached < len(r.prompt):
                ids, logits = r.next_piece(room, self.chunk)
                if ids:
                    pieces.append(Piece(r, r.cached, ids, logits))
                    room -= len(ids)
        # 2. admission: FIFO; the head of the queue waits rather than be overtaken
        admitted: list[Request] = []
        static = self.policy == "static"
        if static and self.running:        # a batch in flight: nobody joins it until it is done
            return Plan(pieces, preempted, admitted)
        free_blocks = len(self.cache.free_blocks) - growth
        while self.waiting and self.free_slots and (room > 0 or static):
            r = self.waiting[0]
            need = self.blocks_for(r.prefill_target())
            ids, logits = r.next_piece(room, self.chunk) if room > 0 else ([], False)
            # continuous: admit only what runs now; static: the whole batch at once, its
            # prompts going in over the next steps (oldest first) as the step budget allows
            if need > free_blocks or (not ids and not static) or r in preempted:
                break
            self.waiting.popleft()
            r.slot, r.status = self.free_slots.pop(), Status.RUNNING
            if r.t_admitted is None:
                r.t_admitted = time.perf_counter()
            self.cache.reserve({r.slot: r.prefill_target()})   # its whole prompt, now
            free_blocks -= need
            self.running.append(r)
            admitted.append(r)
            if ids:
                pieces.append(Piece(r, 0, ids, logits))
                room -= len(ids)
        return Plan(pieces, preempted, admitted)
