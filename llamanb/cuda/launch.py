"""Launch configurations of the cuda kernels: (grid, block) for a step's shapes, one function per
kernel. numba-free, so the chapter and the exercises can print them anywhere; the backend
launches exactly these.

    T     tile edge (16 on a GPU, as min_llm_inference's TILE_SIZE; 4 under the simulator)
    B     threads of a 1-D block, T * T
    WPB   warps per block in the one-warp-per-row kernels, max(1, B / 32)
"""
from __future__ import annotations

WARP = 32


def cdiv(n: int, m: int) -> int:
    return max(1, -(-n // m))


def warps_per_block(tile: int) -> int:
    return max(1, tile * tile // WARP)


def gemm_nt(M: int, N: int, tile: int):
    """c [M, N]: a T x T block per output tile; x walks N (the columns), y walks M."""
    return (cdiv(N, tile), cdiv(M, tile)), (tile, tile)


def row_warps(rows: int, tile: int):
    """rmsnorm and softmax_rows: one warp per row, WPB rows per block."""
    w = warps_per_block(tile)
    return cdiv(rows, w), WARP * w


def elementwise(n: int, tile: int):
    """rope (n = R (N_h + N_kv) d/2 pairs) and silu_mul (n = R D_ff)."""
    return cdiv(n, tile * tile), tile * tile


def fill_kv(seg_lengths, n_kv: int, head_dim: int, tile: int):
    """x: head dimensions by tiles; y: a segment's rows by tiles (blocks past a shorter segment
    return at once); z: one (segment, K/V head) pair per slice."""
    return (cdiv(head_dim, tile), cdiv(max(seg_lengths), tile), len(seg_lengths) * n_kv), (tile, tile)


def qkt(rows: int, n_heads: int, max_len: int, tile: int):
    """x: key positions by B (blocks past a row's length return at once); y: one (row, head)."""
    B = tile * tile
    return (cdiv(max_len, B), rows * n_heads), B


def softmax_v(rows: int, n_heads: int, head_dim: int, tile: int):
    """x: output columns by B; y: one (row, head)."""
    B = tile * tile
    return (cdiv(head_dim, B), rows * n_heads), B


def argmax_decode(n_seq: int, tile: int):
    """One block of B threads per sequence."""
    return n_seq, tile * tile
