"""The scheduler's invariants over many random workloads, without a model.

A stand-in for the engine does exactly the bookkeeping Engine.step does to the cache (reserve the
step's positions all or nothing, advance the lengths) and returns random logits. Every check is
against the paged cache's own state or closed-form block arithmetic, step by step:

- the pool is never over-committed: the step's reservation always succeeds, every block is
  either free or in exactly one table, and a table holds ceil(length / block) blocks;
- at most `slots` requests run and at most `token_budget` rows go into a step;
- a prompt is cut only at multiples of the chunk;
- admission is first come, first served (or, ordered longest-first, by max_new_tokens, ties in
  arrival order), and a preempted request is the next one admitted;
- every request finishes with exactly max_new_tokens tokens (no stop ids), however often it was
  preempted, and its tokens are the ones the same random logits give it without preemption.
"""
import numpy as np
import pytest

from llamanb.model.config import PRESETS
from llamanb.errors import LlamanbError
from llamanb.engine.generate import SamplingParams, sample
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.serve.request import Request
from llamanb.serve.scheduler import Scheduler

CFG = PRESETS["smollm2-135m"]


class FakeLogits:
    """Logits that depend only on (request, position): what a model gives, without the model."""
    V = 50

    def __call__(self, req, pos):
        return np.random.default_rng([req.id, pos]).standard_normal(self.V)


def fake_step(sched, plan, logits_of, log):
    cache = sched.cache
    for p in plan.pieces:
        assert cache.lengths[p.request.slot] == p.start == p.request.cached
    cache.reserve({p.request.slot: p.start + len(p.ids) for p in plan.pieces})    # must not raise
    for p in plan.pieces:
        cache.lengths[p.request.slot] = p.start + len(p.ids)
        p.request.cached += len(p.ids)
    for p in plan.pieces:
        if p.logits:
            r = p.request
            if r.take(logits_of(r, p.start + len(p.ids)), 0.0):
                sched.finish(r, 0.0)
                log.append(("finish", r.name))


def check_pool(cache):
    held = [b for t in cache.tables for b in t]
    assert len(held) == len(set(held))
    assert sorted(held + cache.free_blocks) == list(range(cache.k_pool.shape[0]))
    for s, t in enumerate(cache.tables):
        assert len(t) >= -(-int(cache.lengths[s]) // cache.block)


def check_queue_order(sched):
    """The waiting queue: preempted requests first (in the order they were first admitted), then
    the rest in arrival order (fifo) or by max_new_tokens, most first, ties in arrival order."""
    q = list(sched.waiting)
    back = [r for r in q if r.preemptions]
    assert q[:len(back)] == back
    rest = q[len(back):]
    key = (lambda r: r.id) if sched.order == "fifo" else (lambda r: (-r.max_new_tokens, r.id))
    assert rest == sorted(rest, key=key)


def run_workload(seed, slots, n_blocks, block, budget, policy="continuous", order="fifo"):
    rng = np.random.default_rng(seed)
    cache = PagedKVCache(CFG, 2048, n_blocks=n_blocks, block=block, slots=slots)
    sched = Scheduler(cache, token_budget=budget, chunk=128, policy=policy, order=order)
    reqs = []
    logits_of, log, admitted = FakeLogits(), [], []
    pending = [Request([int(t) for t in rng.integers(3, 40, int(rng.integers(1, 300)))],
                       int(rng.integers(1, 40)), SamplingParams(temperature=1.0, seed=seed * 100 + i))
               for i in range(12)]
    steps, batch_finishing = 0, False
    while pending or sched.busy:
        for _ in range(int(rng.integers(0, 3))):           # requests arrive between steps
            if pending:
                try:
                    sched.add(pending[0])
                    reqs.append(pending[0])
                except LlamanbError:                      # larger than the whole pool
                    assert sched.blocks_for(len(pending[0].prompt) + pending[0].max_new_tokens) > n_blocks
                pending.pop(0)
        if not sched.busy:
            continue
        check_queue_order(sched)
        head = sched.waiting[0] if sched.waiting else None
        if not sched.running:
            batch_finishing = False                        # static: a new batch may form
        before = list(sched.running)
        plan = sched.schedule()
        assert plan.pieces
        assert plan.preempted == before[::-1][:len(plan.preempted)]      # the newest give way
        assert len(sched.running) <= slots and plan.rows <= budget
        for p in plan.pieces:
            if p.kind == "prefill" and p.start + len(p.ids) < len(p.request.prompt):
                assert len(p.ids) % 128 == 0 and p.start % 128 == 0
        if plan.admitted:
            assert plan.admitted[0] is head                # FIFO: the head goes first
        admitted += [r for r in plan.admitted if r.preemptions == 0]
        if policy == "static" and plan.admitted:
            assert not batch_finishing                     # no joining a batch that is ending
            assert not before                              # nor one that is running at all
        n_log = len(log)
        fake_step(sched, plan, logits_of, log)
        batch_finishing = batch_finishing or len(log) > n_log
        check_pool(cache)
        steps += 1
        assert steps < 5000
    if order == "fifo":
        assert admitted == reqs                           # first admissions in arrival order
    for r in reqs:
        assert r.finished and len(r.output) == r.max_new_tokens
        # the same request alone, with the same logits: what preemption must not change
        rng_alone = np.random.default_rng(r.params.seed)
        alone = [sample(logits_of(r, len(r.prompt) + i), r.params, rng_alone)
                 for i in range(r.max_new_tokens)]
        assert r.output == alone
    assert len(cache.free_blocks) == n_blocks
    return reqs


@pytest.mark.parametrize("seed", range(8))
def test_random_workloads_tight_pool(seed):
    reqs = run_workload(seed, slots=4, n_blocks=30, block=16, budget=256)
    if seed < 7:
        assert sum(r.preemptions for r in reqs) > 0        # the tight pool does preempt


def test_random_workloads_longest_first():
    """The same invariants with the queue ordered longest-first: the pool, the budget, preempted
    requests resuming first, every request's tokens as alone."""
    preempting = [sum(r.preemptions for r in run_workload(seed, slots=4, n_blocks=30, block=16,
                                                          budget=256, order="longest-first")) > 0
                  for seed in range(8)]
    assert sum(preempting) >= 3                            # the tight pool does preempt


def test_longest_first_admits_by_max_new_tokens():
    """Queued together, requests are admitted most new tokens first, ties in arrival order; a
    later, longer arrival goes ahead of the shorter ones still waiting but never ahead of a
    preempted request."""
    cache = PagedKVCache(CFG, 512, n_blocks=64, block=16, slots=2)
    sched = Scheduler(cache, token_budget=256, order="longest-first")
    reqs = [Request([5, 6], k, name=n) for n, k in (("a", 3), ("b", 9), ("c", 3), ("d", 5))]
    for r in reqs:
        sched.add(r)
    assert [r.name for r in sched.waiting] == ["b", "d", "a", "c"]
    plan = sched.schedule()
    assert [r.name for r in plan.admitted] == ["b", "d"]
    sched.preempt(plan.admitted[1])                       # d back to the front
    sched.add(Request([5], 7, name="e"))                  # longer than a and c, not d's place
    assert [r.name for r in sched.waiting] == ["d", "e", "a", "c"]


def test_longest_first_shortens_the_drain():
    """Two slots; requests of 1, 1 and 4 new tokens, one-token prompts (a prompt's step samples
    the first token). In arrival order the two short ones take the first step together and the
    long one then decodes alone: 1 + 4 = 5 steps. Longest first, it starts at once and the short
    ones take the other slot in turn: 4 steps."""
    from llamanb.serve.dry import DryEngine
    from llamanb.serve.runner import BatchRunner

    steps = {}
    for order in ("fifo", "longest-first"):
        br = BatchRunner(DryEngine(), slots=2, block=16, kv_positions=256, order=order)
        reqs = [br.add([5], k, stop_ids=(), name=n) for n, k in (("a", 1), ("b", 1), ("c", 4))]
        br.run()
        assert [len(r.output) for r in reqs] == [1, 1, 4]
        steps[order] = len(br.history)
    assert steps == {"fifo": 5, "longest-first": 4}


@pytest.mark.parametrize("seed", range(3))
def test_random_workloads_static(seed):
    run_workload(seed, slots=3, n_blocks=64, block=8, budget=200, policy="static")


def test_static_admits_the_whole_batch_at_once():
    """Static batching takes `slots` requests together even when their prompts need several
    steps of the token budget, and admits nobody else until every one of them has finished."""
    slots, budget, prompt = 6, 256, 100
    cache = PagedKVCache(CFG, 512, n_blocks=200, block=16, slots=slots)
    sched = Scheduler(cache, token_budget=budget, policy="static")
    reqs = [Request(list(range(3, 3 + prompt)), 4 + i, name=f"r{i}") for i in range(9)]
    for r in reqs:
        sched.add(r)
    logits_of, log, plans = FakeLogits(), [], []
    while sched.busy:
        plans.append(sched.schedule())
        fake_step(sched, plans[-1], logits_of, log)
    first = [r.name for r in plans[0].admitted]
    assert first == [f"r{i}" for i in range(slots)]                 # all six, in the first step
    assert plans[0].rows == budget // prompt * prompt               # only two prompts fit it
    second = next(i for i, p in enumerate(plans) if p.admitted and i > 0)
    last_of_first = max(i for i, p in enumerate(plans) for x in p.pieces if x.request.name in first)
    assert second == last_of_first + 1                              # after the batch, not before
    assert [r.name for r in plans[second].admitted] == [f"r{i}" for i in range(slots, 9)]


def test_scheduler_rejects_bad_settings():
    cache = PagedKVCache(CFG, 256, n_blocks=4, block=16, slots=2)
    for kw in (dict(chunk=100), dict(token_budget=64), dict(policy="lottery"), dict(order="lifo")):
        with pytest.raises(LlamanbError):
            Scheduler(cache, **kw)
    sched = Scheduler(cache)
    with pytest.raises(LlamanbError, match="blocks"):
        sched.add(Request(list(range(3, 60)), 10))          # 67 positions > 4 x 16
    assert not sched.busy
