"""Solutions to the exercises of notebook 05b (tiles and the L1 budget)."""


def gemv_tile_m(m, k, tiles):
    """The largest divisor of m / tiles whose bf16 weight block tile_m x k fits 16 KiB.
    Why: the herd's tiles split the output rows; each tile streams its rows tile_m at a time, and
    upstream sizes that block to 16 KiB (m_input = 4 rows at K = 2048, Xilinx/mlir-air llms/shared/
    builders/rms_gemv_rope_multi.py) so that two of them and two copies of x fit L1 (ping-pong)."""
    rows = m // tiles
    cap = max(1, 16 * 1024 // (2 * k))
    return next(t for t in range(min(rows, cap), 0, -1) if rows % t == 0)


def gemv_l1_bytes(tile_m, k):
    """a [tile_m, k] + x [k] + y [tile_m], bf16.
    Why: every tile needs its block of weight rows, the whole input vector (each output row is a
    dot product with all of x) and room for its tile_m outputs."""
    return 2 * (tile_m * k + k + tile_m)


def largest_tile_m(m, k, tiles):
    """The largest divisor of m / tiles whose buffers fit L1 less the core's stack, double-buffered.
    Why: the builder's 16 KiB weight budget is a choice; the hard limit is the 64 KiB data memory of
    a compute tile, of which the stack takes 1 KiB; and aircc by default ping-pongs every buffer a
    DMA fills (here the weight block and x), so those are held twice."""
    rows, room = m // tiles, 64 * 1024 - 1024
    return next(t for t in range(rows, 0, -1)
                if rows % t == 0 and gemv_l1_bytes(t, k) + 2 * (t * k + k) <= room)
