"""The benchmark's plumbing (llamanb only, short runs): JSON schema, roofline arithmetic, errors.
Speed itself is never asserted here; `make bench` prints measured ratios."""
import json
import os

import pytest

from conftest import run_cli


def test_bench_json_llamanb_only(smollm, tmp_path):
    out = tmp_path / "bench.json"
    p = run_cli(["bench", "--no-transformers", "--runs", "1", "--decode-tokens", "4", "--json", out],
                cache=os.environ["LLAMANB_CACHE"])
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(out.read_text())
    eng = d["engines"]["llamanb"]
    for key in ("prefill_128_tok_s", "prefill_512_tok_s", "decode_tok_s", "peak_rss_mb"):
        assert eng[key] > 0, key
    # the roofline is bandwidth / bytes read per token: all fp32 weights once, and the cached keys
    # and values of every earlier position -- counted here from a real cache's arrays, over the
    # positions the 4 timed steps attend to after the 128-token prompt (129, 130, 131, 132)
    from llamanb.bench.runners import DECODE_CONTEXT
    from llamanb.engine.engine import Engine

    weight_bytes = smollm.config.n_params() * 4
    cache = Engine(smollm).new_cache(DECODE_CONTEXT + 8)
    per_position = (cache.k_all.nbytes + cache.v_all.nbytes) / cache.k_all.shape[3]  # [1, L, Nkv, T, d]
    positions = [DECODE_CONTEXT + j + 1 for j in range(4)]
    kv = per_position * sum(positions) / len(positions)
    assert d["model"]["kv_bytes_read_per_token"] == kv
    assert abs(d["decode_roofline_tok_s"] - d["memory_read_gb_s"] * 1e9 / (weight_bytes + kv)) < 1e-6 * \
        d["decode_roofline_tok_s"]
    assert "transformers_fp32" not in d["engines"]
    assert "llamanb (numpy fp32)" in p.stdout and "decode roofline" in p.stdout
    assert not list(tmp_path.glob("*.tmp*"))            # written atomically


def test_bench_bad_json_path_is_one_line_error(tmp_path):
    p = run_cli(["bench", "--no-transformers", "--json", tmp_path / "missing" / "b.json"],
                cache=tmp_path / "cache")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llamanb: error:") and "Traceback" not in p.stderr


def test_backend_ratios_beside_numpy():
    """`bench --backend X` adds X's decode and prefill as ratios to the numpy engine of the same
    run; the NPU2 emulation carries its 0.5x decode target, other backends none."""
    from llamanb.bench.report import ratios

    eng = {"llamanb": {"decode_tok_s": 30.0, "prefill_128_tok_s": 300.0, "prefill_512_tok_s": 350.0},
           "llamanb@npu2-emulated": {"decode_tok_s": 12.0, "prefill_128_tok_s": 150.0},
           "llamanb@tcp": {"decode_tok_s": 45.0, "prefill_128_tok_s": 600.0}}
    rows = {r["name"]: r for r in ratios(eng, roofline=60.0)}
    npu = rows["npu2-emulated decode / numpy fp32 decode"]
    assert (npu["value"], npu["target"], npu["pass"]) == (0.4, 0.5, False)
    assert rows["npu2-emulated prefill_128 / numpy fp32 prefill_128"]["value"] == 0.5
    tcp = rows["tcp decode / numpy fp32 decode"]
    assert (tcp["value"], tcp["target"], tcp["pass"]) == (1.5, None, None)


def test_bench_unknown_backend_is_one_line_error(tmp_path):
    p = run_cli(["bench", "--no-transformers", "--backend", "warp-drive"], cache=tmp_path / "cache")
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown backend 'warp-drive'" in lines[0]


def test_paired_rounds_decide_by_the_lower_quartile():
    """Issue 30 item 1: a ratio between two engines is a sample per interleaved round; its value
    is the samples' median, its spread is reported, and a target counts as met only when the
    lower quartile clears it over at least 7 rounds (fewer: undecided). Quartiles checked
    against numpy's inclusive ("linear") percentiles."""
    import numpy as np

    from llamanb.bench.report import MIN_ROUNDS, ratios, report, spread

    cpu = [50.0, 52.0, 49.0, 55.0, 51.0, 48.0, 53.0]
    peer = [50.0, 50.0, 50.0, 50.0, 50.0, 50.0, 50.0]
    sp = spread([a / b for a, b in zip(cpu, peer)])
    ref = np.percentile([a / b for a, b in zip(cpu, peer)], [0, 25, 50, 75, 100])
    assert np.allclose([sp["min"], sp["q1"], sp["median"], sp["q3"], sp["max"]], ref, rtol=1e-12)

    def engines(c, p):
        def e(d):
            return {"decode_tok_s": float(np.median(d)), "prefill_128_tok_s": 1.0,
                    "prefill_512_tok_s": 1.0, "samples_tok_s": {"decode": d, "prefill_512": [1.0] * len(d)}}
        return {"llamanb": e([1.0] * len(c)), "llamanb@cpu": e(c), "llamacpp_f32": e(p)}

    rows = {r["name"]: r for r in ratios(engines(cpu, peer), roofline=1.0)}
    dec = rows["cpu decode / llama.cpp F32 decode"]
    assert dec["value"] == sp["median"] and dec["spread"]["n"] == MIN_ROUNDS == 7
    assert dec["pass"] is False                  # median 1.02 clears 1.0, the lower quartile 0.99 not
    assert sp["median"] > 1.0 > sp["q1"]
    fast = [c * 1.05 for c in cpu]
    assert {r["name"]: r for r in ratios(engines(fast, peer), 1.0)}[
        "cpu decode / llama.cpp F32 decode"]["pass"] is True
    few = {r["name"]: r for r in ratios(engines(fast[:3], peer[:3]), 1.0)}
    assert few["cpu decode / llama.cpp F32 decode"]["pass"] is None        # undecided
    res = {"machine": {"cpu": "x", "cores": 2, "memory_gib": 1, "python": "3", "numpy": "2",
                       "openblas": {"core": "c", "threads": 2}, "torch": "t", "transformers": "t"},
           "model": {"name": "m", "n_params": 1, "weights_bytes": 4}, "memory_read": {
               "methods": {}, "array_mib": 1, "repeats": 1}, "memory_read_gb_s": 1.0,
           "decode_roofline_tok_s": 1.0, "settings": {"decode_tokens": 1, "runs": 3, "schedule": "s"},
           "peak_rss_method": "p", "engines": {}, "ratios": list(few.values())}
    text = report(res)
    assert "UNDECIDED (fewer than 7 rounds" in text and "[rounds 3: min" in text


def test_a_failed_json_write_is_one_line_after_the_table(tmp_path, capsys):
    """bench, bench --batching and bench --kernels print their table first, then write the JSON
    (report.show_and_save): a write that fails loses nothing and is one line; one that works
    leaves the whole file and no temporary beside it."""
    from llamanb.bench.report import show_and_save
    from llamanb.errors import LlamanbError

    said = []
    (tmp_path / "dir").mkdir()
    with pytest.raises(LlamanbError) as e:
        show_and_save("the table", {"a": 1}, str(tmp_path / "dir"), said.append)   # a directory
    assert capsys.readouterr().out == "the table\n" and said == []
    assert "\n" not in str(e.value) and "the results are printed above" in str(e.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir"]          # no temporary left
    show_and_save("again", {"a": 2}, str(tmp_path / "r.json"), said.append)
    assert json.loads((tmp_path / "r.json").read_text()) == {"a": 2}
    assert said == [f"wrote {tmp_path / 'r.json'}"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "r.json"]
