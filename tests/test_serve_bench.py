"""The batching benchmark's plumbing on a tiny workload (speed itself is never asserted), and the
serving engine's unpadded decode-only steps."""
import numpy as np

from llamanb import Engine
from llamanb.bench import batching
from llamanb.serve.engine import ServeEngine
from llamanb.step import Step


def test_batching_table_counts_and_ratios(smollm):
    res = batching.measure(None, 1, n_requests=4, slot_counts=(8,), prompt_range=(5, 20),
                           new_range=(2, 5))
    want = sum(res["workload"]["max_new_tokens"])            # no stop ids: every token is made
    t = res["table"]
    assert set(t) == {"one_at_a_time/1", "static/8", "continuous/8"}
    for row in t.values():
        assert row["tokens"] == want
        assert abs(row["tok_s"] - want / row["seconds"]) < 1e-9 * row["tok_s"]
        assert 0 < row["ttft_p50_s"] <= row["latency_p50_s"] <= row["latency_p90_s"]
    # four requests in eight slots: static and continuous admit all four at once, so both run
    # as many steps as the longest request needs tokens (its prompt fits one step)
    assert t["continuous/8"]["steps"] == t["static/8"]["steps"] == max(res["workload"]["max_new_tokens"])
    r = {x["name"]: x["value"] for x in res["ratios"]}
    assert r["continuous / one at a time, 8 slots"] == t["continuous/8"]["tok_s"] / t["one_at_a_time/1"]["tok_s"]
    assert r["continuous / static, 8 slots"] == t["continuous/8"]["tok_s"] / t["static/8"]["tok_s"]
    text = batching.report(res)
    assert "continuous" in text and "target >= 3.0x" in text


def test_serve_engine_runs_decode_only_steps_unpadded(smollm, monkeypatch):
    base, serve = Engine(smollm), ServeEngine(smollm)
    rows = []
    real = serve.backend.layers

    def spy(x, step, cache, collect=None):
        rows.append(step.rows)
        return real(x, step, cache, collect)

    monkeypatch.setattr(serve.backend, "layers", spy)
    prompts = [[5, 6, 7], [8, 9, 10, 11], [12, 13]]
    outs = []
    for eng in (base, serve):
        cache = eng.new_cache(64, slots=3)
        first = eng.step(Step.build([(s, 0, p) for s, p in enumerate(prompts)]), cache)
        toks = first.argmax(axis=1)
        outs.append(eng.step(Step.build([(s, len(p), [int(t)]) for s, (p, t) in
                                         enumerate(zip(prompts, toks))]), cache))
    m = serve.backend.row_multiple
    assert rows == [-(-9 // m) * m, 3]              # the prompt step padded, the decode step not
    np.testing.assert_allclose(outs[1], outs[0], rtol=0, atol=2e-4)
    assert (outs[1].argmax(axis=1) == outs[0].argmax(axis=1)).all()


def test_bench_batching_flag_reaches_the_batching_runner(monkeypatch):
    from llamanb import cli
    from llamanb.bench import batching as b

    seen = []
    monkeypatch.setattr(b, "main", lambda args: seen.append(args.runs) or 0)
    assert cli.main(["bench", "--batching", "--runs", "2"]) == 0 and seen == [2]
