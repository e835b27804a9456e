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
