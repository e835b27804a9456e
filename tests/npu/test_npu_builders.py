"""NPU kernel builders: each module runs on the emulated NPU2 (which executes the MLIR text) and
matches the kernel's numpy model and, independently, float64 math written here; configurations that
cannot work are rejected; the launch plan read from the text says what the builder was asked for."""
from __future__ import annotations

import re

import numpy as np
import pytest

from llamanb.model.config import LLAMA32_1B, SMOLLM2_135M
from llamanb.errors import LlamanbError
from llamanb.npu.compiler.builders import (add, flash_attn, gemm, gemv, rmsnorm, rope, rope_lut, silu_and_mul)
from llamanb.npu.compiler.emulator import run
from llamanb.npu.compiler.plan import read_plan
from llamanb.model.numerics import to_bf16
from llamanb.model.rope import inv_freq

S = SMOLLM2_135M
SEQ = 128                         # prefill rows for the embedded model's kernels


def ulps(a, b):
    """Distance in bfloat16 ulps (of the larger magnitude) between two bf16-valued arrays."""
    big = np.maximum(np.abs(a), np.abs(b)).astype(np.float64)
    spacing = np.exp2(np.floor(np.log2(np.where(big > 0, big, 1.0))) - 7)
    return np.abs(a.astype(np.float64) - b) / spacing


def assert_bf16_close(out, ref64, atol_frac=1e-4, rtol=2.0**-8):
    """Within one bf16 rounding (half an ulp: at most 2^-8 relative) of a float64 reference, plus
    float32 noise where sums cancel (atol_frac of the largest output). Two values that were each
    rounded to bf16 may differ by a whole ulp: compare those with rtol=2^-7."""
    err = np.abs(out.astype(np.float64) - ref64)
    bound = rtol * np.abs(ref64) + atol_frac * np.abs(ref64).max()
    assert np.all(err <= bound), f"worst excess {np.max(err - bound):.3g}"


def run_both(spec, rng, **kw):
    """(emulated outputs, model outputs, inputs) for random bf16 inputs."""
    arrays = spec.make_arrays(rng, **kw)
    ref = [a.copy() for a in arrays]
    report = run(spec, *arrays)
    spec.model(*ref)
    assert "emulated" in str(report)
    return arrays, ref, report


# ---- float64 references, written independently of the package ------------------------------
def rms64(x, w, eps):
    x = x.astype(np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope64(x, lut, hd):
    x, lut = x.reshape(-1, hd).astype(np.float64), lut.reshape(-1, hd).astype(np.float64)
    h = hd // 2
    c, s = lut[:, :h], lut[:, h:]
    return np.concatenate([x[:, :h] * c - x[:, h:] * s, x[:, h:] * c + x[:, :h] * s], -1)


def attn64(q, k, v, nh, nkv, hd):
    seq = q.shape[0]
    out = np.zeros(q.shape)
    mask = np.tril(np.ones((seq, seq), bool))
    for h in range(nh):
        g = h // (nh // nkv)
        sc = q[:, h * hd:(h + 1) * hd].astype(np.float64) @ k[:, g * hd:(g + 1) * hd].T / np.sqrt(hd)
        sc = np.where(mask, sc, -np.inf)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        out[:, h * hd:(h + 1) * hd] = (p / p.sum(-1, keepdims=True)) @ v[:, g * hd:(g + 1) * hd]
    return out


# ---- every kernel at the embedded model's shapes, on the emulated NPU2 ------------------------
def test_rmsnorm_prefill_and_decode():
    rng = np.random.default_rng(1)
    for spec in (rmsnorm(SEQ, S.hidden, S.rms_eps), rmsnorm(1, S.hidden, S.rms_eps, herd_xy=(1, 1),
                                                             flat_out=True)):
        (x, w, y), (_, _, ym), _ = run_both(spec, rng)
        assert ulps(y, ym).max() <= 1
        assert_bf16_close(y.reshape(-1, S.hidden), rms64(x.reshape(-1, S.hidden), w, S.rms_eps))


@pytest.mark.parametrize("k,n", [(S.hidden, S.q_dim), (S.hidden, S.kv_dim), (S.hidden, S.ffn),
                                 (S.ffn, S.hidden)])
def test_gemm_projections(k, n):
    spec = gemm(SEQ // 2, k, n)
    (a, b, c), (_, _, cm), _ = run_both(spec, np.random.default_rng(2))
    # tiles sum K in another order than numpy's matmul: a rare last-bit difference before rounding
    assert np.mean(c == cm) > 0.99
    assert_bf16_close(c, cm.astype(np.float64), rtol=2.0**-7)
    assert_bf16_close(c, a.astype(np.float64) @ b)


@pytest.mark.parametrize("m,k", [(S.q_dim, S.hidden), (S.kv_dim, S.hidden), (S.ffn, S.hidden),
                                 (S.hidden, S.ffn), (S.vocab // 8, S.hidden)])
def test_gemv_decode_and_lm_head_partition(m, k):
    spec = gemv(m, k)
    (a, x, y), (_, _, ym), report = run_both(spec, np.random.default_rng(3))
    assert report.kernels == {"matvec_bf16": report.kernels["matvec_bf16"]}
    assert ulps(y, ym).max() <= 1
    assert_bf16_close(y, a.astype(np.float64) @ x)


@pytest.mark.parametrize("rows,heads,herd", [(SEQ, S.n_heads, (8, 1)), (SEQ, S.n_kv_heads, (8, 1)),
                                             (1, S.n_heads, (1, 1))])
def test_rope_with_its_table(rows, heads, herd):
    spec = rope(rows, heads, S.head_dim, herd_xy=herd)
    rng = np.random.default_rng(4)
    x = to_bf16(rng.standard_normal((rows, heads * S.head_dim)).astype(np.float32))
    lut = rope_lut(np.arange(rows) + 7, heads, inv_freq(S.head_dim, S.rope_theta))
    y, ym = np.zeros_like(x), np.zeros_like(x)
    run(spec, x, lut, y)
    spec.model(x, lut, ym)
    assert np.array_equal(y, ym)                                  # elementwise: bit for bit
    assert_bf16_close(y.reshape(-1, S.head_dim), rope64(x, lut, S.head_dim))
    # the table is the half-split rotation: position p, pair i -> angle p * inv_freq[i]
    ang = (np.arange(rows) + 7.0)[:, None] * inv_freq(S.head_dim, S.rope_theta)[None, :]
    assert np.allclose(lut[:, :S.head_dim // 2], np.cos(ang), atol=2**-8)


@pytest.mark.parametrize("rows,flat,herd", [(SEQ, False, (8, 1)), (1, True, (8, 1))])
def test_silu_and_mul(rows, flat, herd):
    spec = silu_and_mul(rows, S.ffn, herd_xy=herd, flat=flat)
    (g, u, o), (_, _, om), _ = run_both(spec, np.random.default_rng(5))
    assert np.array_equal(o, om)
    g64 = g.astype(np.float64)
    assert_bf16_close(o, g64 / (1 + np.exp(-g64)) * u)


def test_flash_attention_causal_gqa_cascade():
    spec = flash_attn(SEQ, S.n_heads, S.n_kv_heads, S.head_dim)
    (q, k, v, o), (_, _, _, om), _ = run_both(spec, np.random.default_rng(6))
    assert ulps(o, om).max() <= 1
    assert_bf16_close(o, attn64(q, k, v, S.n_heads, S.n_kv_heads, S.head_dim), 2e-3)
    # one cascade stage must give the same attention (the merge is an identity then)
    one = flash_attn(SEQ, S.n_heads, S.n_kv_heads, S.head_dim, num_cascade_stages=1)
    o1 = np.zeros_like(o)
    run(one, q, k, v, o1)
    assert ulps(o1, o).max() <= 1


@pytest.mark.parametrize("flat", [(False, False, False), (False, True, True), (True, True, True)])
def test_residual_add_and_its_2d_to_1d_variant(flat):
    spec = add(SEQ, S.hidden, flat=flat)
    (a, b, c), (_, _, cm), _ = run_both(spec, np.random.default_rng(7))
    assert np.array_equal(c, cm)
    assert_bf16_close(c.reshape(-1), a.reshape(-1).astype(np.float64) + b.reshape(-1))
    assert read_plan(spec.text).launches[0].bare                 # a bare herd, as upstream


# ---- the emulator executes the text, not the builder ------------------------------------------
def test_a_wrong_argument_map_changes_the_numbers():
    spec = silu_and_mul(4, 64, herd_xy=(2, 1))
    g, u = (to_bf16(np.random.default_rng(8).standard_normal((4, 64)).astype(np.float32) + k)
            for k in (0, 1))
    good, bad = np.zeros_like(g), np.zeros_like(g)
    run(spec, g, u, good)
    swapped = spec.text.replace("(%c1, %c1, %arg0, %arg1, %arg2)", "(%c1, %c1, %arg1, %arg0, %arg2)")
    assert swapped != spec.text
    run(swapped, g, u, bad)
    assert read_plan(swapped).launches[0].operands == (1, 0, 2)
    assert np.array_equal(good, run_model(spec, g, u)) and not np.allclose(good, bad)


def run_model(spec, *inputs):
    out = np.zeros(spec.args[-1].shape, np.float32)
    spec.model(*inputs, out)
    return out


def test_a_wrong_dma_offset_changes_the_numbers():
    spec = add(8, 64, herd_xy=(2, 1), tile=32)
    a = to_bf16(np.arange(512, dtype=np.float32).reshape(8, 64))
    c = np.zeros_like(a)
    run(spec, a, a, c)
    assert np.array_equal(c, 2 * a)
    # each tile's chunk offset is it * 64 + tx * 32: drop the tx term and both tiles do chunk 0
    lines = spec.text.splitlines()
    (k,) = [i for i, line in enumerate(lines) if '"arith.muli"(%tx, ' in line]
    lines[k] = re.sub(r"\(%tx, %\w+\)", "(%tx, %c0)", lines[k])
    c[...] = 0
    run("\n".join(lines), a, a, c)
    assert not np.array_equal(c, 2 * a) and np.array_equal(c[0, :32], 2 * a[0, :32])


def test_emulator_rejects_out_of_bounds_dma_and_bad_arrays():
    spec = add(8, 64, herd_xy=(2, 1), tile=32)
    a = np.zeros((8, 64), np.float32)
    # the block of each tile is n / tiles = 256 elements; make it 4096 and the DMA leaves the buffer
    too_far = spec.text.replace('"arith.constant"() <{value = 256 : index}> : () -> index',
                                '"arith.constant"() <{value = 4096 : index}> : () -> index', 1)
    with pytest.raises(LlamanbError, match="reaches element"):
        run(too_far, a, a, a.copy())
    with pytest.raises(LlamanbError, match="shape"):
        run(spec, a, a, np.zeros((8, 63), np.float32))
    with pytest.raises(LlamanbError, match="float32"):
        run(spec, a.astype(np.float64), a, a.copy())


# ---- the plan read back from the text ----------------------------------------------------------
def test_plan_reads_launch_operands_herds_kernels_and_buffers():
    spec = gemv(S.q_dim, S.hidden)
    tm = spec.tiles["tile_m"]
    p = read_plan(spec.text)
    (lp,) = p.launches
    assert lp.operands == (0, 1, 2) and lp.sizes == (1, 1) and not lp.bare
    (h,) = lp.herds
    assert (h.op, h.size, h.tiles, h.externs) == ("gemv", (8, 1), 8, (("matvec_bf16", "mv.o"),))
    assert h.args == (0, None, 2)                    # x reaches the herd from L2, not from DDR
    assert [b.space for b in lp.l2] == [1] and lp.l2[0].shape == (S.hidden,)
    assert {b.shape for b in h.l1} == {(tm, S.hidden), (S.hidden,), (tm,)}
    assert h.l1_bytes == 2 * (tm * S.hidden + S.hidden + tm)
    g = read_plan(gemm(256, 576, 192, tile_m=16, tile_n=24).text).launches[0]
    assert g.sizes == (256 // (8 * 16), 192 // (4 * 24)) and g.herds[0].tiles == 32
    fa = flash_attn(SEQ, 4, 2, 64, num_q_tiles=2, num_cascade_stages=4, heads_per_unroll=2)
    h = read_plan(fa.text).launches[0].herds[0]
    assert (h.size, h.instances, h.tiles) == ((2, 4), 2, 2 * 4 * 2)
    assert h.params["causal"] is True


# ---- Llama-3.2-1B shapes: emitted (not run), with upstream's herd shapes -------------------------
def test_llama32_1b_modules_emit_with_upstream_herds():
    L = LLAMA32_1B
    seq = 2048
    specs = {
        "rmsnorm": rmsnorm(seq, L.hidden, L.rms_eps),
        "q": gemm(seq, L.hidden, L.q_dim), "k": gemm(seq, L.hidden, L.kv_dim),
        "gate": gemm(seq, L.hidden, L.ffn), "down": gemm(seq, L.ffn, L.hidden),
        "gemv_q": gemv(L.q_dim, L.hidden), "gemv_down": gemv(L.hidden, L.ffn, symbol="mv_k8192",
                                                              link_with="mv_k8192.o",
                                                              omit_pingpong="all"),
        "lm_head": gemv(L.vocab // 8, L.hidden),
        "rope_q": rope(seq, L.n_heads, L.head_dim), "rope_dec": rope(1, L.n_kv_heads, L.head_dim,
                                                                     herd_xy=(1, 1)),
        "swiglu": silu_and_mul(seq, L.ffn), "fa": flash_attn(seq, L.n_heads, L.n_kv_heads,
                                                             L.head_dim),
        "add": add(seq, L.hidden, flat=(False, False, True)),
    }
    herds = {k: read_plan(s.text).launches[0].herds[0] for k, s in specs.items()}
    assert {herds[k].size for k in ("rmsnorm", "gemv_q", "rope_q", "swiglu", "add")} == {(8, 1)}
    assert herds["q"].size == (8, 4) and herds["rope_dec"].size == (1, 1)
    assert herds["fa"].tiles == 4 * 4 * 2                        # 2 heads x [4 Q tiles, 4 stages]
    # 16 KiB weight blocks: upstream's m_input, 4 rows at K=2048 and 1 at K=8192
    assert specs["gemv_down"].tiles["tile_m"] == 1 and specs["gemv_q"].tiles["tile_m"] == 4
    assert "llamanb.impl = \"matvec_bf16\"" in specs["gemv_down"].text
    assert specs["lm_head"].args[0].shape == (L.vocab // 8, L.hidden)
    assert specs["q"].static_indices == (1,) and specs["q"].output_indices == (2,)


# ---- configurations that cannot work are rejected with one clear line ---------------------------
@pytest.mark.parametrize("build,match", [
    (lambda: gemm(128, 576, 576, tile_m=48), "does not divide"),
    (lambda: gemm(128, 576, 576, tile_k=100), "tile_k over k"),
    (lambda: rmsnorm(1, 576, 1e-5), "herd of 8 tiles over 1 rows"),
    (lambda: rmsnorm(72, 576, 1e-5, herd_xy=(9, 1)), "does not fit"),
    (lambda: gemv(2048, 8192, tile_m=8), "bytes of L1"),
    (lambda: rope(128, 9, 63), "even"),
    (lambda: flash_attn(128, 9, 3, 64, heads_per_unroll=2), "heads_per_unroll over n_heads"),
    (lambda: flash_attn(128, 9, 3, 64, heads_per_unroll=3), "need 48 compute tiles"),
    (lambda: flash_attn(100, 9, 3, 64), "over seq"),
    (lambda: add(8, 64, flat=(True,)), "three flags"),
    (lambda: silu_and_mul(4, 64, herd_xy=(0, 1)), "positive"),
    (lambda: silu_and_mul(4, 64, tile=48), "does not divide"),
])
def test_bad_configurations_are_rejected(build, match):
    with pytest.raises(LlamanbError, match=match):
        build()


def test_spec_table_and_roles():
    spec = gemv(S.kv_dim, S.hidden)
    lines = spec.table().splitlines()
    assert len(lines) == 1 + len(spec.args)
    assert lines[1].split()[:5] == ["%arg0", "a", f"{S.kv_dim}x{S.hidden}", "bf16", "weight"]
    assert (spec.static_indices, spec.input_indices, spec.output_indices) == ((0,), (1,), (2,))
    from llamanb.npu.compiler.spec import Arg
    with pytest.raises(LlamanbError, match="role"):
        Arg("x", (1,), "scratch")


# ---- a two-launch module, stitched by hand: plan and emulator follow the data through DDR -------
def _two_adds() -> str:
    """out2 = (a + b) + a as one function: the first add's output %arg2 feeds the second."""
    body = add(8, 64, herd_xy=(2, 1)).text
    inner = body[body.index("{\n", body.index("func.func @add")) + 2:body.index("    return")]

    def renamed(text, prefix, arg_map):
        text = re.sub(r"%arg(\d+)\b", lambda m: f"%ARG{arg_map[int(m.group(1))]}", text)
        text = re.sub(r"%([A-Za-z_][\w$.-]*)", lambda m: m.group(0) if m.group(1).startswith("ARG")
                      else f"%{prefix}_{m.group(1)}", text)
        return text.replace('sym_name = "', f'sym_name = "{prefix}_')

    t = "memref<8x64xbf16>"
    parts = renamed(inner, "first", {0: 0, 1: 1, 2: 2}) + renamed(inner, "second", {0: 2, 1: 0, 2: 3})
    sig = ", ".join(f"%arg{i}: {t}" for i in range(4))
    return ("module {\n  func.func @two_adds(" + sig + ") {\n" + parts.replace("%ARG", "%arg")
            + "    return\n  }\n}\n")


def test_plan_and_emulator_follow_a_multi_launch_module():
    text = _two_adds()
    plan = read_plan(text)
    assert [lp.operands for lp in plan.launches] == [(0, 1, 2), (2, 0, 3)]
    assert all(lp.bare for lp in plan.launches)
    rng = np.random.default_rng(9)
    a, b = (to_bf16(rng.standard_normal((8, 64)).astype(np.float32)) for _ in range(2))
    mid, out = np.zeros_like(a), np.zeros_like(a)
    run(text, a, b, mid, out)
    assert np.array_equal(mid, to_bf16(a + b)) and np.array_equal(out, to_bf16(mid + a))
    from llamanb.npu.compiler import verify as V
    if V.available():
        V.verify(text)
