"""Eltwise add (the residual connections): out = a + b, computed in float32, stored in bf16.

Codegen kernel: a bare air.herd (as upstream's eltwise_add builds it; a stitcher wraps it in
launch -> segment). Each of the herd's T tiles owns one contiguous block of n/T elements and
streams it in chunks of `tile` elements, as upstream's add does (o_ffn_multi.py:82-137):
    DDR a, b --DMA--> L1 a, b [tile]  --linalg.generic (extf, addf, truncf)-->  L1 c --DMA--> DDR
The DDR buffers are viewed flat (memref.collapse_shape, no data moves), so the same kernel serves
[rows, cols] and flat [rows*cols] arguments. Upstream adds 16-lane vectors
(vector.transfer_read / arith.addf on vector<16xbf16>); this builder keeps a linalg.generic, which
aircc would lower to scalar loops (convert-linalg-to-loops) -- the emulator's form, not a fast one; `flat=(False, False, True)` is upstream's 2D -> 1D
variant whose output the next layer's RMSNorm reads as one flat buffer.
"""
from __future__ import annotations

from llamanb.errors import LlamanbError
from llamanb.model.numerics import to_bf16
from llamanb.npu.compiler.mlir import Body, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, block_loop, ddr_type, divides, flatten, generic, herd, herd_shape, pick_tile, positive, tile_id)

L1_CHUNK = 2048          # default elements per L1 chunk: 3 buffers x 4 KB


def add(rows: int, cols: int, herd_xy=(8, 1), tile: int | None = None,
        flat=(False, False, False), name: str = "add") -> KernelSpec:
    """out [rows, cols] = a + b; `flat[k]` makes argument k a flat [rows*cols] buffer."""
    positive(rows=rows, cols=cols)
    hx, hy = herd_shape(herd_xy)
    n, tiles = rows * cols, hx * hy
    divides(f"{name}: herd of {tiles} tiles over {n} elements", n, tiles)
    tile = tile if tile is not None else pick_tile(n // tiles, L1_CHUNK)
    positive(tile=tile)
    divides(f"{name}: tile of {tile} elements over {n // tiles} elements per herd tile",
            n // tiles, tile)
    if len(flat) != 3:
        raise LlamanbError(f"{name}: flat takes three flags (a, b, out), got {flat!r}")
    types = [ddr_type((rows, cols), f) for f in flat]

    b = Body(n_args=3)
    l1 = memref((tile,), "bf16", 2)
    with herd(b, name, (hx, hy), ["%arg0", "%arg1", "%arg2"], types, "add") as ((tx, ty), h):
        a1, b1, c1 = (flatten(b, v, t) for v, t in zip(h, types))
        flat_t = memref((n,))
        la, lb, lc = (b.alloc(l1, f"{k}_l1") for k in ("a", "b", "c"))
        tid = tile_id(b, tx, ty, (hx, hy))
        with block_loop(b, tid, tiles, tile, n) as off:
            one, size = b.const(1), b.const(tile)
            for buf, src in ((la, a1), (lb, b1)):
                b.dma(buf, l1, src, flat_t, src_ofs=[off], src_sizes=[size], src_strides=[one])

            def body(b, ins, outs):
                x, y = (b.op("arith.extf", [v], ["bf16"], ["f32"], hint="f")[0] for v in ins)
                s = b.op("arith.addf", [x, y], ["f32", "f32"], ["f32"], hint="sum")[0]
                return [b.op("arith.truncf", [s], ["f32"], ["bf16"], hint="r")[0]]

            generic(b, [la, lb], [l1, l1], [lc], [l1], ["(d0) -> (d0)"] * 3, ["parallel"], body)
            b.dma(c1, flat_t, lc, l1, dst_ofs=[off], dst_sizes=[size], dst_strides=[one])
        for buf in (la, lb, lc):
            b.dealloc(buf, l1)

    def model(a, bb, out):
        out[...] = to_bf16(a.reshape(-1) + bb.reshape(-1)).reshape(out.shape)   # float32 add

    shapes = [(n,) if f else (rows, cols) for f in flat]
    args = (Arg("a", shapes[0], "input", "first addend (e.g. the O projection's output)"),
            Arg("b", shapes[1], "input", "second addend (e.g. the residual stream)"),
            Arg("out", shapes[2], "output", "a + b"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, types, b), model=model,
                      herd=(hx, hy), tiles={"tile": tile}))
