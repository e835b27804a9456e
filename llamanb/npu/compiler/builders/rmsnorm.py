"""RMSNorm: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, one row per reduction.

Codegen kernel (no C++): a bare air.herd, as upstream's weighted_rms_norm builds it. Each of the
herd's T tiles takes every T-th block of `tile_rows` rows:

    w [H]            --DMA once-->  L1 w [H]
    x rows [tr, H]   --DMA-->       L1 x [tr, H]
    linalg.generic (reduction over H):  ss[r] += extf(x[r, c])^2        (L1 ss [tr] f32)
    linalg.generic (parallel):          y = truncf(extf(x) * rsqrt(ss / H + eps) * extf(w))
    L1 y [tr, H]     --DMA-->       y rows

x is read as a flat [rows*H] buffer by default: upstream's next-layer RMSNorm reads the residual
add's flat output (see add's 2D -> 1D variant). Decode (rows = 1) runs on a 1x1 herd.
"""
from __future__ import annotations

from llamanb.model.numerics import to_bf16
from llamanb.model.ops import rms_norm
from llamanb.npu.compiler.mlir import Body, f32_attr, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, chunk_loop, ddr_type, divides, flatten, generic, herd, herd_shape, pick_tile, positive, tile_id)

L1_ROW_BYTES = 16 * 1024     # default: x and y tiles of at most 16 KB each


def rmsnorm(rows: int, hidden: int, eps: float, herd_xy=(8, 1), tile_rows: int | None = None,
            flat_in: bool = True, flat_out: bool = False, name: str = "rmsnorm") -> KernelSpec:
    """y [rows, hidden] = rms_norm(x, w, eps); x flat [rows*hidden] unless flat_in=False."""
    positive(rows=rows, hidden=hidden)
    hx, hy = herd_shape(herd_xy)
    tiles = hx * hy
    divides(f"{name}: herd of {tiles} tiles over {rows} rows", rows, tiles,
            "use a 1x1 herd for a single row")
    tr = tile_rows if tile_rows is not None else pick_tile(rows // tiles,
                                                          max(1, L1_ROW_BYTES // (2 * hidden)))
    positive(tile_rows=tr)
    divides(f"{name}: tile_rows over the {rows // tiles} rows of each herd tile", rows // tiles, tr)
    t_x, t_w, t_y = ddr_type((rows, hidden), flat_in), memref((hidden,)), \
        ddr_type((rows, hidden), flat_out)

    b = Body(n_args=3)
    l1_x, l1_w, l1_ss = memref((tr, hidden), "bf16", 2), memref((hidden,), "bf16", 2), \
        memref((tr,), "f32", 2)
    with herd(b, name, (hx, hy), ["%arg0", "%arg1", "%arg2"], [t_x, t_w, t_y], "rmsnorm",
              eps=f32_attr(eps)) as ((tx, ty), (x, w, y)):
        x1, y1 = flatten(b, x, t_x), flatten(b, y, t_y)
        flat_t = memref((rows * hidden,))
        lx, lw, ly = b.alloc(l1_x, "x_l1"), b.alloc(l1_w, "w_l1"), b.alloc(l1_x, "y_l1")
        ss = b.alloc(l1_ss, "ss_l1")
        b.dma(lw, l1_w, w, t_w)
        tid = tile_id(b, tx, ty, (hx, hy))
        with chunk_loop(b, tid, tiles, tr, rows) as row0:
            start = b.arith("muli", row0, b.const(hidden), hint="start")
            n, one = b.const(tr * hidden), b.const(1)
            b.dma(lx, l1_x, x1, flat_t, src_ofs=[start], src_sizes=[n], src_strides=[one])
            zero = b.const(0.0, "f32")
            generic(b, [], [], [ss], [l1_ss], ["(d0) -> (d0)"], ["parallel"],
                    lambda b, i, o: [zero])

            def square_sum(b, ins, outs):
                v = b.op("arith.extf", [ins[0]], ["bf16"], ["f32"], hint="f")[0]
                sq = b.op("arith.mulf", [v, v], ["f32", "f32"], ["f32"], hint="sq")[0]
                return [b.op("arith.addf", [sq, outs[0]], ["f32", "f32"], ["f32"], hint="acc")[0]]

            generic(b, [lx], [l1_x], [ss], [l1_ss], ["(d0, d1) -> (d0, d1)", "(d0, d1) -> (d0)"],
                    ["parallel", "reduction"], square_sum)
            c_h, c_eps = b.const(float(hidden), "f32"), b.const(float(eps), "f32")

            def normalise(b, ins, outs):
                xv, s, wv = ins
                f32 = ["f32", "f32"]
                ms = b.op("arith.divf", [s, c_h], f32, ["f32"], hint="ms")[0]
                ms = b.op("arith.addf", [ms, c_eps], f32, ["f32"], hint="ms")[0]
                r = b.op("math.rsqrt", [ms], ["f32"], ["f32"], hint="rinv")[0]
                xf = b.op("arith.extf", [xv], ["bf16"], ["f32"], hint="f")[0]
                wf = b.op("arith.extf", [wv], ["bf16"], ["f32"], hint="f")[0]
                yv = b.op("arith.mulf", [xf, r], f32, ["f32"], hint="y")[0]
                yv = b.op("arith.mulf", [yv, wf], f32, ["f32"], hint="y")[0]
                return [b.op("arith.truncf", [yv], ["f32"], ["bf16"], hint="r")[0]]

            generic(b, [lx, ss, lw], [l1_x, l1_ss, l1_w], [ly], [l1_x],
                    ["(d0, d1) -> (d0, d1)", "(d0, d1) -> (d0)", "(d0, d1) -> (d1)",
                     "(d0, d1) -> (d0, d1)"], ["parallel", "parallel"], normalise)
            b.dma(y1, flat_t, ly, l1_x, dst_ofs=[start], dst_sizes=[n], dst_strides=[one])
        for buf, t in ((lx, l1_x), (lw, l1_w), (ly, l1_x), (ss, l1_ss)):
            b.dealloc(buf, t)

    def model(x, w, y):
        y[...] = to_bf16(rms_norm(x.reshape(rows, hidden), w, eps)).reshape(y.shape)

    args = (Arg("x", (rows * hidden,) if flat_in else (rows, hidden), "input",
                "activation rows (the residual stream)"),
            Arg("w", (hidden,), "weight", "RMSNorm scale gamma"),
            Arg("y", (rows * hidden,) if flat_out else (rows, hidden), "output", "normalised rows"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, [t_x, t_w, t_y], b),
                      model=model, herd=(hx, hy), tiles={"tile_rows": tr}, params={"eps": eps}))
