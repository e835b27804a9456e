"""The spec-only cost model: its inputs are specifications (checked in closed form), its FLOPs
are llamanb.flops' (summed over the launches), its call counts follow the model config."""
from __future__ import annotations

import pytest

from llamanb.config import PRESETS
from llamanb.errors import LlamanbError
from llamanb.flops import decode_flops, prefill_flops, total
from llamanb.npu import cost
from llamanb.npu.builders import gemv

CFG = PRESETS["llama3.2-1b"]


def test_specs_in_closed_form():
    s = cost.SPECS
    assert s.clock_hz * 32 * 1024 == pytest.approx(50e12)         # 50 TOPS int8 / 32 tiles
    assert s.peak_bf16_flops == pytest.approx(32 * 2 * 128 * 50e12 / (32 * 1024))
    assert s.ddr_bytes_per_s == 7500e6 * 128 / 8                   # LPDDR5X-7500, 128-bit
    assert s.read_bandwidth(8) == pytest.approx(8 * 4 * s.clock_hz)
    assert s.read_bandwidth(32) == pytest.approx(16 * 4 * s.clock_hz)   # 2 channels x 8 columns


def test_launch_flops_are_the_model_flops():
    S = 2048
    calls = cost.prefill_calls(CFG, S)
    assert sum(1 for c in calls if not c.host) == 3 * CFG.n_layers + 1
    flops = sum(l.flops for c in calls for l in c.launches)
    assert flops == total(prefill_flops(CFG, S))
    for ffn in (8, 3):                              # upstream's two decode FFN designs
        dec = cost.decode_calls(CFG, 100, ffn)
        assert sum(1 for c in dec if not c.host) == 2 * CFG.n_layers + 1
        assert [len(c.launches) for c in dec if c.name == "o_gemv_ffn"] == [ffn] * CFG.n_layers
        assert sum(l.flops for c in dec for l in c.launches) == total(decode_flops(CFG, 100)) \
            - 2 * CFG.n_layers * (2 * CFG.n_heads * CFG.head_dim * 101)   # host attention
    with pytest.raises(LlamanbError):
        cost.decode_calls(CFG, 100, 5)


def test_flash_attention_tiles_and_o_ffn_peak():
    """Upstream's prefill FlashAttention: num_heads_per_unroll (2, the builder's default)
    segments side by side, each a [num_q_tiles=4, num_cascade_stages=4] herd: 32 tiles. And the
    peak-arithmetic floor of o_ffn at 2048 rows, from the shapes in closed form: 17.9 ms."""
    calls = cost.prefill_calls(CFG, 2048)
    (fa,) = next(c for c in calls if c.name == "flash_attn").launches
    assert fa.tiles == 2 * 4 * 4
    o_ffn = next(c for c in calls if c.name == "o_ffn")
    S, H, F = 2048, CFG.hidden, CFG.ffn
    floor = 2 * S * (CFG.q_dim * H + 3 * H * F) / (32 * 2 * 128 * 50e12 / (32 * 1024))
    assert cost.peak_seconds(o_ffn) == pytest.approx(floor)
    assert round(floor * 1e3, 1) == 17.9
    rows = {r[0]: r for r in cost.compare_kernels(CFG, 2048)}
    assert rows.keys() == cost.PUBLISHED_KERNELS.keys()
    for name, pub, est, ratio in rows.values():
        assert est == pytest.approx(next(c for c in calls if c.name == name).seconds())
        assert ratio == pytest.approx(pub / est)


def test_gemv_is_stream_bound_and_lm_head_reads_its_matrix():
    t = cost.lm_head_call(CFG).seconds()
    stream = 8 * 4 * cost.SPECS.clock_hz
    want = 100e-6 + (CFG.vocab * CFG.hidden * 2 + CFG.vocab * 2) / stream \
        + (CFG.hidden + CFG.vocab) * 2 / 20e9
    assert t == pytest.approx(want)
    spec = gemv(64, 128)
    assert cost.kernel_time(spec) == pytest.approx(100e-6 + (64 * 128 + 128 + 64) * 2 / stream)


def test_comparison_reports_each_error():
    rows = cost.compare(CFG, 2048)
    p = cost.predict(CFG, 2048)
    assert len(rows) == len(cost.PUBLISHED)
    for (label, pub, pred, err), (pub_want, design) in zip(rows, cost.PUBLISHED.values()):
        assert pub == pub_want          # each figure against the design it was measured on
        assert pred == (p["prefill_s"] if design == "prefill" else p["decode_s"][design])
        assert err == pytest.approx(pred / pub - 1)
    table = cost.profile_table(cost.decode_calls(CFG, 1024), "decode")
    assert "ESTIMATED" in table
    shares = [r[3] for r in cost.profile(cost.decode_calls(CFG, 1024))]
    assert sum(shares) == pytest.approx(1.0)
    with pytest.raises(LlamanbError):
        cost.predict(CFG, 0)
