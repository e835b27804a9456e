"""Solutions to the exercises of notebook 05 (seven NPU kernels)."""


def gemv_tile_m(m, k, tiles):
    """The largest divisor of m / tiles whose bf16 weight block tile_m x k fits 32 KB.
    Why: the herd's tiles split the output rows; each tile streams its rows tile_m at a time,
    and upstream sizes that block to 32 KB so that the rest of L1 holds x and y (and a second block)."""
    rows = m // tiles
    cap = max(1, 32 * 1024 // (2 * k))
    return next(t for t in range(min(rows, cap), 0, -1) if rows % t == 0)


def gemv_l1_bytes(tile_m, k):
    """a [tile_m, k] + x [k] + y [tile_m], bf16.
    Why: every tile needs its block of weight rows, the whole input vector (each output row is a
    dot product with all of x) and room for its tile_m outputs."""
    return 2 * (tile_m * k + k + tile_m)


def largest_tile_m(m, k, tiles):
    """The largest divisor of m / tiles whose buffers fit L1 less the core's stack.
    Why: the builder's 32 KB weight budget is a choice; the hard limit is the 64 KiB data memory of
    a compute tile, of which the stack takes 1 KiB."""
    rows, room = m // tiles, 64 * 1024 - 1024
    return next(t for t in range(rows, 0, -1) if rows % t == 0 and gemv_l1_bytes(t, k) <= room)
