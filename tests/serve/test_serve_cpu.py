"""Continuous batching on the cpu backend gives every request the tokens it has alone.

The cpu backend's rows are batch-invariant by construction (llamanb.cpu.backend: each output
element is one FMA chain over k in one vector lane, attention is one computation per row and
head), so the engine runs it unpadded and each request's logits in the batch must equal, bit for
bit, llamanb.engine.generate's for the request alone -- and so its tokens -- at float32 and bf16,
whatever shares a step: prompts cut into chunks beside decoding rows, requests admitted in arrival
order or longest output first. (Tokens alone would not show a one-ulp difference; the logits do.)
The benchmark's "same tokens" column (llamanb.bench.batching) is this claim at 16 requests.
"""
import numpy as np
import pytest

from llamanb import Engine
from llamanb.engine.generate import SamplingParams, stream
from llamanb.serve import BatchRunner


@pytest.fixture(scope="module", params=["float32", "bf16"])
def cpu_engine(request, smollm, kernels):
    return Engine(smollm, "cpu", dtype=request.param)


def workload():
    rng = np.random.default_rng(7)
    out = []
    for i, (n, k) in enumerate([(9, 6), (70, 3), (23, 7), (51, 2), (5, 5)]):
        prompt = [int(t) for t in rng.integers(3, 49152, n)]
        params = SamplingParams(temperature=0.0 if i % 2 else 0.8, top_p=0.9, seed=i)
        out.append((prompt, k, params))
    return out


@pytest.mark.parametrize("order", ["fifo", "longest-first"])
def test_chunked_prompts_beside_decode_rows_keep_tokens(cpu_engine, order):
    work = workload()
    alone = [[(e.id, e.logits) for e in stream(cpu_engine, p, k, s, stop_ids=(), text=False)]
             for p, k, s in work]
    # 3 slots, 24 rows a step, prompts cut at multiples of 8 rows: the 70- and 51-token prompts
    # go in over several steps, each beside the rows of requests already decoding
    br = BatchRunner(cpu_engine, slots=3, block=16, kv_positions=1024, token_budget=24, chunk=8,
                     order=order)
    reqs = [br.add(p, k, s, stop_ids=()) for p, k, s in work]
    seen = {r.name: [] for r in reqs}
    for r in reqs:                                 # the logits each token was drawn from
        r.take = lambda logits, now, r=r, take=r.take: seen[r.name].append(logits.copy()) or \
            take(logits, now)
    br.run()
    chunked = [h for h in br.history
               if any(kind == "prefill" and n < len(r.prompt) for _, name, kind, n in h.rows
                      for r in reqs if r.name == name)
               and any(kind == "decode" for _, _, kind, _ in h.rows)]
    assert len(chunked) >= 3                       # partial prompts really shared steps with decodes
    assert max(sum(n for *_, n in h.rows) for h in br.history) <= 24
    for r, ref in zip(reqs, alone):
        assert r.output == [t for t, _ in ref], r.name
        assert len(seen[r.name]) == len(ref)
        for got, (_, want) in zip(seen[r.name], ref):
            assert np.array_equal(got, want), r.name       # bit for bit
