"""The calibrated NPU2 cost model: specifications in closed form, and the fitted constants and
predictions re-derived by hand from the shapes. The split, the table's text and the misses the
appendix states are pinned in tests/appendix/test_appendix_npu_cost.py."""
from __future__ import annotations

import re

import numpy as np
import pytest

from llamanb.model.config import PRESETS
from llamanb.errors import LlamanbError
from llamanb.model.flops import decode_flops, prefill_flops, total
from llamanb.npu import cost
from llamanb.npu.compiler.builders import gemv
from llamanb.npu.compiler.groups import layer_groups

CFG = PRESETS["llama3.2-1b"]
H, F, QD, KVD, V, L = CFG.hidden, CFG.ffn, CFG.q_dim, CFG.kv_dim, CFG.vocab, CFG.n_layers
PUB = {p.key: p.seconds for p in cost.PUBLISHED}


def test_specs_in_closed_form():
    s = cost.SPECS
    assert s.clock_hz * 32 * 1024 == pytest.approx(50e12)         # 50 TOPS int8 / 32 tiles
    assert s.peak_bf16_flops == pytest.approx(32 * 2 * 128 * 50e12 / (32 * 1024))
    assert s.ddr_bytes_per_s == 7500e6 * 128 / 8                   # LPDDR5X-7500, 128-bit
    assert (s.dispatch_s, s.host_write_bytes_per_s) == (100e-6, 20e9)


def test_published_figures_add_up_like_upstreams_own_sums():
    """The transcribed per-call figures against the page's own totals: 16 layers x (3.6 + 0.9)
    + 14 + 5 ~ 92 ms per token; 16 x (41.0 + 21.6 + 7.3) + 13.6 ~ the 1119 ms of NPU calls
    PROFILE.html attributes."""
    dec = L * (PUB["o_gemv_ffn"] + PUB["rms_gemv_rope"]) + PUB["lm_head_decode"] + cost.DECODE_HOST_S
    assert dec == pytest.approx(PUB["decode8"], rel=0.02)
    npu = L * (PUB["o_ffn"] + PUB["flash_attn"] + PUB["rms_gemms_rope"]) + PUB["lm_head_prefill"]
    assert npu == pytest.approx(1.119, rel=0.02)
    assert npu + cost.PREFILL_HOST_S == pytest.approx(1.28, rel=0.02)     # ~1280 ms TTFT
    assert PUB["decode3_readme"] == pytest.approx(0.082, abs=5e-4)       # 12.2 tok/s


def test_launch_flops_are_the_model_flops():
    calls = cost.prefill_calls(CFG, 2048)
    assert sum(1 for c in calls if not c.host) == 3 * L + 1
    assert sum(l.flops for c in calls for l in c.launches) == total(prefill_flops(CFG, 2048))
    for ffn in (8, 3):                              # upstream's two decode FFN designs
        dec = cost.decode_calls(CFG, 100, ffn)
        assert sum(1 for c in dec if not c.host) == 2 * L + 1
        assert [len(c.launches) for c in dec if c.name == "o_gemv_ffn"] == [ffn] * L
        assert sum(l.flops for c in dec for l in c.launches) == total(decode_flops(CFG, 100)) \
            - 2 * L * (2 * CFG.n_heads * CFG.head_dim * 101)     # attention runs on the host
    with pytest.raises(LlamanbError):
        cost.decode_calls(CFG, 100, 5)


def test_flash_attention_tiles_and_o_ffn_floor():
    """Upstream's prefill FlashAttention: 2 unrolled segments x [4 Q tiles, 4 cascade stages] =
    32 tiles; the o_ffn floor at the reference rate, from the shapes in closed form: 17.9 ms."""
    calls = cost.prefill_calls(CFG, 2048)
    (fa,) = next(c for c in calls if c.name == "flash_attn").launches
    assert (fa.kind, fa.tiles) == ("attention", 2 * 4 * 4)
    o_ffn = next(c for c in calls if c.name == "o_ffn")
    floor = 2 * 2048 * (QD * H + 3 * H * F) / (32 * 2 * 128 * 50e12 / (32 * 1024))
    assert cost.peak_seconds(o_ffn) == pytest.approx(floor)
    assert round(floor * 1e3, 1) == 17.9





def _gemv_bytes(m, k):
    return 2 * (m * k + k + m)


def test_gemv_constants_by_hand_from_the_two_decode_figures():
    """Solve launch_s and the GEMV rate by hand from o_gemv_ffn (8 launches) and rms_gemv_rope
    (6 launches): ignoring their few kB of elementwise bytes, within 3 % of the fit; with them
    (at the fitted elementwise rate; [1, 1] launches run on 1 of 8 columns), exactly."""
    w8 = _gemv_bytes(H, QD) + 2 * _gemv_bytes(F, H) + _gemv_bytes(H, F)
    w6 = _gemv_bytes(QD, H) + 2 * _gemv_bytes(KVD, H)
    b8 = PUB["o_gemv_ffn"] - 100e-6 - 2 * (QD + H) / 20e9
    b6 = PUB["rms_gemv_rope"] - 100e-6 - 2 * (H + QD + KVD) / 20e9
    r = cost.rates()
    t, inv_bw = np.linalg.solve([[8, w8], [6, w6]], [b8, b6])
    assert r.launch_s == pytest.approx(t, rel=0.03)
    assert r.gemv_bytes_s == pytest.approx(1 / inv_bw, rel=0.03)
    e8 = 2 * (3 * H + 8 * 3 * H + 3 * F + 3 * H)               # add, RMSNorm [1,1], SiLU x mul, add
    e6 = 2 * 8 * (3 * H + 3 * QD + 3 * KVD)                     # RMSNorm, RoPE q, RoPE k on [1,1]
    t, inv_bw = np.linalg.solve([[8, w8], [6, w6]], [b8 - e8 / r.eltwise_bytes_s,
                                                     b6 - e6 / r.eltwise_bytes_s])
    assert (r.launch_s, r.gemv_bytes_s) == (pytest.approx(t), pytest.approx(1 / inv_bw))
    assert 50e-6 < r.launch_s < 150e-6 and 30e9 < r.gemv_bytes_s < 50e9


def test_gemm_attention_and_eltwise_rates_close_their_equations():
    """With the fitted launch_s, each remaining constant closes its own figure in closed form."""
    r, S = cost.rates(), 2048
    elt = 2 * (2 * 2048 * H + H)                                     # RMSNorm alone: x in, y out, w
    assert PUB["rmsnorm_alone"] == pytest.approx(r.launch_s + elt / r.eltwise_bytes_s)
    elt_o_ffn = 2 * (3 * S * H + 2 * S * H + H + 3 * S * F + 3 * S * H)
    gemm = 2 * S * (QD * H + 3 * H * F)
    want = 100e-6 + 2 * 2 * S * H / 20e9 + 8 * r.launch_s + elt_o_ffn / r.eltwise_bytes_s \
        + gemm / r.gemm_flops_s
    assert PUB["o_ffn"] == pytest.approx(want)
    attn = 4 * QD * S * (S + 1) // 2
    want = 100e-6 + 2 * S * (QD + 2 * KVD) / 20e9 + r.launch_s + attn / r.attn_flops_s
    assert PUB["flash_attn"] == pytest.approx(want)


def test_lm_head_prediction_in_closed_form():
    """The LM head was never fitted: 8 GEMV launches over the vocabulary at the fitted rate."""
    r = cost.rates()
    want = 100e-6 + 2 * H / 20e9 + 8 * r.launch_s + 8 * _gemv_bytes(V // 8, H) / r.gemv_bytes_s
    rows = {x.key: x for x in cost.table_rows(CFG)}
    for key in ("lm_head_prefill", "lm_head_decode"):
        assert rows[key].role == "validation" and rows[key].circular == 0
        assert rows[key].model_s == pytest.approx(want)
        assert abs(want / PUB[key] - 1) < 0.25


def test_circular_share_of_whole_phase_rows():
    """A whole prefill or decode token is mostly calibration rows plus published host time:
    the table says how much."""
    rows = {x.key: x for x in cost.table_rows(CFG)}
    pre = rows["prefill"]
    known = L * (PUB["o_ffn"] + PUB["flash_attn"]) + cost.PREFILL_HOST_S
    assert pre.circular == pytest.approx(known / pre.model_s)
    d8, d3 = rows["decode8"], rows["decode3_commit"]
    assert d8.circular == pytest.approx(
        (L * (PUB["o_gemv_ffn"] + PUB["rms_gemv_rope"]) + cost.DECODE_HOST_S) / d8.model_s)
    assert d3.circular == pytest.approx((L * PUB["rms_gemv_rope"] + cost.DECODE_HOST_S) / d3.model_s)
    assert rows["saving_8_to_3"].circular == 0 == rows["rms_gemms_rope"].circular


def test_the_8_to_3_saving_is_reconfiguration_only():
    """Both designs stream the same weights, so the model's saving per layer is 5 launches plus
    the 8-launch design's elementwise launches (a few kB) -- nothing else."""
    r = cost.rates()
    rows = {x.key: x for x in cost.table_rows(CFG)}
    elt = 2 * (3 * H + 8 * 3 * H + 3 * F + 3 * H)
    vec8 = 2 * ((QD + H) + 2 * (H + F) + (F + H))                  # GEMV vectors in + out
    vec3 = 2 * ((QD + H) + (H + 2 * F) + (F + H))                  # gate/up read x once
    want = L * (5 * r.launch_s + elt / r.eltwise_bytes_s + (vec8 - vec3) / r.gemv_bytes_s)
    assert rows["saving_8_to_3"].model_s == pytest.approx(want)
    assert rows["decode8"].model_s - rows["decode3_commit"].model_s == pytest.approx(want)
    assert L * 5 * r.launch_s / want > 0.97


def test_fit_needs_five_independent_figures():
    with pytest.raises(LlamanbError):
        cost.fit(CFG, calibration=cost.CALIBRATION[:4])
    with pytest.raises(LlamanbError):                     # two figures fixing the same constant
        cost.fit(CFG, calibration=("o_gemv_ffn", "rms_gemv_rope", "rmsnorm_alone", "o_ffn",
                                   "lm_head_decode"))
    with pytest.raises(LlamanbError):
        cost.predict(CFG, 0)


def test_kernel_time_of_a_kernel_and_a_stitched_group():
    r = cost.rates()
    spec = gemv(64, 128)
    writes = sum(a.nbytes for a in spec.args if a.role == "input")
    assert cost.kernel_time(spec) == pytest.approx(
        100e-6 + writes / 20e9 + r.launch_s + 2 * (64 * 128 + 128 + 64) / r.gemv_bytes_s)
    cfg = PRESETS["smollm2-135m"]
    groups = layer_groups(cfg, seq=128)
    head = groups["lm_head_gemv"].spec
    w = 8 * _gemv_bytes(cfg.vocab // 8, cfg.hidden) if cfg.vocab % 8 == 0 else None
    writes = sum(a.nbytes for a in head.args if a.role == "input")
    assert w is not None and cost.kernel_time(head) == pytest.approx(
        100e-6 + writes / 20e9 + 8 * r.launch_s + w / r.gemv_bytes_s)
    # the 3-launch FFN group: fewer launches than members, charged per launch
    g3, g8 = groups["o_gemv_ffn3"].spec, groups["o_gemv_ffn"].spec
    n3 = len(g3.params["launches"])
    assert n3 < len(g3.params["members"])
    assert cost.kernel_time(g3) < cost.kernel_time(g8)


def test_profile_table_is_labelled_estimated():
    table = cost.profile_table(cost.decode_calls(CFG, 1024), "decode")
    assert "ESTIMATED" in table
    shares = [x[3] for x in cost.profile(cost.decode_calls(CFG, 1024))]
    assert sum(shares) == pytest.approx(1.0)
    assert re.search(r"launch_s\s+\d", cost.rates_table())


def test_registry_rows_are_one_launch_at_the_class_rate():
    """Upstream's registry times single kernels alone: one launch_s plus the work, no dispatch.
    GEMM figures are its GFLOP/s turned into seconds; the model's value in closed form."""
    r = cost.rates()
    rows = {x.key: x for x in cost.table_rows(CFG)}
    assert rows["gemm_gate_alone"].published_s == pytest.approx(2 * 2048 * 2048 * 8192 / 6893e9)
    assert rows["gemm_gate_alone"].model_s == pytest.approx(
        r.launch_s + 2 * 2048 * 2048 * 8192 / r.gemm_flops_s)
    assert rows["gemv_head_alone"].model_s == pytest.approx(
        r.launch_s + _gemv_bytes(16384, 2048) / r.gemv_bytes_s)
    assert rows["attn_alone"].model_s == pytest.approx(
        r.launch_s + 4 * QD * (2048 * 2049 // 2) / r.attn_flops_s)
