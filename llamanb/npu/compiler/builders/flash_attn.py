"""FlashAttention, causal with grouped KV heads (GQA), as a cascade of Q tiles.

q [S, Hq*d], k and v [S, Hkv*d] (sequence-major, as RoPE leaves them), out [S, Hq*d]. Query head h
reads KV head h // (Hq/Hkv). The nest follows upstream's attn_npu2_seqfirst structure:

    launch [Hq / heads_per_unroll, S / (num_q_tiles*lq)]
      segment, unrolled [heads_per_unroll, 1]: one head each
        herd [num_q_tiles, num_cascade_stages]: tile (x, y) holds Q tile x of the block in L1 and
        streams the KV tiles j = y, y + stages, ... (only j*lk <= last query row when causal),
        keeping an online softmax: running row max m, row sum l, unnormalised output acc (f32).
        Stage y > 0 then receives stage y-1's (m, l, acc) over the cascade channel and merges:
            m' = max(m1, m2),  l' = l1 e^(m1-m') + l2 e^(m2-m'),  acc' = acc1 e^(m1-m') + ...
        and passes the result on; the last stage writes out = acc / l.

Upstream runs the tile primitives in C++ (attn_npu2.cc); here every step is a linalg.generic on L1
tiles (scores, mask, max, exp, sums, P @ V), so the emulator executes the same algorithm. Scores
and accumulators stay float32 in L1, so the default Q tile is 32 rows (upstream's C++ uses 64 with
bf16 tiles): with 64 a tile would need 82 KiB of its 64 KiB L1, which the array model rejects. Rows start
at m = -1e30 (finite) and masked scores are -inf, so a stage that saw no key of a row contributes
e^(-inf) = 0 and merging two such rows stays finite.
"""
from __future__ import annotations

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.numerics import to_bf16
from llamanb.model.ops import softmax_
from llamanb.npu.compiler.mlir import Body, memref, module_text, quote
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, divides, generic, herd, launch, pick_tile, positive, segment)

CHANNEL = "fa_cascade"
F32 = ["f32", "f32"]


def _f(b, name, *vals):
    return b.op(f"arith.{name}" if "." not in name else name, list(vals), ["f32"] * len(vals),
                ["f32"], hint="t")[0]


def flash_attn(seq: int, n_heads: int, n_kv_heads: int, head_dim: int, lq: int = 32,
               lk: int = 64, num_q_tiles: int = 4, num_cascade_stages: int = 4,
               heads_per_unroll: int | None = None, causal: bool = True,
               name: str = "flash_attn") -> KernelSpec:
    """out = softmax(q k^T / sqrt(d) + causal mask) v per head, f32 accumulation, bf16 out."""
    positive(seq=seq, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, lq=lq, lk=lk,
             num_q_tiles=num_q_tiles, num_cascade_stages=num_cascade_stages)
    hpu = heads_per_unroll if heads_per_unroll is not None else pick_tile(n_heads, 2)
    positive(heads_per_unroll=hpu)
    divides(f"{name}: n_kv_heads over n_heads (GQA groups)", n_heads, n_kv_heads)
    divides(f"{name}: heads_per_unroll over n_heads", n_heads, hpu)
    divides(f"{name}: num_q_tiles * lq over seq", seq, num_q_tiles * lq)
    divides(f"{name}: lk over seq", seq, lk)
    nq, ns, d, group = num_q_tiles, num_cascade_stages, head_dim, n_heads // n_kv_heads
    from llamanb.npu.compiler.array import NPU2
    if nq * ns * hpu > NPU2.compute_tiles:              # the unrolled segments run side by side
        raise LlamanbError(f"{name}: {hpu} segments x herd {nq}x{ns} need {nq * ns * hpu} compute "
                           f"tiles; {NPU2.name} has {NPU2.compute_tiles}")
    t_q, t_kv = memref((seq, n_heads * d)), memref((seq, n_kv_heads * d))
    types = [t_q, t_kv, t_kv, t_q]
    bf = lambda *s: memref(s, "bf16", 2)          # noqa: E731
    f32 = lambda *s: memref(s, "f32", 2)          # noqa: E731
    T_q, T_kv, T_s, T_v, T_acc, T_o = bf(lq, d), bf(lk, d), f32(lq, lk), f32(lq), f32(lq, d), bf(lq, d)
    ROW, ROWCOL = "(d0, d1) -> (d0)", "(d0, d1) -> (d0, d1)"

    b = Body(n_args=4)
    with launch(b, name, (n_heads // hpu, seq // (nq * lq)), [f"%arg{i}" for i in range(4)],
                types) as ((lx, ly), lo):
        with segment(b, name, lo + [lx, ly], types + ["index"] * 2, sizes=(hpu, 1)) as \
                ((sx, _), so):
            with herd(b, name, (nq, ns), so + [sx], types + ["index"] * 3, "flash_attn",
                      causal="true" if causal else "false", lq=f"{lq} : i64", lk=f"{lk} : i64") \
                    as ((tx, ty), (q, k, v, out, bx, by, bs)):
                h = b.affine([(bx, hpu), (bs, 1)], hint="head")
                kvh = b.arith("divui", h, b.const(group), hint="kvh")
                q0 = b.affine([(by, nq * lq), (tx, lq)], hint="q0")
                ql, kl, vl = b.alloc(T_q, "q_l1"), b.alloc(T_kv, "k_l1"), b.alloc(T_kv, "v_l1")
                s, m, l_, mn, al = b.alloc(T_s, "s_l1"), b.alloc(T_v, "m_l1"), \
                    b.alloc(T_v, "l_l1"), b.alloc(T_v, "mnew_l1"), b.alloc(T_v, "alpha_l1")
                acc = b.alloc(T_acc, "acc_l1")
                one, c_d = b.const(1), b.const(d)
                b.dma(ql, T_q, q, t_q, src_ofs=[q0, b.arith("muli", h, c_d)],
                      src_sizes=[b.const(lq), c_d], src_strides=[b.const(n_heads * d), one])
                fill = lambda buf, ty, val, maps: generic(  # noqa: E731
                    b, [], [], [buf], [ty], [maps], ["parallel"] * maps.split("->")[0].count("d"),
                    lambda b, i, o: [b.const(val, "f32")])
                fill(m, T_v, -1e30, "(d0) -> (d0)")
                fill(l_, T_v, 0.0, "(d0) -> (d0)")
                fill(acc, T_acc, 0.0, ROWCOL)
                if causal:                       # KV tiles up to the block's last query row
                    last = b.affine([(q0, 1)], lq - 1, hint="qlast")
                    n_kv = b.affine([(b.arith("divui", last, b.const(lk), hint="jl"), 1)], 1,
                                    hint="nkv")
                else:
                    n_kv = b.const(seq // lk)
                with b.for_(ty, n_kv, b.const(ns), hint="j") as j:
                    _kv_step(b, j, kvh, k, v, kl, vl, s, m, l_, mn, al, acc, q0, ql,
                             dict(d=d, lk=lk, lq=lq, kv_width=n_kv_heads * d, causal=causal,
                                  t_kv=t_kv, T_q=T_q, T_kv=T_kv, T_s=T_s, T_v=T_v, T_acc=T_acc))
                if ns > 1:
                    _cascade(b, tx, ty, ns, m, l_, acc, mn, al, T_v, T_acc)
                last_stage = b.op("arith.cmpi", [ty, b.const(ns - 1)], ["index", "index"], ["i1"],
                                  props={"predicate": "0 : i64"}, hint="is_last")[0]
                with b.if_(last_stage):
                    o = b.alloc(T_o, "o_l1")
                    generic(b, [acc, l_], [T_acc, T_v], [o], [T_o], [ROWCOL, ROW, ROWCOL],
                            ["parallel"] * 2,
                            lambda b, i, _: [b.op("arith.truncf", [_f(b, "divf", *i)], ["f32"],
                                                  ["bf16"], hint="r")[0]])
                    b.dma(out, t_q, o, T_o, dst_ofs=[q0, b.arith("muli", h, c_d)],
                          dst_sizes=[b.const(lq), c_d], dst_strides=[b.const(n_heads * d), one])
                    b.dealloc(o, T_o)
                for buf, t in ((ql, T_q), (kl, T_kv), (vl, T_kv), (s, T_s), (m, T_v), (l_, T_v),
                               (mn, T_v), (al, T_v), (acc, T_acc)):
                    b.dealloc(buf, t)

    channels = []
    if ns > 1:
        channels.append(f'"air.channel"() <{{channel_type = "npu_cascade", size = [{nq}, {ns}], '
                        f'sym_name = {quote(CHANNEL)}}}> : () -> ()')

    def model(qa, ka, va, oa):
        scale = np.float32(1.0 / np.sqrt(d))
        mask = np.triu(np.full((seq, seq), -np.inf, np.float32), 1) if causal else 0
        for hh in range(n_heads):
            g = hh // group
            qh, kh = qa[:, hh * d:(hh + 1) * d], ka[:, g * d:(g + 1) * d]
            p = softmax_(np.matmul(qh, kh.T, dtype=np.float32) * scale + mask, axis=-1)
            oa[:, hh * d:(hh + 1) * d] = to_bf16(p @ va[:, g * d:(g + 1) * d])

    args = (Arg("q", (seq, n_heads * d), "input", f"queries after RoPE, {n_heads} heads"),
            Arg("k", (seq, n_kv_heads * d), "input", f"keys after RoPE, {n_kv_heads} KV heads"),
            Arg("v", (seq, n_kv_heads * d), "input", "values"),
            Arg("out", (seq, n_heads * d), "output", "attention output per head"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, types, b, channels=channels),
                      model=model, herd=(nq, ns),
                      tiles={"lq": lq, "lk": lk, "num_q_tiles": nq, "num_cascade_stages": ns,
                             "heads_per_unroll": hpu},
                      params={"causal": causal, "scale": 1.0 / np.sqrt(d)},
                      # compiled as upstream compiles its FlashAttention: without ping-pong (its
                      # blocks do not fit L1 twice), shim-DMA tiling [1, 1] (Xilinx/mlir-air,
                      # programming_examples/llms/llama32_1b/llama32_1b_prefill.py:247-258)
                      backend={"omit_pingpong": "all", "runtime_loop_tiling_sizes": [1, 1]}))


def _kv_step(b, j, kvh, k, v, kl, vl, s, m, l_, mn, al, acc, q0, ql, c):
    """One KV tile j: scores, mask, online-softmax update of (m, l, acc)."""
    one, c_d = b.const(1), b.const(c["d"])
    k0 = b.arith("muli", j, b.const(c["lk"]), hint="k0")
    col = b.arith("muli", kvh, c_d, hint="kvcol")
    for buf, src in ((kl, k), (vl, v)):
        b.dma(buf, c["T_kv"], src, c["t_kv"], src_ofs=[k0, col],
              src_sizes=[b.const(c["lk"]), c_d], src_strides=[b.const(c["kv_width"]), one])
    ROW, ROWCOL = "(d0, d1) -> (d0)", "(d0, d1) -> (d0, d1)"
    generic(b, [], [], [s], [c["T_s"]], [ROWCOL], ["parallel"] * 2,
            lambda b, i, o: [b.const(0.0, "f32")])

    def dot(b, ins, outs):
        x = b.op("arith.extf", [ins[0]], ["bf16"], ["f32"], hint="f")[0]
        y = b.op("arith.extf", [ins[1]], ["bf16"], ["f32"], hint="f")[0]
        return [_f(b, "addf", _f(b, "mulf", x, y), outs[0])]

    generic(b, [ql, kl], [c["T_q"], c["T_kv"]], [s], [c["T_s"]],
            ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d1)"],
            ["parallel", "parallel", "reduction"], dot)
    scale = b.const(1.0 / np.sqrt(c["d"]), "f32")

    def scale_mask(b, ins, outs):
        val = _f(b, "mulf", outs[0], scale)
        if not c["causal"]:
            return [val]
        i = b.op("linalg.index", [], [], ["index"], props={"dim": "0 : i64"}, hint="i")[0]
        jj = b.op("linalg.index", [], [], ["index"], props={"dim": "1 : i64"}, hint="jj")[0]
        qp, kp = b.arith("addi", q0, i, hint="qpos"), b.arith("addi", k0, jj, hint="kpos")
        ok = b.op("arith.cmpi", [qp, kp], ["index", "index"], ["i1"],
                  props={"predicate": "5 : i64"}, hint="ok")[0]          # sge: key <= query
        return [b.op("arith.select", [ok, val, b.const(float("-inf"), "f32")],
                     ["i1", "f32", "f32"], ["f32"], hint="sm")[0]]

    generic(b, [], [], [s], [c["T_s"]], [ROWCOL], ["parallel"] * 2, scale_mask)
    T_v, T_s, T_acc = c["T_v"], c["T_s"], c["T_acc"]
    generic(b, [m], [T_v], [mn], [T_v], ["(d0) -> (d0)"] * 2, ["parallel"], lambda b, i, o: i)
    generic(b, [s], [T_s], [mn], [T_v], [ROWCOL, ROW], ["parallel", "reduction"],
            lambda b, i, o: [_f(b, "maximumf", i[0], o[0])])
    generic(b, [mn], [T_v], [s], [T_s], [ROW, ROWCOL], ["parallel"] * 2,
            lambda b, i, o: [_f(b, "math.exp", _f(b, "subf", o[0], i[0]))])
    generic(b, [m, mn], [T_v, T_v], [al], [T_v], ["(d0) -> (d0)"] * 3, ["parallel"],
            lambda b, i, o: [_f(b, "math.exp", _f(b, "subf", i[0], i[1]))])
    generic(b, [al], [T_v], [l_], [T_v], ["(d0) -> (d0)"] * 2, ["parallel"],
            lambda b, i, o: [_f(b, "mulf", o[0], i[0])])
    generic(b, [s], [T_s], [l_], [T_v], [ROWCOL, ROW], ["parallel", "reduction"],
            lambda b, i, o: [_f(b, "addf", i[0], o[0])])
    generic(b, [al], [T_v], [acc], [T_acc], [ROW, ROWCOL], ["parallel"] * 2,
            lambda b, i, o: [_f(b, "mulf", o[0], i[0])])

    def pv(b, ins, outs):
        y = b.op("arith.extf", [ins[1]], ["bf16"], ["f32"], hint="f")[0]
        return [_f(b, "addf", _f(b, "mulf", ins[0], y), outs[0])]

    generic(b, [s, vl], [T_s, c["T_kv"]], [acc], [T_acc],
            ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d1)"],
            ["parallel", "parallel", "reduction"], pv)
    generic(b, [mn], [T_v], [m], [T_v], ["(d0) -> (d0)"] * 2, ["parallel"], lambda b, i, o: i)


def _cascade(b, tx, ty, ns, m, l_, acc, mn, al, T_v, T_acc):
    """Stage y > 0 merges stage y-1's (m, l, acc); every stage but the last passes it on."""
    from llamanb.npu.compiler.mlir import seg_sizes

    ROW, ROWCOL, V = "(d0, d1) -> (d0)", "(d0, d1) -> (d0, d1)", "(d0) -> (d0)"
    chan = lambda kind, idx, buf, t: b.op(  # noqa: E731
        f"air.channel.{kind}", [*idx, buf], ["index", "index", t],
        props={"chan_name": f"@{CHANNEL}", "operandSegmentSizes": seg_sizes(0, 2, 1, 0, 0, 0)})
    not_first = b.op("arith.cmpi", [ty, b.const(0)], ["index", "index"], ["i1"],
                     props={"predicate": "8 : i64"}, hint="has_prev")[0]        # ugt
    with b.if_(not_first):
        prev = [tx, b.arith("subi", ty, b.const(1), hint="prev")]
        mp, lp, ap = b.alloc(T_v, "mprev_l1"), b.alloc(T_v, "lprev_l1"), b.alloc(T_acc, "accprev_l1")
        be = b.alloc(T_v, "beta_l1")
        for buf, t in ((mp, T_v), (lp, T_v), (ap, T_acc)):
            chan("get", prev, buf, t)
        generic(b, [mp, m], [T_v, T_v], [mn], [T_v], [V] * 3, ["parallel"],
                lambda b, i, o: [_f(b, "maximumf", i[0], i[1])])
        generic(b, [mp, mn], [T_v, T_v], [al], [T_v], [V] * 3, ["parallel"],
                lambda b, i, o: [_f(b, "math.exp", _f(b, "subf", i[0], i[1]))])
        generic(b, [m, mn], [T_v, T_v], [be], [T_v], [V] * 3, ["parallel"],
                lambda b, i, o: [_f(b, "math.exp", _f(b, "subf", i[0], i[1]))])
        generic(b, [lp, al, be], [T_v] * 3, [l_], [T_v], [V] * 4, ["parallel"],
                lambda b, i, o: [_f(b, "addf", _f(b, "mulf", i[0], i[1]),
                                    _f(b, "mulf", o[0], i[2]))])
        generic(b, [ap, al, be], [T_acc, T_v, T_v], [acc], [T_acc], [ROWCOL, ROW, ROW, ROWCOL],
                ["parallel"] * 2,
                lambda b, i, o: [_f(b, "addf", _f(b, "mulf", i[0], i[1]),
                                    _f(b, "mulf", o[0], i[2]))])
        generic(b, [mn], [T_v], [m], [T_v], [V] * 2, ["parallel"], lambda b, i, o: i)
        for buf, t in ((mp, T_v), (lp, T_v), (ap, T_acc), (be, T_v)):
            b.dealloc(buf, t)
    not_last = b.op("arith.cmpi", [ty, b.const(ns - 1)], ["index", "index"], ["i1"],
                    props={"predicate": "6 : i64"}, hint="has_next")[0]         # ult
    with b.if_(not_last):
        for buf, t in ((m, T_v), (l_, T_v), (acc, T_acc)):
            chan("put", [tx, ty], buf, t)
