"""`python -m llamanb batch FILE`: every request in the file through one engine, continuously
batched; each answer, then a summary. `--check` generates each request alone as well and exits 1
if any token differs."""
from __future__ import annotations

import sys
import time

import numpy as np

from llamanb.errors import LlamanbError


def add_parser(sub, model_arg, positive_int) -> None:
    from llamanb.serve.scheduler import ORDERS

    b = sub.add_parser("batch", help="many requests through one engine (continuous batching)")
    model_arg(b)
    b.add_argument("file", help="requests: a JSON list or JSON lines (see llamanb/serve/workload.py)")
    b.add_argument("--slots", type=positive_int, default=8, help="requests running at once")
    b.add_argument("--max-new-tokens", type=positive_int, default=64,
                   help="default for requests that do not set it")
    b.add_argument("--block", type=positive_int, default=16, help="positions per KV-cache block")
    b.add_argument("--kv-positions", type=positive_int, default=4096,
                   help="size of the KV-cache pool, in positions (all requests together)")
    b.add_argument("--token-budget", type=positive_int, default=256, help="rows per step at most")
    b.add_argument("--static", action="store_true",
                   help="static batching (a batch waits for its longest member), for comparison")
    b.add_argument("--order", choices=ORDERS, default="fifo",
                   help="the queue's order: arrival, or most max_new_tokens first (a shorter drain "
                   "when requests ask for very different lengths)")
    b.add_argument("--check", action="store_true",
                   help="also generate each request alone; exit 1 on any difference")


def percentile(values, q) -> float:
    return float(np.percentile(np.asarray(values, dtype=np.float64), q)) if values else float("nan")


def main(a) -> int:
    from llamanb.engine.engine import Engine
    from llamanb.engine.generate import generate
    from llamanb.io.store import load_model
    from llamanb.serve.runner import BatchRunner
    from llamanb.serve.workload import read_requests

    model = load_model(a.model)
    specs = read_requests(a.file, model.tokenizer, a.max_new_tokens)
    # batch-invariant: every row computed the same way whatever shares its step, so a request's
    # tokens cannot depend on its neighbours (and --check can ask for identity, not closeness)
    engine = Engine(model, batch_invariant=True)
    runner = BatchRunner(engine, slots=a.slots, block=a.block, kv_positions=a.kv_positions,
                         token_budget=a.token_budget, policy="static" if a.static else "continuous",
                         order=a.order)
    reqs = [runner.add(s.prompt_ids, s.max_new_tokens, s.params, name=s.name) for s in specs]
    t0 = time.perf_counter()
    runner.run()
    wall = time.perf_counter() - t0
    tok = model.tokenizer
    stop = set(model.config.eos_ids)
    for r in reqs:
        text = tok.decode([t for t in r.output if t not in stop], skip_special_tokens=True)
        print(f"=== {r.name}: {len(r.prompt)} prompt tokens -> {len(r.output)} tokens "
              f"(stop: {r.stop_reason}, preempted {r.preemptions}x)")
        print(text.strip())
    n_out = sum(len(r.output) for r in reqs)
    hist = runner.history
    pool = runner.cache.k_pool.shape[0]
    print(f"\n[{engine.backend.description}, float32, batch-invariant rows; "
          f"{'static' if a.static else 'continuous'} batching, {a.slots} slots, "
          f"KV pool {pool} blocks x {a.block} positions]", file=sys.stderr)
    print(f"{len(reqs)} requests, {n_out} tokens generated in {wall:.2f} s ({n_out / wall:.1f} tok/s) "
          f"over {len(hist)} steps, {np.mean([len(h.rows) for h in hist]):.1f} requests per step; "
          f"KV blocks in use: peak {max(h.blocks_used for h in hist)} of {pool}; "
          f"preemptions {sum(r.preemptions for r in reqs)}", file=sys.stderr)
    per_block = runner.cache.nbytes / pool
    longest = max(len(r.prompt) + r.max_new_tokens for r in reqs)
    print(f"KV memory: paged peak {max(h.blocks_used for h in hist) * per_block / 1e6:.1f} MB; "
          f"contiguous per-slot caches would reserve {min(a.slots, len(reqs))} x {longest} "
          f"positions = {min(a.slots, len(reqs)) * longest * per_block / a.block / 1e6:.1f} MB",
          file=sys.stderr)
    for label, vals in (("queue wait", [r.queue_s for r in reqs]),
                        ("time to first token", [r.ttft_s for r in reqs]),
                        ("latency", [r.latency_s for r in reqs])):
        print(f"{label}: p50 {percentile(vals, 50):.2f} s, p90 {percentile(vals, 90):.2f} s, "
              f"max {max(vals):.2f} s", file=sys.stderr)
    if not a.check:
        return 0
    bad = []
    for r in reqs:
        alone = generate(engine, r.prompt, r.max_new_tokens, r.params, stop_ids=r.stop_ids).ids
        if alone != r.output:
            first = next((i for i, (x, y) in enumerate(zip(alone, r.output)) if x != y),
                         min(len(alone), len(r.output)))
            bad.append(f"{r.name} differs from token {first}")
    if bad:
        print(f"check: FAILED, {len(bad)} of {len(reqs)} requests differ from generating them "
              f"alone: {'; '.join(bad)}", file=sys.stderr)
        return 1
    print(f"check: all {len(reqs)} requests token-identical to generating each alone",
          file=sys.stderr)
    return 0
