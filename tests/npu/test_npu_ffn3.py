"""o_gemv_ffn3, the 3-launch decode FFN with one packed gate/up GEMV: its launches and arguments
read back from the stitched text, the text verified by upstream MLIR, and on the emulated NPU2 the
same bits as the 8-launch o_gemv_ffn and the numpy engine's layer-0 decode output within bf16."""
from __future__ import annotations

import numpy as np
import pytest

import llamanb
from llamanb.model.config import LLAMA32_1B, SMOLLM2_135M
from llamanb.engine.engine import Engine
from llamanb.errors import LlamanbError
from llamanb.npu.compiler import verify as V
from llamanb.npu.compiler.builders import add, flash_attn, gemv
from llamanb.npu.compiler.emulator import run
from llamanb.npu.compiler.groups import decode_groups
from llamanb.npu.compiler.plan import read_plan
from llamanb.npu.compiler.stitch import Member, run_one_by_one, stitch
from llamanb.model.numerics import to_bf16
from llamanb.engine.step import Step


@pytest.mark.parametrize("cfg", [SMOLLM2_135M, LLAMA32_1B], ids=["smollm2", "llama32_1b"])
def test_three_launches_read_from_the_text(cfg):
    gs = decode_groups(cfg)
    g3, g8 = gs["o_gemv_ffn3"], gs["o_gemv_ffn"]
    # counted in the text: one air.launch per run of members, their herds in member order
    assert g3.launches == g3.spec.text.count('"air.launch"(') == len(g3.launch_runs)
    assert g8.launches == g8.spec.text.count('"air.launch"(') == len(g8.members)
    assert g3.launches < g8.launches
    # the herds, in order, are the members' own herds (each read from the member's own module)
    assert [h[0] for h in g3.herds] == [h.op for m in g3.members
                                        for lp in read_plan(m.spec.text).launches for h in lp.herds]
    per_launch = [[h.op for h in lp.herds] for lp in g3.plan.launches]
    assert per_launch == [["gemv", "add"], ["rmsnorm", "gemv", "silu_and_mul"], ["gemv", "add"]]
    # gate and up are one GEMV over the packed [2F, H] weight: one fewer weight, buffer, launch arg
    args3 = dict(g3.plan.args)
    assert args3["%arg" + str(g3.spec.arg_index("w_gate_up"))] == \
        f"memref<{2 * cfg.ffn}x{cfg.hidden}xbf16>"
    assert len(g8.plan.args) - len(g3.plan.args) == 2        # w_gate, w_up, g, u -> w_gate_up, gu
    roles = {a.name: a.role for a in g3.spec.args}
    assert roles["gu"] == roles["h"] == roles["act"] == "intermediate" and roles["out"] == "output"
    # the residual h crosses launches through DDR: written by launch 0, read by launches 1 and 2
    h = g3.spec.arg_index("h")
    assert [h in lp.args for lp in g3.plan.launches] == [True, True, True]


@pytest.mark.skipif(not V.available(), reason="MLIR Python bindings not installed")
def test_ffn3_verifies_with_upstream_mlir():
    for cfg in (SMOLLM2_135M, LLAMA32_1B):
        V.verify(decode_groups(cfg)["o_gemv_ffn3"].spec.text)


def test_launch_runs_are_checked():
    a, b = gemv(16, 8, tile_m=2), add(1, 16, herd_xy=(8, 1), flat=(True, True, True))
    ms = [Member(a, {"a": "w", "x": "x", "y": "y"}, "mv"),
          Member(b, {"a": "y", "b": "r", "out": "z"}, "res")]
    for bad in ([[1, 0]], [[0]], [[0], [], [1]]):
        with pytest.raises(LlamanbError, match="launches="):
            stitch("g", ms, launches=bad)
    one = stitch("g", ms, launches=[[0, 1]])
    assert one.text.count('"air.launch"(') == 1 and one.text.count('"air.segment"(') == 1
    assert one.text.count('"air.herd"(') == 2
    # a launch that iterates (FlashAttention's Q tiles) cannot share one with another kernel
    with pytest.raises(LlamanbError, match="iterates more than once"):
        stitch("g", [Member(flash_attn(128, 4, 2, 64), {}, "fa"), ms[1]], launches=[[0, 1]])


def test_ffn3_equals_ffn8_bit_for_bit_and_engine_within_bf16():
    model = llamanb.load_model()
    cfg, lw = model.config, model.weights.layers[0]
    H, F = cfg.hidden, cfg.ffn
    eng = Engine(model)
    b = eng.backend
    prompt = [1, 2, 3, 4, 5, 6]
    P = len(prompt) - 1
    cache = eng.new_cache(16)
    eng.prefill(prompt[:P], cache)
    x = b.embed(np.array(prompt[P:]))                                      # [1, H]
    ref = b.block(0, x.copy(), Step.build([(0, P, prompt[P:])]), cache)    # [1, H] engine's layer
    # the attention output for the new token on the host (float64) over the engine's cache, with
    # q from rms_gemv_rope, as the decode path does between the two groups
    from llamanb.npu.compiler.builders import rope_lut
    g1 = decode_groups(cfg)["rms_gemv_rope"].spec
    qd, kvd = cfg.q_dim, cfg.kv_dim
    feed = {"x": x[0], "attn_norm": lw.attn_norm, "wq": lw.wqkv[:qd], "wk": lw.wqkv[qd:qd + kvd],
            "wv": lw.wqkv[qd + kvd:], "lut_q": rope_lut([P], cfg.n_heads, b.freqs)[0],
            "lut_k": rope_lut([P], cfg.n_kv_heads, b.freqs)[0]}
    a1 = [np.ascontiguousarray(feed[a.name], np.float32) if a.name in feed
          else np.zeros(a.shape, np.float32) for a in g1.args]
    run(g1, *a1)
    q = a1[g1.arg_index("q")].reshape(cfg.n_heads, cfg.head_dim).astype(np.float64)
    K = cache.keys(0, 0, P + 1).astype(np.float64)
    Vv = cache.values(0, 0, P + 1).astype(np.float64)
    attn = np.zeros((cfg.n_heads, cfg.head_dim))
    for h in range(cfg.n_heads):
        s = K[h // cfg.group] @ q[h] / np.sqrt(cfg.head_dim)
        p = np.exp(s - s.max())
        attn[h] = p / p.sum() @ Vv[h // cfg.group]
    attn = to_bf16(attn.reshape(-1).astype(np.float32))

    gs = decode_groups(cfg)
    common = {"x": x[0], "attn": attn, "wo": lw.wo, "ffn_norm": lw.ffn_norm, "w_down": lw.w_down}

    def feed_for(spec, extra):
        f = {**common, **extra}
        return [np.ascontiguousarray(f[a.name], np.float32) if a.name in f
                else np.zeros(a.shape, np.float32) for a in spec.args]

    s8, s3 = gs["o_gemv_ffn"].spec, gs["o_gemv_ffn3"].spec
    a8 = feed_for(s8, {"w_gate": lw.w_gate_up[:F], "w_up": lw.w_gate_up[F:]})
    a3 = feed_for(s3, {"w_gate_up": lw.w_gate_up})          # the checkpoint's [2F, H] as is
    r8, r3 = run(s8, *a8), run(s3, *a3)
    assert "emulated" in str(r3)
    assert (r8.launches, r3.launches) == (gs["o_gemv_ffn"].launches, gs["o_gemv_ffn3"].launches)
    # same bf16 arithmetic in another launch structure: every shared buffer equal bit for bit
    for name in ("o", "h", "hn", "act", "down", "out"):
        assert np.array_equal(a8[s8.arg_index(name)], a3[s3.arg_index(name)]), name
    gu = a3[s3.arg_index("gu")]
    assert np.array_equal(gu[:F], a8[s8.arg_index("g")])
    assert np.array_equal(gu[F:], a8[s8.arg_index("u")])
    # and the members run one by one (one module each) give the same bits as the 3 launches
    one = feed_for(s3, {"w_gate_up": lw.w_gate_up})
    run_one_by_one(s3, gs["o_gemv_ffn3"].members, one)
    assert all(np.array_equal(p, r) for p, r in zip(a3, one))

    # against the numpy engine's layer output: within bf16 rounding of its magnitude
    out = a3[s3.arg_index("out")]
    ulp = 2.0 ** (np.floor(np.log2(np.abs(ref).max())) - 7)
    err = np.abs(out - ref[0])
    assert err.max() <= 8 * ulp, (err.max(), ulp)
    assert np.median(err) <= 2.0**-7 * np.median(np.abs(ref))


def test_corrupted_packing_changes_the_result():
    """Feeding up rows where gate rows belong (a wrong host layout) is seen, not absorbed."""
    model = llamanb.load_model()
    cfg, lw = model.config, model.weights.layers[0]
    F = cfg.ffn
    s3 = decode_groups(cfg)["o_gemv_ffn3"].spec
    rng = np.random.default_rng(0)
    base = {"x": to_bf16(rng.standard_normal(cfg.hidden).astype(np.float32)),
            "attn": to_bf16(rng.standard_normal(cfg.q_dim).astype(np.float32)),
            "wo": lw.wo, "ffn_norm": lw.ffn_norm, "w_down": lw.w_down}
    outs = []
    for w in (lw.w_gate_up, np.concatenate([lw.w_gate_up[F:], lw.w_gate_up[:F]])):
        f = {**base, "w_gate_up": w}
        arr = [np.ascontiguousarray(f[a.name], np.float32) if a.name in f
               else np.zeros(a.shape, np.float32) for a in s3.args]
        run(s3, *arr)
        outs.append(arr[s3.arg_index("out")].copy())
    assert np.abs(outs[0] - outs[1]).max() > 0.01
