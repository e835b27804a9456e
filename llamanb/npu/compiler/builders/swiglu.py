"""SwiGLU's elementwise half, fused: out = silu(gate) * up, by the C++ kernel silu_and_mul_bf16.

External kernel (silu_and_mul.o, declared `func.func private` with `link_with`): launch [1, 1] ->
segment -> herd [8, 1]. Each tile streams chunks of `tile` elements of the flat buffers:
    DDR gate, up --DMA--> L1 [tile] x2 --call @silu_and_mul_bf16(g, u, o, tile)--> L1 o --DMA--> DDR
Fusing the two halves saves a full pass over the [rows, ffn] tensor (upstream's reason for it).

packed=True (flat only) takes one buffer gu [2n] = gate then up, as the packed gate/up GEMV of the
3-launch decode group writes it: the up chunk is read n elements after the gate chunk.
"""
from __future__ import annotations

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.mlir import Body, Extern, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, chunk_loop, ddr_type, divides, flatten, herd, herd_shape, launch, pick_tile, positive, segment, tile_id)
from llamanb.npu.compiler.builders._extern import extern_model

SYMBOL, OBJECT = "silu_and_mul_bf16", "silu_and_mul.o"
L1_CHUNK = 4096          # default elements per chunk: 3 L1 buffers x 8 KB


def silu_and_mul(rows: int, ffn: int, herd_xy=(8, 1), tile: int | None = None,
                 flat: bool = False, packed: bool = False,
                 name: str = "silu_and_mul") -> KernelSpec:
    """out [rows, ffn] = silu(gate) * up (flat [rows*ffn] buffers with flat=True).

    packed=True: arguments (gu [2*rows*ffn] = gate then up, out [rows*ffn]); needs flat=True."""
    positive(rows=rows, ffn=ffn)
    if packed and not flat:
        raise LlamanbError(f"{name}: packed=True (gate then up in one buffer) needs flat=True")
    hx, hy = herd_shape(herd_xy)
    n, tiles = rows * ffn, hx * hy
    divides(f"{name}: herd of {tiles} tiles over {n} elements", n, tiles)
    tile = tile if tile is not None else pick_tile(n // tiles, L1_CHUNK)
    positive(tile=tile)
    divides(f"{name}: tile of {tile} elements over the {n // tiles} of each herd tile",
            n // tiles, tile)
    t = ddr_type((rows, ffn), flat)
    l1 = memref((tile,), "bf16", 2)
    ext = Extern(SYMBOL, OBJECT, (l1, l1, l1, "i32"))
    t_gu = memref((2 * n,))
    types = [t_gu, t] if packed else [t] * 3

    b = Body(n_args=len(types))
    opds = [f"%arg{i}" for i in range(len(types))]
    with launch(b, name, (1, 1), opds, types) as (_, lo):
        with segment(b, name, lo, types) as (_, so):
            with herd(b, name, (hx, hy), so, types, "silu_and_mul", link_with=OBJECT) \
                    as ((tx, ty), h):
                if packed:
                    g, o = h
                    u = g
                else:
                    g, u, o = (flatten(b, v, t) for v in h)
                flat_t = memref((n,))
                src_t = t_gu if packed else flat_t
                lg, lu, lo1 = (b.alloc(l1, f"{k}_l1") for k in ("gate", "up", "out"))
                tid = tile_id(b, tx, ty, (hx, hy))
                with chunk_loop(b, tid, tiles, tile, n) as off:
                    one, size = b.const(1), b.const(tile)
                    up_off = b.arith("addi", off, b.const(n), hint="up_off") if packed else off
                    for buf, src, ofs in ((lg, g, off), (lu, u, up_off)):
                        b.dma(buf, l1, src, src_t, src_ofs=[ofs], src_sizes=[size],
                              src_strides=[one])
                    b.op("func.call", [lg, lu, lo1, b.const(tile, "i32")], [l1, l1, l1, "i32"],
                         props={"callee": f"@{SYMBOL}"})
                    b.dma(o, flat_t, lo1, l1, dst_ofs=[off], dst_sizes=[size], dst_strides=[one])
                for buf in (lg, lu, lo1):
                    b.dealloc(buf, l1)

    shape = (n,) if flat else (rows, ffn)
    if packed:
        def model(gu, out):
            out[...] = extern_model(SYMBOL)(gu[:n], gu[n:]).reshape(out.shape)

        args = (Arg("gu", (2 * n,), "input", "x @ [W_gate; W_up]: gate then up"),
                Arg("out", shape, "output", "silu(gate) * up"))
    else:
        def model(gate, up, out):
            out[...] = extern_model(SYMBOL)(gate, up).reshape(out.shape)

        args = (Arg("gate", shape, "input", "x @ W_gate (pre-activation)"),
                Arg("up", shape, "input", "x @ W_up"),
                Arg("out", shape, "output", "silu(gate) * up"))
    return fits(KernelSpec(name=name, args=args, text=module_text(name, types, b, [ext]),
                      model=model, herd=(hx, hy), tiles={"tile": tile}, links=(OBJECT,),
                      externs=(SYMBOL,)))
