"""GEMV (decode projections and the LM head): y [m] = a [m, k] @ x [k], by the C++ matvec_bf16.

a is K-major: row-major [m, k] with k contiguous -- HF's [out_features, in_features] layout as is.
    launch [1, 1] -> segment: x --DMA--> L2 x [k] (one copy in a mem tile, fanned out to the herd)
      herd [8, 1]: L2 x --DMA--> L1 x [k] once; each tile owns m/T contiguous rows, in blocks of
      tile_m rows (upstream: tile tx owns rows tx*tile_m.. of each launch iteration's panel):
        DDR a rows --DMA--> L1 a [tile_m, k] --call @matvec_bf16(a, x, y, tile_m, k)--> L1 y
        --DMA--> DDR y
With m = 1 token there is no row parallelism left inside a tile; the herd splits output rows.
tile_m here is the rows of one L1 block -- upstream's m_input. Upstream's data path differs:
launch over chunks of herd * tile_m rows, the weight panel DDR --DMA--> L2, m_input-row windows
L2 --DMA--> L1, the vector DDR --DMA--> L1 on every trip (matvec.py:122-167); this builder streams
weight rows DDR --> L1 directly and stages x in L2 once.
A second K in one stitched module needs another symbol (upstream's mv_k8192.o): pass symbol= and
link_with=; the declaration records `llamanb.impl = "matvec_bf16"` so the emulator knows it.
"""
from __future__ import annotations

from llamanb.npu.compiler.mlir import Body, Extern, memref, module_text
from llamanb.npu.compiler.spec import Arg, KernelSpec
from llamanb.npu.compiler.builders._common import (fits, block_loop, divides, flatten, herd, herd_shape, launch, pick_tile, positive, segment, tile_id)
from llamanb.npu.compiler.builders._extern import extern_model

IMPL, OBJECT = "matvec_bf16", "mv.o"
# default weight block <= 16 KiB: 4 rows at K=2048, 1 at K=8192 -- the m_input-row L1 blocks of
# upstream's GEMV (Xilinx/mlir-air programming_examples/matrix_vector_multiplication/bf16/
# matvec.py:148-163, built with tile_m=8, m_input=4 at K=2048 by llms/shared/builders/
# rms_gemv_rope_multi.py:379-380). With ping-pong a tile holds two blocks and two copies of x:
# 2 * (16 + 4) KiB at K=2048 fits 64 KiB; 2 * (16 + 16) KiB at K=8192 does not, which is why
# upstream compiles its o_gemv_ffn group with omit_pingpong="all" (shared/infra/
# backend_presets.py:52-59).
L1_A_BYTES = 16 * 1024


def gemv(m: int, k: int, herd_xy=(8, 1), tile_m: int | None = None, symbol: str = IMPL,
         link_with: str = OBJECT, name: str = "gemv", omit_pingpong: str = "") -> KernelSpec:
    """y [m] = a [m, k] @ x [k] with float32 accumulation, bf16 result."""
    positive(m=m, k=k)
    hx, hy = herd_shape(herd_xy)
    tiles = hx * hy
    divides(f"{name}: herd of {tiles} tiles over {m} output rows", m, tiles)
    tm = tile_m if tile_m is not None else pick_tile(m // tiles, max(1, L1_A_BYTES // (2 * k)))
    positive(tile_m=tm)
    divides(f"{name}: tile_m over the {m // tiles} rows of each herd tile", m // tiles, tm)
    t_a, t_x, t_y = memref((m, k)), memref((k,)), memref((m,))
    l1_a, l1_x, l1_y, l2_x = memref((tm, k), "bf16", 2), memref((k,), "bf16", 2), \
        memref((tm,), "bf16", 2), memref((k,), "bf16", 1)
    ext = Extern(symbol, link_with, (l1_a, l1_x, l1_y, "i32", "i32"), impl=IMPL)

    b = Body(n_args=3)
    types = [t_a, t_x, t_y]
    with launch(b, name, (1, 1), ["%arg0", "%arg1", "%arg2"], types) as (_, lo):
        with segment(b, name, lo, types) as (_, (sa, sx, sy)):
            x2 = b.alloc(l2_x, "x_l2")
            b.dma(x2, l2_x, sx, t_x)
            with herd(b, name, (hx, hy), [sa, x2, sy], [t_a, l2_x, t_y], "gemv",
                      link_with=link_with) as ((tx, ty), (a, xl2, y)):
                a1 = flatten(b, a, t_a)
                la, lx, ly = b.alloc(l1_a, "a_l1"), b.alloc(l1_x, "x_l1"), b.alloc(l1_y, "y_l1")
                b.dma(lx, l1_x, xl2, l2_x)
                tid = tile_id(b, tx, ty, (hx, hy))
                with block_loop(b, tid, tiles, tm, m) as row0:
                    one = b.const(1)
                    start = b.arith("muli", row0, b.const(k), hint="start")
                    b.dma(la, l1_a, a1, memref((m * k,)), src_ofs=[start],
                          src_sizes=[b.const(tm * k)], src_strides=[one])
                    b.op("func.call", [la, lx, ly, b.const(tm, "i32"), b.const(k, "i32")],
                         [l1_a, l1_x, l1_y, "i32", "i32"], props={"callee": f"@{symbol}"})
                    b.dma(y, t_y, ly, l1_y, dst_ofs=[row0], dst_sizes=[b.const(tm)],
                          dst_strides=[one])
                for buf, t in ((la, l1_a), (lx, l1_x), (ly, l1_y)):
                    b.dealloc(buf, t)
            b.dealloc(x2, l2_x)

    def model(a, x, y):
        y[...] = extern_model(IMPL)(a, x)

    args = (Arg("a", (m, k), "weight", "weight rows [out, in], K contiguous"),
            Arg("x", (k,), "input", "the token's activation"),
            Arg("y", (m,), "output", "a @ x"))
    backend = {"omit_pingpong": omit_pingpong} if omit_pingpong else {}
    return fits(KernelSpec(name=name, args=args, text=module_text(name, types, b, [ext]), model=model,
                      herd=(hx, hy), tiles={"tile_m": tm}, links=(link_with,),
                      externs=(symbol,), backend=backend))
