"""Chapter 05b exercises: a GEMV tile plan that fits a compute tile's L1.

    gemv_tile_m(m, k, tiles) -> int        the builder's default tile: rows per DMA block, within
                                           the 16 KiB weight-block budget (llamanb.npu.compiler.builders.gemv)
    gemv_l1_bytes(tile_m, k) -> int        bytes one tile holds: read from the built module's plan
    largest_tile_m(m, k, tiles) -> int     the largest tile_m the emulated NPU2 accepts compiled as
                                           XRTBackend does by default, with ping-pong (a second copy
                                           of each DMA-fed buffer; L1 of 64 KiB less the 1 KiB
                                           stack): found by building
"""
from __future__ import annotations

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.builders import gemv
from llamanb.npu.compiler.plan import read_plan
from llamanb.course.exercises.check import Case, Exercise

# no K = 8192: with ping-pong even one row of it does not fit a tile twice (upstream compiles that
# GEMV with omit_pingpong="all")
SHAPES = ((576, 576), (192, 576), (1536, 576), (576, 1536), (2048, 2048), (512, 4096),
          (6144, 576), (64, 64), (2048, 4096), (120, 3000))


def _tile_cases() -> list[Case]:
    cases = []
    for (m, k), tiles in zip(SHAPES, (8, 8, 8, 8, 8, 8, 8, 8, 4, 2)):
        cases.append(Case(f"m={m}, k={k}, {tiles} tiles", (m, k, tiles),
                          gemv(m, k, herd_xy=(tiles, 1)).tiles["tile_m"]))
    return cases


gemv_tile_m = Exercise(
    "05b.1", "gemv_tile_m", _tile_cases,
    hint="each tile owns m / tiles rows; tile_m must divide that, and a bf16 weight block "
         "tile_m x k must stay within 16 KiB: the largest divisor of m / tiles that is <= 16384 // (2k)")


def _l1_bytes(m: int, k: int, tile_m: int) -> int:
    # what the tile allocates, single-buffered (built without ping-pong so that large blocks build)
    herd = read_plan(gemv(m, k, tile_m=tile_m, omit_pingpong="all").text).launches[0].herds[0]
    return herd.l1_bytes


def _l1_cases() -> list[Case]:
    return [Case(f"tile_m={tm}, k={k}", (tm, k), _l1_bytes(m, k, tm))
            for m, k, tm in ((64, 64, 8), (576, 576, 24), (2048, 2048, 8), (512, 4096, 2),
                             (576, 576, 1), (1536, 576, 48))]


gemv_l1_bytes = Exercise(
    "05b.2", "gemv_l1_bytes", _l1_cases,
    hint="a tile holds three bf16 buffers (2 bytes each): its weight block [tile_m, k], the whole "
         "vector x [k], and its output y [tile_m]")


def _largest(m: int, k: int, tiles: int) -> int:
    rows = m // tiles
    for tm in range(rows, 0, -1):
        if rows % tm:
            continue
        try:
            gemv(m, k, herd_xy=(tiles, 1), tile_m=tm)       # rejected at build time if L1 overflows
        except LlamanbError:
            continue
        return tm
    raise AssertionError(f"no tile fits m={m}, k={k}")


def _largest_cases() -> list[Case]:
    # compiled with ping-pong (XRTBackend's default): the weight block and x are held twice
    return [Case(f"m={m}, k={k}, {tiles} tiles", (m, k, tiles), _largest(m, k, tiles))
            for (m, k), tiles in zip(SHAPES + ((440, 576), (496, 512)),
                                     (8, 8, 8, 8, 8, 8, 8, 8, 4, 2, 8, 8))]


largest_tile_m = Exercise(
    "05b.3", "largest_tile_m", _largest_cases,
    hint="L1 is 64 KiB per tile, 1 KiB of it the core's stack, and with ping-pong the two DMA-fed "
         "buffers (weight block and x) are held twice: try divisors of m / tiles from the largest "
         "down and keep the first whose 05b.2 bytes plus a second weight block and x fit the rest")

EXERCISES = (gemv_tile_m, gemv_l1_bytes, largest_tile_m)
