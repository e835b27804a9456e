"""The batching benchmark's plumbing on a tiny workload (speed itself is never asserted), and the
engine's unpadded decode-only steps."""
import numpy as np

from llamanb import Engine
from llamanb.bench import batching
from llamanb.model.reference import forward
from llamanb.engine.step import Step


def test_batching_table_counts_and_ratios(smollm):
    res = batching.measure(None, 1, n_requests=4, slot_counts=(8,), prompt_range=(5, 20),
                           new_range=(2, 5))
    want = sum(res["workload"]["max_new_tokens"])            # no stop ids: every token is made
    t = res["table"]
    assert set(t) == {"one_at_a_time/1", "static/8", "continuous/8", "continuous_lof/8"}
    for row in t.values():
        assert row["tokens"] == want
        assert abs(row["tok_s"] - want / row["seconds"]) < 1e-9 * row["tok_s"]
        assert 0 < row["ttft_p50_s"] <= row["latency_p50_s"] <= row["latency_p90_s"]
    # four requests in eight slots: every mode admits all four at once, so each runs as many
    # steps as the longest request needs tokens (its prompt fits one step)
    longest = max(res["workload"]["max_new_tokens"])
    assert t["continuous/8"]["steps"] == t["static/8"]["steps"] == t["continuous_lof/8"]["steps"] == longest
    assert res["bound"]["steps_at_least"] == longest
    r = {x["name"]: x["value"] for x in res["ratios"]}
    assert r["continuous / one at a time, 8 slots"] == t["continuous/8"]["tok_s"] / t["one_at_a_time/1"]["tok_s"]
    assert r["continuous / static, 8 slots"] == t["continuous/8"]["tok_s"] / t["static/8"]["tok_s"]
    assert r["continuous lof / one at a time, 8 slots"] == \
        t["continuous_lof/8"]["tok_s"] / t["one_at_a_time/1"]["tok_s"]
    c = t["continuous/8"]
    assert 0 < c["prompt_steps_s"] <= c["seconds"]
    assert c["decode_rows_in_other_steps"] <= want
    one = t["one_at_a_time/1"]
    assert 0 < one["prefill_s"] and 0 < one["decode_s"] and one["prefill_s"] + one["decode_s"] <= one["seconds"]
    # the ceiling's arithmetic, on numbers worked by hand: 10 s / (2 s + 80 rows x 0.08 s / 8)
    assert abs(batching.ceiling({"seconds": 10.0}, {"prompt_steps_s": 2.0, "decode_rows_in_other_steps": 80,
                                                    "full_decode_step_s": 0.08}, 8) - 10 / 2.8) < 1e-12
    # and its inverse: the full step at which that ceiling is the target, 10 s / 3 = 2 s + 80 x t / 8
    # -> t = 4/30 s; a prompt share past 1/3 leaves none; the measured run's own line printed
    need = batching.step_for({"seconds": 10.0}, {"prompt_steps_s": 2.0, "decode_rows_in_other_steps": 80}, 8, 3.0)
    assert abs(need - 4 / 30) < 1e-12
    assert abs(batching.ceiling({"seconds": 10.0}, {"prompt_steps_s": 2.0, "decode_rows_in_other_steps": 80,
                                                    "full_decode_step_s": need}, 8) - 3.0) < 1e-12
    assert batching.step_for({"seconds": 10.0}, {"prompt_steps_s": 3.5, "decode_rows_in_other_steps": 80}, 8, 3.0) is None
    assert res["bound"]["target"] == 3.0 and "what 3.0x needs: " in batching.report(res)
    # one round: a paired sample each, and no verdict (targets need 7 rounds' lower quartile)
    assert all(x["spread"]["n"] == 1 and x["pass"] is None for x in res["ratios"])
    text = batching.report(res)
    assert "continuous" in text and "target >= 3.0x" in text and "UNDECIDED (fewer than 7" in text
    assert f"continuous lof {longest}; no schedule takes fewer than {longest}" in text


def test_fewest_steps_is_the_best_packing(smollm):
    """fewest_steps against every assignment of the requests to slots (brute force), and on the
    benchmark's own 16 requests, where the simple bound (the longest request, or the tokens over
    8) says 62: ten requests of 23 tokens or more into 8 slots put two of them in one slot at
    least twice, and the best two such pairs, 23 + 39 (or 38) and 34 + 36, make 70."""
    import itertools

    rng = np.random.default_rng(5)
    for _ in range(60):
        n, slots = int(rng.integers(1, 8)), int(rng.integers(1, 4))
        ks = [int(k) for k in rng.integers(1, 30, n)]
        best = min(max(sum(k for k, s in zip(ks, a) if s == j) for j in range(slots))
                   for a in itertools.product(range(slots), repeat=n))
        assert batching.fewest_steps(ks, slots) == best, (ks, slots)
    from llamanb.bench.runners import PROMPT_TEXT
    from llamanb.serve.workload import mixed_workload

    unit = smollm.tokenizer.encode(PROMPT_TEXT, add_special_tokens=False)    # as measure() makes it
    ks = [k for _, k in mixed_workload(unit, 16)]
    assert sorted(ks, reverse=True) == [62, 59, 48, 44, 39, 38, 38, 36, 34, 23, 17, 13, 10, 9, 8, 8]
    assert max(max(ks), -(-sum(ks) // 8)) == 62 and batching.fewest_steps(ks, 8) == 70


def test_decode_only_steps_run_unpadded_unless_batch_invariant(smollm, monkeypatch):
    """The default engine pads prompt steps to the row multiple and runs decode-only steps at
    their own size; a batch-invariant engine pads both. Either way the decode logits agree with
    decoding each sequence alone to float32 closeness (the lone decode is a GEMV)."""
    prompts = [[5, 6, 7], [8, 9, 10, 11], [12, 13]]
    b = Engine(smollm).backend
    a, m = b.row_align, b.row_multiple
    def padded_rows(lengths):
        # from the backend's own two numbers: each sequence starts at the next row that is a
        # multiple of row_align, and the step is padded up to a multiple of row_multiple
        end = 0
        for n in lengths:
            end = -(-end // a) * a + n
        return -(-end // m) * m

    prompt_rows = padded_rows(map(len, prompts))
    # batch-invariant decode: every one-row segment aligned too (SkylakeX: rows 0, 8, 16 -> 24;
    # Haswell: 0, 12, 24 -> 48)
    for invariant, want in ((False, [prompt_rows, 3]), (True, [prompt_rows, padded_rows([1] * 3)])):
        eng = Engine(smollm, batch_invariant=invariant)
        rows = []
        real = eng.backend.layers

        def spy(x, step, cache, collect=None, real=real, rows=rows):
            rows.append(step.rows)
            return real(x, step, cache, collect)

        monkeypatch.setattr(eng.backend, "layers", spy)
        cache = eng.new_cache(64, slots=3)
        toks = eng.step(Step.build([(s, 0, p) for s, p in enumerate(prompts)]), cache).argmax(axis=1)
        batch = eng.step(Step.build([(s, len(p), [int(t)]) for s, (p, t) in
                                     enumerate(zip(prompts, toks))]), cache)
        assert rows == want
        for s, (p, t) in enumerate(zip(prompts, toks)):     # against the float64 forward
            want64 = forward(smollm.weights, list(p) + [int(t)], rows=[len(p)])[0]
            assert np.abs(batch[s] - want64).max() < 2e-3


def test_bench_batching_flag_reaches_the_batching_runner(monkeypatch):
    from llamanb import cli
    from llamanb.bench import batching as b

    seen = []
    monkeypatch.setattr(b, "main", lambda args: seen.append(args.runs) or 0)
    assert cli.main(["bench", "--batching", "--runs", "2"]) == 0 and seen == [2]
