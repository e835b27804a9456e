"""The CUDA kernels of a Llama block, after xyg-coder/min_llm_inference, in numba-cuda.

min_llm_inference (src/kernels/self_attention_inference_optimized.cu, src/kernels/decoder.cu) runs
one self-attention block over a batch of sequences of different lengths with five kernels and an
argmax decoder, all driven by one int per batch row, `lengths` (0 = an empty row). Its caches:

    kt_cache [n_batch, dim, n_sequence]    K stored TRANSPOSED: in `qkt` the threads of a warp
                                           take consecutive key positions j and read
                                           kt[.., c, j], kt[.., c, j+1], ... -- one coalesced load
    v_cache  [n_batch, n_sequence, dim]    V as is: in `softmax_v` threads take consecutive
                                           columns c and read v[.., j, c], v[.., j, c+1], ...

The same design for a Llama, every cache also split by K/V head:

    kt [slots, N_kv, d, S]     v [slots, N_kv, S, d]

    kernel        grid                            block        one thread computes
    gemm_nt       (N/T, M/T)                      (T, T)       C[m, n] (+)= A[m, :] . W[n, :]
    rmsnorm       rows / warps-per-block          32 x wpb     a warp per row, lane-strided
    rope          R (N_h+N_kv) d/2 / B            B            one rotated pair
    fill_kv       (d/T, n_max/T, segments N_kv)   (T, T)       one K (transposed via a shared
                                                               tile) and one V element
    qkt           (L_max/B, R N_h)                B            one score q . k_j / sqrt(d)
    softmax_rows  R N_h / warps-per-block         32 x wpb     a warp per row, length-masked
    softmax_v     (d/B, R N_h)                    B            one output column
    silu_mul      R D_ff / B                      B            one SwiGLU product
    argmax_decode n_seq                           B            a block per sequence: argmax,
                                                               lengths/EOF bookkeeping, the next
                                                               token's embedding row
    (T = tile edge, B = T*T threads, wpb = warps per block)

`row_len[r]` plays upstream's `lengths`: the number of keys query row r sees (its position + 1;
0 for a padding row, which every kernel skips). A block whose first key lies past its row's
length returns at once (upstream's early exit); kernels that synchronise never return early
thread by thread, because the simulator's barrier waits for every thread of the block.

Importing this module imports numba: import it after `llamanb.cuda.runtime.load` (which fixes
simulator or GPU for the process). `build(tile)` makes the kernels for a tile edge; the warp reduction is chosen in ONE
place, `_warp_reductions`: register shuffles (`shfl_xor_sync`) on a GPU, a shared-memory tree
under numba-cuda's simulator, which has no shuffles. Each `cuda.shared.array` sits on its own
source line: the simulator gives two allocations on one line the same buffer. (Its allocation
races between the threads of a block unless `runtime.load` installed `sim_shared`'s lock.)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from numba import cuda, float32, int32
from numba.core import config

from llamanb.cuda.launch import WARP, warps_per_block

SIMULATED = bool(config.ENABLE_CUDASIM)    # numba read NUMBA_ENABLE_CUDASIM when first imported

GPU_TILE = 16       # min_llm_inference's TILE_SIZE: 16 x 16 tiles, 256-thread 1-D blocks
SIM_TILE = 4        # under the simulator every thread is a Python thread: 16-thread blocks


@dataclass(frozen=True)
class Kernels:
    tile: int
    simulated: bool
    block: int              # threads of a 1-D block, tile * tile
    warps_per_block: int    # rows per block in the one-warp-per-row kernels
    gemm_nt: object
    rmsnorm: object
    rope: object
    fill_kv: object
    qkt: object
    softmax_rows: object
    softmax_v: object
    silu_mul: object
    argmax_decode: object

    @property
    def entry_points(self) -> tuple[str, ...]:
        return ENTRY_POINTS


ENTRY_POINTS = ("gemm_nt", "rmsnorm", "rope", "fill_kv", "qkt", "softmax_rows", "softmax_v",
                "silu_mul", "argmax_decode")


def signatures() -> dict:
    """Each kernel's argument types as the backend launches it (C-contiguous float32 arrays,
    int32 index arrays, Python ints as int64, float32 scalars): what ahead-of-time compilation
    to PTX needs (tests/cuda/test_cuda_compile.py compiles every kernel for sm_80 and sm_90)."""
    from numba import int64

    f1, f2, f4, i1 = float32[::1], float32[:, ::1], float32[:, :, :, ::1], int32[::1]
    return {"gemm_nt": (f2, f2, f2, int64), "rmsnorm": (f2, f1, f2, float32),
            "rope": (f2, f2, f2, int64, int64), "fill_kv": (f2, i1, i1, i1, i1, f4, f4, int64),
            "qkt": (f2, f4, i1, i1, f2, int64, int64, float32), "softmax_rows": (f2, i1, int64),
            "softmax_v": (f2, f4, i1, i1, f2, int64, int64), "silu_mul": (f2, f2),
            "argmax_decode": (f2, i1, i1, int64, int64, f2, f2)}


def _warp_reductions(simulated: bool):
    """warp_sum / warp_max (value, scratch [wpb, 32], warp, lane) -> the warp's total in every
    lane. THE one place that picks how a warp reduces."""
    if simulated:
        # numba-cuda's simulator implements no shfl_*_sync (nor syncwarp): each lane writes its
        # value to shared memory, a block-wide barrier, every lane folds the warp's 32 values in
        # lane order, a barrier before the scratch is reused. Two barriers (a tree would take
        # six), and each barrier is what a simulated block pays for most. Every thread of the
        # block must call.
        @cuda.jit(device=True)
        def warp_sum(v, scratch, warp, lane):
            scratch[warp, lane] = v
            cuda.syncthreads()
            total = scratch[warp, 0]
            for i in range(1, WARP):
                total += scratch[warp, i]
            cuda.syncthreads()
            return total

        @cuda.jit(device=True)
        def warp_max(v, scratch, warp, lane):
            scratch[warp, lane] = v
            cuda.syncthreads()
            best = scratch[warp, 0]
            for i in range(1, WARP):
                best = max(best, scratch[warp, i])
            cuda.syncthreads()
            return best
    else:
        # butterfly: after log2(32) exchanges every lane holds the warp's result
        @cuda.jit(device=True)
        def warp_sum(v, scratch, warp, lane):
            off = WARP // 2
            while off > 0:
                v += cuda.shfl_xor_sync(0xFFFFFFFF, v, off)
                off //= 2
            return v

        @cuda.jit(device=True)
        def warp_max(v, scratch, warp, lane):
            off = WARP // 2
            while off > 0:
                v = max(v, cuda.shfl_xor_sync(0xFFFFFFFF, v, off))
                off //= 2
            return v
    return warp_sum, warp_max


@lru_cache(maxsize=None)
def build(tile: int) -> Kernels:
    """The kernels for tiles of tile x tile (a power of two), for a GPU or for the simulator as
    this process's numba was imported (SIMULATED)."""
    if tile < 2 or tile & (tile - 1):
        raise ValueError(f"tile must be a power of two >= 2, got {tile}")
    simulated = SIMULATED
    T = tile
    # Shared tiles are [T][T + 1], padded by a column. Shared memory has 32 banks of 4 bytes;
    # float tile[i][c] lives in bank (i * TP + c) mod 32, and a warp's accesses to distinct
    # addresses in one bank serialise (n of them: an n-way conflict; one address read by many
    # lanes is a broadcast, free). With T = 16 a warp of a (16, 16) block is two rows of it:
    # lanes 0-15 have ty = y, lanes 16-31 ty = y + 1, tx = 0..15 in both. Reading a tile
    # COLUMN, tile[tx][c]:
    #   fill_kv, tile_k[tx][ty]: two columns, c = y and y + 1, 32 addresses. TP = 17: 17 tx
    #     mod 32 is tx for even tx, tx + 16 for odd tx, 16 distinct banks per column; the second
    #     column is the first shifted by one bank, so a bank is hit at most twice: worst case
    #     2-way. TP = 16: 16 tx mod 32 is 0 or 16, each column's 16 addresses fall in 2 banks,
    #     the two columns in 4: 8-way.
    #   gemm_nt, w_tile[tx][kk]: one column (kk is the same for the whole warp), both halves
    #     read the same 16 addresses (broadcast): TP = 17 puts them in 16 banks, no conflict;
    #     TP = 16 in 2 banks, 8-way.
    # (tests/cuda/test_cuda_kernels.py enumerates the 32 lanes' addresses and counts.)
    TP = T + 1
    B = T * T
    WPB = warps_per_block(T)
    NEG_INF = -math.inf
    warp_sum, warp_max = _warp_reductions(simulated)

    @cuda.jit
    def gemm_nt(a, w, c, accumulate):
        """c [M, N] = a [M, K] @ w [N, K]^T (+ c when accumulate != 0). Weights stay [out, in]:
        both tiles are loaded along K, the contiguous axis of a and of w."""
        a_tile = cuda.shared.array((T, TP), float32)
        w_tile = cuda.shared.array((T, TP), float32)
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        M = a.shape[0]
        K = a.shape[1]
        N = w.shape[0]
        row = cuda.blockIdx.y * T + ty
        col = cuda.blockIdx.x * T + tx
        w_row = cuda.blockIdx.x * T + ty          # the weight row this thread loads
        acc = float32(0.0)
        for k0 in range(0, K, T):
            if row < M and k0 + tx < K:
                a_tile[ty, tx] = a[row, k0 + tx]
            else:
                a_tile[ty, tx] = 0.0
            if w_row < N and k0 + tx < K:
                w_tile[ty, tx] = w[w_row, k0 + tx]
            else:
                w_tile[ty, tx] = 0.0
            cuda.syncthreads()
            for kk in range(T):
                acc += a_tile[ty, kk] * w_tile[tx, kk]
            cuda.syncthreads()
        if row < M and col < N:
            if accumulate != 0:
                c[row, col] = c[row, col] + acc
            else:
                c[row, col] = acc

    @cuda.jit
    def rmsnorm(x, weight, out, eps):
        """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, one warp per row."""
        scratch = cuda.shared.array((WPB, WARP), float32)
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        r = cuda.blockIdx.x * WPB + warp
        R = x.shape[0]
        H = x.shape[1]
        ss = float32(0.0)
        if r < R:
            for i in range(lane, H, WARP):
                ss += x[r, i] * x[r, i]
        total = warp_sum(ss, scratch, warp, lane)
        if r < R:
            inv = float32(1.0) / math.sqrt(total / float32(H) + eps)    # float32 throughout
            for i in range(lane, H, WARP):
                out[r, i] = x[r, i] * inv * weight[i]

    @cuda.jit
    def rope(qkv, cos, sin, n_rot_heads, head_dim):
        """Rotate q and k heads of qkv [R, (N_h + 2 N_kv) d] in place, half-split pairs
        (x1, x2) -> (x1 c - x2 s, x2 c + x1 s); cos, sin [R, d/2]."""
        i = cuda.grid(1)
        half = head_dim // 2
        R = qkv.shape[0]
        if i >= R * n_rot_heads * half:
            return
        r = i // (n_rot_heads * half)
        rem = i % (n_rot_heads * half)
        h = rem // half
        p = rem % half
        base = h * head_dim
        x1 = qkv[r, base + p]
        x2 = qkv[r, base + p + half]
        c = cos[r, p]
        s = sin[r, p]
        qkv[r, base + p] = x1 * c - x2 * s
        qkv[r, base + p + half] = x2 * c + x1 * s

    @cuda.jit
    def fill_kv(qkv, seg_slot, seg_row, seg_start, seg_n, kt, v, n_heads):
        """The new rows of every segment into the caches: kt [slots, N_kv, d, S] (transposed
        through a shared tile, so both the read and the write are coalesced), v [slots, N_kv,
        S, d]. Grid (d/T, n_max/T, segments * N_kv): upstream's fill_new_kt_v_cache, with the
        projection already done (RoPE sits between a Llama's projection and its cache)."""
        tile_k = cuda.shared.array((T, TP), float32)
        n_kv = kt.shape[1]
        d = kt.shape[2]
        sg = cuda.blockIdx.z // n_kv
        hk = cuda.blockIdx.z % n_kv
        n = seg_n[sg]
        if cuda.blockIdx.y * T >= n:          # no row of this block is in the segment
            return
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        slot = seg_slot[sg]
        start = seg_start[sg]
        i = cuda.blockIdx.y * T + ty          # row within the segment
        c = cuda.blockIdx.x * T + tx          # dimension
        if i < n and c < d:
            row = seg_row[sg] + i
            tile_k[ty, tx] = qkv[row, (n_heads + hk) * d + c]
            v[slot, hk, start + i, c] = qkv[row, (n_heads + n_kv + hk) * d + c]
        cuda.syncthreads()
        i2 = cuda.blockIdx.y * T + tx         # transposed: consecutive threads, consecutive j
        c2 = cuda.blockIdx.x * T + ty
        if i2 < n and c2 < d:
            kt[slot, hk, c2, start + i2] = tile_k[tx, ty]

    @cuda.jit
    def qkt(qkv, kt, row_slot, row_len, scores, n_heads, group, scale):
        """scores[r N_h + h, j] = q_{r,h} . k_j * scale for j < row_len[r]. Grid (L/B, R N_h)."""
        q_sh = cuda.shared.array(B, float32)
        rh = cuda.blockIdx.y
        r = rh // n_heads
        h = rh % n_heads
        L = row_len[r]
        if cuda.blockIdx.x * B >= L:          # every key of this block is past the row's length
            return
        tx = cuda.threadIdx.x
        j = cuda.blockIdx.x * B + tx
        d = kt.shape[2]
        slot = row_slot[r]
        hk = h // group
        acc = float32(0.0)
        for c0 in range(0, d, B):
            if c0 + tx < d:
                q_sh[tx] = qkv[r, h * d + c0 + tx]
            else:
                q_sh[tx] = 0.0
            cuda.syncthreads()
            if j < L:
                for cc in range(min(B, d - c0)):
                    acc += q_sh[cc] * kt[slot, hk, c0 + cc, j]
            cuda.syncthreads()
        if j < L:
            scores[rh, j] = acc * scale

    @cuda.jit
    def softmax_rows(scores, row_len, n_heads):
        """Softmax of scores[rh, :L] in place, L = row_len[rh // n_heads]; one warp per row:
        each lane keeps a running (max, sum) over its strided keys, then the warp combines."""
        scratch = cuda.shared.array((WPB, WARP), float32)
        warp = cuda.threadIdx.x // WARP
        lane = cuda.threadIdx.x % WARP
        rh = cuda.blockIdx.x * WPB + warp
        L = 0
        if rh < scores.shape[0]:
            L = row_len[rh // n_heads]
        m = float32(NEG_INF)
        s = float32(0.0)
        for j in range(lane, L, WARP):
            x = scores[rh, j]
            m_new = max(m, x)
            s = s * math.exp(m - m_new) + math.exp(x - m_new)
            m = m_new
        g = warp_max(m, scratch, warp, lane)
        if L > 0 and m > NEG_INF:
            s = s * math.exp(m - g)
        else:
            s = float32(0.0)
        total = warp_sum(s, scratch, warp, lane)
        if L > 0:
            inv = float32(1.0) / total
            for j in range(lane, L, WARP):
                scores[rh, j] = math.exp(scores[rh, j] - g) * inv

    @cuda.jit
    def softmax_v(p, v, row_slot, row_len, out, n_heads, group):
        """out[r, h d + c] = sum_{j < L} p[r N_h + h, j] v[slot, h / G, j, c]. Grid (d/B, R N_h);
        padding rows (L = 0) get 0."""
        p_sh = cuda.shared.array(B, float32)
        rh = cuda.blockIdx.y
        r = rh // n_heads
        h = rh % n_heads
        L = row_len[r]
        tx = cuda.threadIdx.x
        d = v.shape[3]
        c = cuda.blockIdx.x * B + tx
        slot = row_slot[r]
        hk = h // group
        acc = float32(0.0)
        for j0 in range(0, L, B):
            if j0 + tx < L:
                p_sh[tx] = p[rh, j0 + tx]
            else:
                p_sh[tx] = 0.0
            cuda.syncthreads()
            if c < d:
                for jj in range(min(B, L - j0)):
                    acc += p_sh[jj] * v[slot, hk, j0 + jj, c]
            cuda.syncthreads()
        if c < d:
            out[r, h * d + c] = acc

    @cuda.jit
    def silu_mul(gu, out):
        """out [R, F] = silu(gu[:, :F]) * gu[:, F:]."""
        i = cuda.grid(1)
        R = out.shape[0]
        F = out.shape[1]
        if i >= R * F:
            return
        r = i // F
        f = i % F
        g = gu[r, f]
        out[r, f] = g / (float32(1.0) + math.exp(-g)) * gu[r, F + f]

    @cuda.jit(device=True)
    def beats(v2, i2, v1, i1):
        """Does candidate (v2, i2) win over (v1, i1) as np.argmax picks? A NaN beats every
        number, the lower id wins among NaNs and among equal values. With every thread starting
        from (-inf, V), this is what makes an all -inf row give 0 (the first of equal values)
        and an all-NaN row give 0 (the first NaN) instead of leaving the index at V."""
        if v1 != v1:
            return v2 != v2 and i2 < i1
        if v2 != v2:
            return True
        return v2 > v1 or (v2 == v1 and i2 < i1)

    @cuda.jit
    def argmax_decode(logits, lengths, tokens, eos, max_len, emb, x_next):
        """One block per sequence b (upstream's decoder_kernel): tokens[b] = argmax logits[b]
        as np.argmax picks it (ties: the lowest id; a NaN counts as the largest value, so an
        all-NaN row gives 0, as does an all -inf one), then lengths[b] += 1, or 0 when the token
        is EOS or the sequence reaches max_len (the row is free); a live row gets its next input,
        emb[token], in x_next[b]. An empty row (lengths[b] == 0) gets token -1 and stays empty."""
        best_val = cuda.shared.array(B, float32)
        best_idx = cuda.shared.array(B, int32)
        b = cuda.blockIdx.x
        tx = cuda.threadIdx.x
        L = lengths[b]
        V = logits.shape[1]
        val = float32(NEG_INF)
        idx = int32(V)
        if L > 0:
            for i in range(tx, V, B):
                x = logits[b, i]
                if beats(x, i, val, idx):
                    val = x
                    idx = i
        best_val[tx] = val
        best_idx[tx] = idx
        cuda.syncthreads()
        gap = B // 2
        while gap > 0:
            if tx < gap:
                v2 = best_val[tx + gap]
                i2 = best_idx[tx + gap]
                if beats(v2, i2, best_val[tx], best_idx[tx]):
                    best_val[tx] = v2
                    best_idx[tx] = i2
            cuda.syncthreads()
            gap //= 2
        tok = best_idx[0]
        live = L > 0 and tok != eos and L + 1 < max_len
        if tx == 0:
            if L == 0:
                tokens[b] = -1
            else:
                tokens[b] = tok
                if live:
                    lengths[b] = L + 1
                else:
                    lengths[b] = 0
        if live:
            for c in range(tx, emb.shape[1], B):
                x_next[b, c] = emb[tok, c]

    return Kernels(T, simulated, B, WPB, gemm_nt, rmsnorm, rope, fill_kv, qkt, softmax_rows,
                   softmax_v, silu_mul, argmax_decode)
