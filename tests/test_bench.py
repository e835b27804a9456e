"""The benchmark's plumbing (llamanb only, short runs): JSON schema, roofline arithmetic, errors.
Speed itself is never asserted here; `make bench` prints measured ratios."""
import json
import os

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
    # the roofline is bandwidth / bytes of weights read per token: all fp32 weights once
    weight_bytes = smollm.config.n_params() * 4
    assert abs(d["decode_roofline_tok_s"] - d["memory_read_gb_s"] * 1e9 / weight_bytes) < 1e-6 * \
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
