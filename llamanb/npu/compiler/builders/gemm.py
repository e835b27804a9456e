"""GEMM (prefill projections): c [m, n] = a [m, k] @ b [k, n], float32 accumulation, bf16 out.

Codegen kernel (upstream builds it from linalg.matmul; here the same contraction is a
linalg.generic so every step is visible). b is the weight as [in, out] (HF's W transposed once).

    launch [m / (8*tile_m), n / (4*tile_n)]: one output block of (8*tile_m) x (4*tile_n)
      segment: L2 c [8*tile_m, 4*tile_n] collects the block from the herd's 32 tiles
        herd [8, 4] (all 32 compute tiles): tile (x, y) owns output tile (x, y) of the block
          L1 acc [tile_m, tile_n] f32 = 0
          for each K step: DDR a [tile_m, tile_k], b [tile_k, tile_n] --DMA--> L1
                           acc += extf(a) * extf(b) summed over the step   (linalg.generic)
          L1 c = truncf(acc) --DMA--> L2 c
      L2 c --DMA--> DDR c
"""
from __future__ import annotations

import numpy as np

from llamanb.model.numerics import to_bf16
from llamanb.npu.compiler.mlir import Body, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, divides, generic, herd, herd_shape, launch, pick_tile, positive, segment)

TILE = 64         # default cap per tile dimension: L1 40 KB at 64 x 64 x 64


def gemm(m: int, k: int, n: int, tile_m: int | None = None, tile_k: int | None = None,
         tile_n: int | None = None, herd_xy=(8, 4), name: str = "gemm") -> KernelSpec:
    """c [m, n] = a [m, k] @ b [k, n]."""
    positive(m=m, k=k, n=n)
    hm, hn = herd_shape(herd_xy)
    divides(f"{name}: herd of {hm} columns over m={m}", m, hm)
    divides(f"{name}: herd of {hn} rows over n={n}", n, hn)
    tm = tile_m if tile_m is not None else pick_tile(m // hm, TILE)
    tn = tile_n if tile_n is not None else pick_tile(n // hn, TILE)
    tk = tile_k if tile_k is not None else pick_tile(k, TILE)
    positive(tile_m=tm, tile_k=tk, tile_n=tn)
    divides(f"{name}: herd_m * tile_m over m", m, hm * tm)
    divides(f"{name}: herd_n * tile_n over n", n, hn * tn)
    divides(f"{name}: tile_k over k", k, tk)
    t_a, t_b, t_c = memref((m, k)), memref((k, n)), memref((m, n))
    l1_a, l1_b = memref((tm, tk), "bf16", 2), memref((tk, tn), "bf16", 2)
    l1_acc, l1_c = memref((tm, tn), "f32", 2), memref((tm, tn), "bf16", 2)
    l2_c = memref((hm * tm, hn * tn), "bf16", 1)

    b = Body(n_args=3)
    types = [t_a, t_b, t_c]
    with launch(b, name, (m // (hm * tm), n // (hn * tn)), ["%arg0", "%arg1", "%arg2"],
                types) as ((lx, ly), lo):
        with segment(b, name, lo + [lx, ly], types + ["index", "index"]) as (_, so):
            sa, sb, sc, sx, sy = so
            c2 = b.alloc(l2_c, "c_l2")
            with herd(b, name, (hm, hn), [sa, sb, c2, sx, sy],
                      [t_a, t_b, l2_c, "index", "index"], "gemm") as ((tx, ty), h):
                a, w, cl2, bx, by = h
                la, lb = b.alloc(l1_a, "a_l1"), b.alloc(l1_b, "b_l1")
                acc, lc = b.alloc(l1_acc, "acc_l1"), b.alloc(l1_c, "c_l1")
                row0 = b.affine([(bx, hm * tm), (tx, tm)], hint="row0")
                col0 = b.affine([(by, hn * tn), (ty, tn)], hint="col0")
                zero = b.const(0.0, "f32")
                generic(b, [], [], [acc], [l1_acc], ["(d0, d1) -> (d0, d1)"],
                        ["parallel", "parallel"], lambda b, i, o: [zero])
                with b.for_(b.const(0), b.const(k // tk), b.const(1), hint="kk") as kk:
                    k0 = b.arith("muli", kk, b.const(tk), hint="k0")
                    one = b.const(1)
                    b.dma(la, l1_a, a, t_a, src_ofs=[row0, k0],
                          src_sizes=[b.const(tm), b.const(tk)], src_strides=[b.const(k), one])
                    b.dma(lb, l1_b, w, t_b, src_ofs=[k0, col0],
                          src_sizes=[b.const(tk), b.const(tn)], src_strides=[b.const(n), one])

                    def mac(b, ins, outs):
                        x = b.op("arith.extf", [ins[0]], ["bf16"], ["f32"], hint="f")[0]
                        y = b.op("arith.extf", [ins[1]], ["bf16"], ["f32"], hint="f")[0]
                        p = b.op("arith.mulf", [x, y], ["f32", "f32"], ["f32"], hint="p")[0]
                        return [b.op("arith.addf", [p, outs[0]], ["f32", "f32"], ["f32"],
                                     hint="acc")[0]]

                    generic(b, [la, lb], [l1_a, l1_b], [acc], [l1_acc],
                            ["(d0, d1, d2) -> (d0, d2)", "(d0, d1, d2) -> (d2, d1)",
                             "(d0, d1, d2) -> (d0, d1)"], ["parallel", "parallel", "reduction"],
                            mac)
                generic(b, [acc], [l1_acc], [lc], [l1_c], ["(d0, d1) -> (d0, d1)"] * 2,
                        ["parallel", "parallel"],
                        lambda b, i, o: [b.op("arith.truncf", [i[0]], ["f32"], ["bf16"],
                                              hint="r")[0]])
                one = b.const(1)
                b.dma(cl2, l2_c, lc, l1_c,
                      dst_ofs=[b.arith("muli", tx, b.const(tm)), b.arith("muli", ty, b.const(tn))],
                      dst_sizes=[b.const(tm), b.const(tn)], dst_strides=[b.const(hn * tn), one])
                for buf, t in ((la, l1_a), (lb, l1_b), (acc, l1_acc), (lc, l1_c)):
                    b.dealloc(buf, t)
            r0 = b.arith("muli", sx, b.const(hm * tm), hint="r0")
            c0 = b.arith("muli", sy, b.const(hn * tn), hint="c0")
            b.dma(sc, t_c, c2, l2_c, dst_ofs=[r0, c0],
                  dst_sizes=[b.const(hm * tm), b.const(hn * tn)],
                  dst_strides=[b.const(n), b.const(1)])
            b.dealloc(c2, l2_c)

    def model(a, w, c):
        c[...] = to_bf16(np.matmul(a, w, dtype=np.float32))

    args = (Arg("a", (m, k), "input", "activation rows (normalised hidden states)"),
            Arg("b", (k, n), "weight", "projection weight [in, out] (HF's W transposed)"),
            Arg("c", (m, n), "output", "a @ b"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, types, b), model=model,
                      herd=(hm, hn), tiles={"tile_m": tm, "tile_k": tk, "tile_n": tn}))
