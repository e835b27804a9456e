"""RoPE, half-split pairing (HF's convention), by the C++ kernel rope_halfsplit_bf16 (rope.o).

The rotation table is an input, not compiled in: a LUT [rows, n_heads*head_dim] whose every
head_dim slice holds cos(pos * inv_freq) in its first half and sin in its second (`rope_lut`).
x, lut and y share one layout -- the Q (or K) GEMM's output [seq, n_heads*head_dim] -- so a row of
x is n_heads consecutive head vectors and the same DMA pattern fetches x and its table.

    launch [1, 1] -> segment -> herd [8, 1] (decode: [1, 1]); each tile takes every T-th block of
    tile_rows positions:  DDR x, lut rows --DMA--> L1 [tile_rows*n_heads, head_dim] x2
    --call @rope_halfsplit_bf16(x, lut, y, tile_rows*n_heads, head_dim)--> L1 y --DMA--> DDR y
"""
from __future__ import annotations

import numpy as np

from llamanb.model.numerics import to_bf16
from llamanb.model.rope import cos_sin
from llamanb.npu.compiler.mlir import Body, Extern, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, chunk_loop, ddr_type, divides, flatten, herd, herd_shape, launch, pick_tile, positive, segment, tile_id)
from llamanb.npu.compiler.builders._extern import extern_model

SYMBOL, OBJECT = "rope_halfsplit_bf16", "rope.o"
L1_BYTES = 8 * 1024      # default: each of the three L1 tiles at most 8 KB


def rope_lut(positions, n_heads: int, freqs: np.ndarray) -> np.ndarray:
    """[S, n_heads*head_dim] bf16 table: per head, cos | sin of pos * freqs (freqs [head_dim/2],
    from llamanb.rope.inv_freq)."""
    cos, sin = cos_sin(np.asarray(positions), freqs)                    # [S, d/2] each
    return to_bf16(np.tile(np.concatenate([cos, sin], -1), (1, n_heads)))


def rope(rows: int, n_heads: int, head_dim: int, herd_xy=(8, 1), tile_rows: int | None = None,
         flat: bool = False, name: str = "rope", symbol: str = SYMBOL,
         link_with: str = OBJECT) -> KernelSpec:
    """y [rows, n_heads*head_dim] = x rotated by the table lut (same shape).

    Q and K in one stitched module have different L1 tiles (n_heads vs n_kv_heads rows), so one of
    them needs another symbol (as gemv's second K does); the declaration records the C kernel."""
    positive(rows=rows, n_heads=n_heads, head_dim=head_dim)
    if head_dim % 2:
        from llamanb.errors import LlamanbError
        raise LlamanbError(f"{name}: head_dim must be even for half-split pairs, got {head_dim}")
    hx, hy = herd_shape(herd_xy)
    tiles, width = hx * hy, n_heads * head_dim
    divides(f"{name}: herd of {tiles} tiles over {rows} positions", rows, tiles,
            "use a 1x1 herd for decode")
    tr = tile_rows if tile_rows is not None else pick_tile(rows // tiles,
                                                          max(1, L1_BYTES // (2 * width)))
    positive(tile_rows=tr)
    divides(f"{name}: tile_rows over the {rows // tiles} positions of each herd tile",
            rows // tiles, tr)
    t = ddr_type((rows, width), flat)
    l1 = memref((tr * n_heads, head_dim), "bf16", 2)
    ext = Extern(symbol, link_with, (l1, l1, l1, "i32", "i32"), impl=SYMBOL)

    b = Body(n_args=3)
    with launch(b, name, (1, 1), ["%arg0", "%arg1", "%arg2"], [t] * 3) as (_, lo):
        with segment(b, name, lo, [t] * 3) as (_, so):
            with herd(b, name, (hx, hy), so, [t] * 3, "rope", link_with=link_with) as ((tx, ty), h):
                x, lut, y = (flatten(b, v, t) for v in h)
                flat_t = memref((rows * width,))
                lx, ll, ly = (b.alloc(l1, f"{k}_l1") for k in ("x", "lut", "y"))
                tid = tile_id(b, tx, ty, (hx, hy))
                with chunk_loop(b, tid, tiles, tr, rows) as row0:
                    start = b.arith("muli", row0, b.const(width), hint="start")
                    one, size = b.const(1), b.const(tr * width)
                    for buf, src in ((lx, x), (ll, lut)):
                        b.dma(buf, l1, src, flat_t, src_ofs=[start], src_sizes=[size],
                              src_strides=[one])
                    b.op("func.call", [lx, ll, ly, b.const(tr * n_heads, "i32"),
                                       b.const(head_dim, "i32")], [l1, l1, l1, "i32", "i32"],
                         props={"callee": f"@{symbol}"})
                    b.dma(y, flat_t, ly, l1, dst_ofs=[start], dst_sizes=[size], dst_strides=[one])
                for buf in (lx, ll, ly):
                    b.dealloc(buf, l1)

    def model(x, lut, y):
        f = extern_model(SYMBOL)
        y[...] = f(x.reshape(-1, head_dim), lut.reshape(-1, head_dim)).reshape(y.shape)

    shape = (rows * width,) if flat else (rows, width)
    args = (Arg("x", shape, "input", f"Q or K rows, {n_heads} heads x {head_dim}"),
            Arg("lut", shape, "weight", "cos | sin of each position's angles, per head"),
            Arg("y", shape, "output", "rotated rows"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, [t] * 3, b, [ext]),
                      model=model, herd=(hx, hy), tiles={"tile_rows": tr}, links=(link_with,),
                      externs=(symbol,)))
