"""The production groups: counts read from the stitched modules match the layer's structure, every
module verifies, and one decode layer (plus the LM head) of the embedded SmolLM2 run on the emulated
NPU2 equals the numpy engine's block within bf16 rounding."""
from __future__ import annotations

import numpy as np
import pytest

import llamanb
from llamanb.model.config import LLAMA32_1B, SMOLLM2_135M
from llamanb.engine.engine import Engine
from llamanb.npu.compiler import verify as V
from llamanb.npu.compiler.emulator import run
from llamanb.npu.compiler.groups import DECODE, PREFILL, decode_groups, group_table, layer_groups
from llamanb.npu.compiler.builders import rope_lut
from llamanb.model.numerics import to_bf16
from llamanb.model.ops import rms_norm
from llamanb.engine.step import Step


@pytest.mark.parametrize("cfg", [SMOLLM2_135M, LLAMA32_1B], ids=["smollm2", "llama32_1b"])
def test_layout_counts_from_the_text(cfg):
    gs = layer_groups(cfg, seq=128)
    assert tuple(gs) == PREFILL + DECODE
    for g in gs.values():
        # one launch per run of members (one member each unless the group merges them), one
        # herd per member; one function argument per distinct group buffer
        assert g.launches == len(g.launch_runs)
        assert len(g.herds) == len(g.members)
        assert len(g.plan.args) == len({n for m in g.members for n in m.argmap.values()}
                                       | set(a.name for a in g.spec.args))
        assert all(not lp.bare for lp in g.plan.launches)
    assert gs["flash_attn"].launches == 1
    assert gs["lm_head_gemv"].launches == 8
    # a buffer handed from one launch to a later one never leaves the device
    o = {a.name: a.role for a in gs["o_gemv_ffn"].spec.args}
    assert o["h"] == o["hn"] == o["act"] == "intermediate" and o["out"] == "output"
    assert "o_gemv_ffn" in group_table(gs)


def test_group_table_fits_a_notebook_column_and_keeps_every_herd():
    gs = layer_groups(LLAMA32_1B, seq=128)
    for width in (120, 90):
        text = group_table(gs, width=width)
        assert max(len(line) for line in text.splitlines()) <= width
        # every herd of every group is in its row, in launch order, runs counted ("3x gemm 8x4")
        rows, cur = {}, None
        for line in text.splitlines()[1:]:
            if not line.startswith(" "):
                cur = line.split()[0]
                rows[cur] = line.split("  ")[-1].strip()
            else:
                rows[cur] += " " + line.strip()
        for g in gs.values():
            listed = []
            for item in rows[g.name].split(", "):
                n, _, herd = item.partition("x ") if item[0].isdigit() else ("1", "", item)
                listed += [herd.strip(",")] * int(n)
            assert listed == [f"{op} {x}x{y}" for op, (x, y), _ in g.herds], g.name


@pytest.mark.skipif(not V.available(), reason="MLIR Python bindings not installed")
def test_every_group_verifies():
    for g in layer_groups(SMOLLM2_135M, seq=128).values():
        V.verify(g.spec.text)


@pytest.fixture(scope="module")
def model():
    return llamanb.load_model()


def test_decode_layer_and_head_match_numpy_engine(model):
    cfg, lw = model.config, model.weights.layers[0]
    eng = Engine(model)
    b = eng.backend
    prompt = [1, 2, 3, 4, 5, 6]
    P = len(prompt) - 1                                   # decode the last token at position P
    cache = eng.new_cache(16)
    eng.prefill(prompt[:P], cache)
    x = b.embed(np.array(prompt[P:]))                    # [1, H]
    keys, values = cache.keys(0, 0, P).copy(), cache.values(0, 0, P).copy()   # [Nkv, P, d]
    ref = b.block(0, x.copy(), Step.build([(0, P, prompt[P:])]), cache)   # [1, H]
    k_ref, v_ref = cache.keys(0, 0, P + 1)[:, P], cache.values(0, 0, P + 1)[:, P]

    H, F, qd, kvd, d = cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim, cfg.head_dim
    gs = decode_groups(cfg)
    f32 = lambda a: np.ascontiguousarray(a, dtype=np.float32)      # noqa: E731
    # group 1: RMSNorm, Q/K/V GEMVs, RoPE
    g1 = gs["rms_gemv_rope"].spec
    feed = {"x": x[0], "attn_norm": lw.attn_norm, "wq": lw.wqkv[:qd], "wk": lw.wqkv[qd:qd + kvd],
            "wv": lw.wqkv[qd + kvd:], "lut_q": rope_lut([P], cfg.n_heads, b.freqs)[0],
            "lut_k": rope_lut([P], cfg.n_kv_heads, b.freqs)[0]}
    a1 = [f32(feed[a.name]) if a.name in feed else np.zeros(a.shape, np.float32) for a in g1.args]
    assert "emulated" in str(run(g1, *a1))
    q, k, v = (a1[g1.arg_index(n)] for n in ("q", "k", "v"))
    ulp = lambda r: 2.0 ** (np.floor(np.log2(np.abs(r).max())) - 7)   # noqa: E731
    assert np.abs(k - k_ref.reshape(-1)).max() <= 4 * ulp(k_ref)
    assert np.abs(v - v_ref.reshape(-1)).max() <= 4 * ulp(v_ref)

    # decode attention on the host (float64), over the cached keys and the new one
    K = np.concatenate([keys, k.reshape(cfg.n_kv_heads, 1, d)], 1).astype(np.float64)
    Vv = np.concatenate([values, v.reshape(cfg.n_kv_heads, 1, d)], 1).astype(np.float64)
    attn = np.zeros((cfg.n_heads, d))
    for h in range(cfg.n_heads):
        g = h // cfg.group
        s = K[g] @ q.reshape(cfg.n_heads, d)[h].astype(np.float64) / np.sqrt(d)
        p = np.exp(s - s.max())
        attn[h] = p / p.sum() @ Vv[g]

    # group 2: O GEMV, residual, RMSNorm, gate/up GEMVs, SwiGLU, down GEMV, residual
    g2 = gs["o_gemv_ffn"].spec
    feed = {"x": x[0], "attn": to_bf16(attn.reshape(-1).astype(np.float32)), "wo": lw.wo,
            "ffn_norm": lw.ffn_norm, "w_gate": lw.w_gate_up[:F], "w_up": lw.w_gate_up[F:],
            "w_down": lw.w_down}
    a2 = [f32(feed[a.name]) if a.name in feed else np.zeros(a.shape, np.float32) for a in g2.args]
    report = run(g2, *a2)
    assert report.launches == gs["o_gemv_ffn"].launches
    out = a2[g2.arg_index("out")]
    err = np.abs(out - ref[0])
    # bf16 pipelines that round at different points: a few ulps of the output's magnitude
    assert err.max() <= 8 * ulp(ref), (err.max(), ulp(ref))
    # the engine keeps float32 between its roundings, the NPU bf16: a typical element is off by
    # about one bf16 ulp of its own size (2^-8 relative), not more
    assert np.median(err) <= 2.0**-7 * np.median(np.abs(ref))

    # the LM head: the final RMSNorm on the host, then the vocabulary in row slices on the NPU
    g3, head = gs["lm_head_gemv"].spec, gs["lm_head_gemv"]
    parts = head.launches
    n = cfg.vocab // parts
    xn = to_bf16(rms_norm(out[None], model.weights.final_norm, cfg.rms_eps))[0]
    feed = {"xn": xn,
            **{f"w_head{i}": model.weights.lm_head[i * n:(i + 1) * n] for i in range(parts)}}
    a3 = [f32(feed[a.name]) if a.name in feed else np.zeros(a.shape, np.float32) for a in g3.args]
    run(g3, *a3)
    logits = np.concatenate([a3[g3.arg_index(f"logits{i}")] for i in range(parts)])
    ref_logits = b.head(out[None].copy())[0]
    assert np.abs(logits - ref_logits).max() <= 8 * ulp(ref_logits)
    assert int(np.argmax(logits)) == int(np.argmax(ref_logits))


def feed_arrays(spec, feed):
    return [np.ascontiguousarray(feed[a.name], np.float32).reshape(a.shape) if a.name in feed
            else np.zeros(a.shape, np.float32) for a in spec.args]


def test_prefill_layer_three_calls_match_numpy_engine(model):
    """rms_gemms_rope -> flash_attn -> o_ffn at 128 rows of layer 0 vs the engine's block; and each
    stitched group equals its kernels run one by one, bit for bit."""
    from llamanb.npu.compiler.groups import prefill_groups
    from llamanb.npu.compiler.stitch import run_one_by_one

    cfg, lw = model.config, model.weights.layers[0]
    seq, H, F, qd, kvd = 128, cfg.hidden, cfg.ffn, cfg.q_dim, cfg.kv_dim
    eng = Engine(model)
    b = eng.backend
    ids = (np.arange(seq) * 37 + 11) % cfg.vocab
    cache = eng.new_cache(seq)
    x = b.embed(ids)                                                         # [seq, H]
    ref = b.block(0, x.copy(), Step.build([(0, 0, ids)]), cache)             # [seq, H]
    gs = prefill_groups(cfg, seq)
    ulp = lambda r: 2.0 ** (np.floor(np.log2(np.abs(r).max())) - 7)         # noqa: E731

    g1 = gs["rms_gemms_rope"]
    a1 = feed_arrays(g1.spec, {
        "x": x, "attn_norm": lw.attn_norm, "wq_t": lw.wqkv[:qd].T, "wk_t": lw.wqkv[qd:qd + kvd].T,
        "wv_t": lw.wqkv[qd + kvd:].T, "lut_q": rope_lut(np.arange(seq), cfg.n_heads, b.freqs),
        "lut_k": rope_lut(np.arange(seq), cfg.n_kv_heads, b.freqs)})
    one = [a.copy() for a in a1]
    run(g1.spec, *a1)
    run_one_by_one(g1.spec, g1.members, one)
    assert all(np.array_equal(p, r) for p, r in zip(a1, one))
    q, k, v = (a1[g1.spec.arg_index(n)] for n in ("q", "k", "v"))
    k_ref = cache.keys(0, 0, seq).transpose(1, 0, 2).reshape(seq, kvd)     # [seq, Nkv*d]
    v_ref = cache.values(0, 0, seq).transpose(1, 0, 2).reshape(seq, kvd)
    assert np.abs(k - k_ref).max() <= 4 * ulp(k_ref)
    assert np.abs(v - v_ref).max() <= 4 * ulp(v_ref)

    g2 = gs["flash_attn"]
    a2 = feed_arrays(g2.spec, {"q": q, "k": k, "v": v})
    run(g2.spec, *a2)
    g3 = gs["o_ffn"]
    a3 = feed_arrays(g3.spec, {
        "attn": a2[g2.spec.arg_index("out")], "wo_t": lw.wo.T, "x": x, "ffn_norm": lw.ffn_norm,
        "w_gate_t": lw.w_gate_up[:F].T, "w_up_t": lw.w_gate_up[F:].T, "w_down_t": lw.w_down.T})
    one = [a.copy() for a in a3]
    report = run(g3.spec, *a3)
    assert report.launches == g3.launches == 8
    run_one_by_one(g3.spec, g3.members, one)
    assert all(np.array_equal(p, r) for p, r in zip(a3, one))
    out = a3[g3.spec.arg_index("out")].reshape(seq, H)
    err = np.abs(out - ref)
    assert err.max() <= 8 * ulp(ref), (err.max(), ulp(ref))
    assert np.median(err) <= 2.0**-7 * np.median(np.abs(ref))
