"""Continuous batching must never change a request's tokens.

The reference for every request is the same request generated alone by llamanb.engine.generate (one
sequence, a contiguous cache, its own random generator). In a batch-invariant engine every row's
arithmetic is independent of its step-mates, so the tokens -- greedy and sampled with the same
seed -- must be identical, whatever the slot count, the arrival order, the chunking of long
prompts, or preemptions in between.
"""
import numpy as np
import pytest

from llamanb import Engine
from llamanb.errors import LlamanbError
from llamanb.engine.generate import SamplingParams, generate
from llamanb.serve import BatchRunner, Status


@pytest.fixture(scope="module")
def eng(smollm):
    return Engine(smollm, batch_invariant=True)


def workload(seed, n, max_prompt=200, max_new=8):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        prompt = [int(t) for t in rng.integers(3, 49152, int(rng.integers(3, max_prompt)))]
        params = SamplingParams(temperature=float(rng.choice([0.0, 0.7])), top_p=0.9, seed=seed + i)
        out.append((prompt, int(rng.integers(1, max_new)), params))
    return out


def alone(eng, work):
    return [generate(eng, p, k, params, stop_ids=()).ids for p, k, params in work]


@pytest.mark.parametrize("seed, slots, order", [(1, 3, "fifo"), (2, 2, "reversed"), (3, 5, "fifo")])
def test_batched_tokens_equal_alone(eng, seed, slots, order):
    work = workload(seed, 5)
    ref = alone(eng, work)
    idx = list(range(len(work)))[:: -1 if order == "reversed" else 1]
    br = BatchRunner(eng, slots=slots, block=16, kv_positions=2048)
    reqs = {i: br.add(work[i][0], work[i][1], work[i][2], stop_ids=()) for i in idx}
    finished = br.run()
    assert sorted(r.name for r in finished) == sorted(r.name for r in reqs.values())
    for i, r in reqs.items():
        assert r.status is Status.FINISHED and r.output == ref[i], i
    assert max(len(h.rows) for h in br.history) <= slots
    assert any(len(h.rows) > 1 for h in br.history)        # requests really shared steps


def test_preempted_requests_resume_exactly(eng):
    """A pool of 8 blocks of 8 positions for three requests that need 3-4 blocks each: the
    newest is preempted when the others grow, goes back to the queue head, replays its
    generated tokens one per step, and still ends with the tokens it has alone."""
    work = [([int(t) for t in np.random.default_rng(40 + i).integers(3, 49152, n)], k,
             SamplingParams(temperature=0.8, seed=i)) for i, (n, k) in enumerate([(20, 10), (17, 12), (9, 14)])]
    ref = alone(eng, work)
    br = BatchRunner(eng, slots=3, block=8, kv_positions=64, token_budget=128)
    reqs = [br.add(p, k, s, stop_ids=()) for p, k, s in work]
    br.run()
    assert sum(r.preemptions for r in reqs) >= 1
    assert any(kind == "replay" for h in br.history for _, _, kind, _ in h.rows)
    assert [r.output for r in reqs] == ref
    assert max(h.blocks_used for h in br.history) <= 8
    assert len(br.cache.free_blocks) == 8 and not br.cache.k_pool.any()   # all given back


def test_long_prompt_is_chunked_beside_decoding_rows(eng):
    """A 300-token prompt arrives while a short request decodes: with a budget of 129 rows it
    goes in chunks of 128 (+ its tail) and the decoding row runs in every one of those steps."""
    short = ([5, 6, 7, 8], 6, SamplingParams())
    long = ([int(t) for t in np.random.default_rng(9).integers(3, 49152, 300)], 3, SamplingParams())
    ref = alone(eng, [short, long])
    br = BatchRunner(eng, slots=2, block=16, kv_positions=1024, token_budget=129)
    a = br.add(*short, stop_ids=())
    br.step()                                              # the short one is decoding now
    b = br.add(*long, stop_ids=())
    br.run()
    chunks = [n for h in br.history for _, name, kind, n in h.rows if name == b.name and kind == "prefill"]
    assert chunks == [128, 128, 44]
    for h in br.history[1:4]:                              # the three chunk steps
        assert (a.name, "decode", 1) in [row[1:] for row in h.rows]
        assert sum(n for *_, n in h.rows) <= 129
    assert [a.output, b.output] == ref


def test_static_batching_waits_for_the_longest(eng):
    work = [([11, 12, 13], 2, SamplingParams()), ([14, 15], 6, SamplingParams()),
            ([16, 17, 18, 19], 3, SamplingParams())]
    ref = alone(eng, work)
    br = BatchRunner(eng, slots=2, block=16, kv_positions=512, policy="static")
    reqs = [br.add(p, k, s, stop_ids=()) for p, k, s in work]
    br.run()
    assert [r.output for r in reqs] == ref
    # the third request starts only after the longest of the first batch (6 tokens) is done
    first_of = {name: h.index for h in reversed(br.history) for _, name, _, _ in h.rows}
    last_of = {name: h.index for h in br.history for _, name, _, _ in h.rows}
    assert first_of[reqs[2].name] == last_of[reqs[1].name] + 1
    assert last_of[reqs[0].name] < last_of[reqs[1].name]   # its slot idled meanwhile


def test_bad_request_is_rejected_alone(eng):
    br = BatchRunner(eng, slots=2, block=16, kv_positions=64)
    ok = br.add([5, 6, 7], 3, stop_ids=())
    for bad in (dict(prompt=[]), dict(prompt=[5, 49152]), dict(prompt="hi"),
                dict(prompt=[5], max_new_tokens=0), dict(prompt=list(range(3, 60)), max_new_tokens=20)):
        with pytest.raises(LlamanbError):
            br.add(**bad)
    with pytest.raises(LlamanbError):
        SamplingParams(top_p=0)
    assert [r.name for r in br.run()] == [ok.name]
    assert ok.output == generate(eng, [5, 6, 7], 3, stop_ids=()).ids


def test_stop_ids_end_a_request_early(eng):
    p = [5, 6, 7, 8, 9]
    first = generate(eng, p, 1, stop_ids=()).ids[0]
    br = BatchRunner(eng, slots=2, block=16, kv_positions=256)
    r = br.add(p, 10, stop_ids=(first,))
    other = br.add([20, 21], 3, stop_ids=())
    br.run()
    assert r.output == [first] and r.stop_reason == "eos"
    assert other.stop_reason == "length" and len(other.output) == 3
    assert r.ttft_s > 0 and r.queue_s >= 0 and r.latency_s >= r.ttft_s
