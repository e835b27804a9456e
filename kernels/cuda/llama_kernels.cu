// The CUDA C++ form of llamanb/cuda/kernels.py: a Llama block after xyg-coder/min_llm_inference's
// design (transposed K cache, per-row lengths with early exits, a warp per softmax row, an argmax
// decoder that keeps the lengths). Same entry points, grids and blocks as the numba-cuda kernels;
// written for the course, compiled by nvcc or NVRTC to PTX and SASS (sm_80, sm_90) by
// llamanb.cuda.compile. Caches: kt [slots, n_kv, d, S] (K transposed), v [slots, n_kv, S, d].
// Self-contained (no headers), so that NVRTC compiles it as it is.

#define TILE 16                 // tile edge: 16 x 16 blocks, 256-thread 1-D blocks
#define BLOCK (TILE * TILE)
#define WARP 32
#define WPB (BLOCK / WARP)      // rows per block in the one-warp-per-row kernels
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = WARP / 2; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
    for (int off = WARP / 2; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// c [M, N] (+)= a [M, K] . w [N, K]^T; grid (N/T, M/T), block (T, T)
extern "C" __global__ void gemm_nt(const float* __restrict__ a, const float* __restrict__ w,
                                   float* __restrict__ c, int M, int N, int K, int accumulate) {
    __shared__ float a_tile[TILE][TILE + 1];
    __shared__ float w_tile[TILE][TILE + 1];
    int tx = threadIdx.x, ty = threadIdx.y;
    int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
    int w_row = blockIdx.x * TILE + ty;
    float acc = 0.0f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        a_tile[ty][tx] = (row < M && k0 + tx < K) ? a[(size_t)row * K + k0 + tx] : 0.0f;
        w_tile[ty][tx] = (w_row < N && k0 + tx < K) ? w[(size_t)w_row * K + k0 + tx] : 0.0f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += a_tile[ty][kk] * w_tile[tx][kk];
        __syncthreads();
    }
    if (row < M && col < N) {
        size_t o = (size_t)row * N + col;
        c[o] = accumulate ? c[o] + acc : acc;
    }
}

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight; one warp per row, grid R / WPB, block BLOCK
extern "C" __global__ void rmsnorm(const float* __restrict__ x, const float* __restrict__ weight,
                                   float* __restrict__ out, int R, int H, float eps) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int r = blockIdx.x * WPB + warp;
    if (r >= R) return;                         // whole warps leave: shuffles need no barrier
    const float* xr = x + (size_t)r * H;
    float ss = 0.0f;
    for (int i = lane; i < H; i += WARP) ss += xr[i] * xr[i];
    float inv = rsqrtf(warp_sum(ss) / H + eps);
    for (int i = lane; i < H; i += WARP) out[(size_t)r * H + i] = xr[i] * inv * weight[i];
}

// q and k heads of qkv [R, (n_h + 2 n_kv) d] rotated in half-split pairs; cos, sin [R, d/2]
extern "C" __global__ void rope(float* __restrict__ qkv, const float* __restrict__ cos_t,
                                const float* __restrict__ sin_t, int R, int width,
                                int n_rot_heads, int d) {
    int i = blockIdx.x * blockDim.x + threadIdx.x, half = d / 2;
    if (i >= R * n_rot_heads * half) return;
    int r = i / (n_rot_heads * half), rem = i % (n_rot_heads * half);
    int h = rem / half, p = rem % half;
    float* base = qkv + (size_t)r * width + h * d;
    float x1 = base[p], x2 = base[p + half], c = cos_t[r * half + p], s = sin_t[r * half + p];
    base[p] = x1 * c - x2 * s;
    base[p + half] = x2 * c + x1 * s;
}

// new rows of each segment into the caches; grid (d/T, n_max/T, n_seg * n_kv), block (T, T)
extern "C" __global__ void fill_kv(const float* __restrict__ qkv, const int* __restrict__ seg_slot,
                                   const int* __restrict__ seg_row, const int* __restrict__ seg_start,
                                   const int* __restrict__ seg_n, float* __restrict__ kt,
                                   float* __restrict__ v, int width, int n_heads, int n_kv, int d,
                                   int S) {
    __shared__ float tile_k[TILE][TILE + 1];
    int sg = blockIdx.z / n_kv, hk = blockIdx.z % n_kv, n = seg_n[sg];
    if (blockIdx.y * TILE >= n) return;         // the block lies past the segment: leave
    int tx = threadIdx.x, ty = threadIdx.y, slot = seg_slot[sg], start = seg_start[sg];
    size_t head = ((size_t)slot * n_kv + hk) * (size_t)d * S;   // kt[slot, hk] and v[slot, hk]
    int i = blockIdx.y * TILE + ty, c = blockIdx.x * TILE + tx;
    if (i < n && c < d) {
        const float* row = qkv + (size_t)(seg_row[sg] + i) * width;
        tile_k[ty][tx] = row[(n_heads + hk) * d + c];
        v[head + (size_t)(start + i) * d + c] = row[(n_heads + n_kv + hk) * d + c];
    }
    __syncthreads();
    int i2 = blockIdx.y * TILE + tx, c2 = blockIdx.x * TILE + ty;
    if (i2 < n && c2 < d) kt[head + (size_t)c2 * S + start + i2] = tile_k[tx][ty];
}

// scores[r n_h + h, j] = q . k_j * scale for j < row_len[r]; grid (L/BLOCK, R n_h), block BLOCK
extern "C" __global__ void qkt(const float* __restrict__ qkv, const float* __restrict__ kt,
                               const int* __restrict__ row_slot, const int* __restrict__ row_len,
                               float* __restrict__ scores, int width, int n_heads, int n_kv,
                               int group, int d, int S, int L_max, float scale) {
    __shared__ float q_sh[BLOCK];
    int rh = blockIdx.y, r = rh / n_heads, h = rh % n_heads, L = row_len[r];
    if (blockIdx.x * BLOCK >= L) return;        // upstream's early exit on lengths
    int tx = threadIdx.x, j = blockIdx.x * BLOCK + tx;
    const float* k = kt + ((size_t)row_slot[r] * n_kv + h / group) * (size_t)d * S;
    float acc = 0.0f;
    for (int c0 = 0; c0 < d; c0 += BLOCK) {
        q_sh[tx] = c0 + tx < d ? qkv[(size_t)r * width + h * d + c0 + tx] : 0.0f;
        __syncthreads();
        if (j < L)
            for (int cc = 0; cc < BLOCK && c0 + cc < d; ++cc) acc += q_sh[cc] * k[(size_t)(c0 + cc) * S + j];
        __syncthreads();
    }
    if (j < L) scores[(size_t)rh * L_max + j] = acc * scale;
}

// softmax of scores[rh, :L] in place, one warp per row; grid (rows / WPB), block BLOCK
extern "C" __global__ void softmax_rows(float* __restrict__ scores, const int* __restrict__ row_len,
                                        int rows, int n_heads, int L_max) {
    int warp = threadIdx.x / WARP, lane = threadIdx.x % WARP;
    int rh = blockIdx.x * WPB + warp;
    if (rh >= rows) return;
    int L = row_len[rh / n_heads];
    if (L == 0) return;
    float* s = scores + (size_t)rh * L_max;
    float m = NEG_INF, sum = 0.0f;
    for (int j = lane; j < L; j += WARP) {      // a running (max, sum) per lane
        float m_new = fmaxf(m, s[j]);
        sum = sum * __expf(m - m_new) + __expf(s[j] - m_new);
        m = m_new;
    }
    float g = warp_max(m);
    sum = m > NEG_INF ? sum * __expf(m - g) : 0.0f;
    float inv = 1.0f / warp_sum(sum);
    for (int j = lane; j < L; j += WARP) s[j] = __expf(s[j] - g) * inv;
}

// out[r, h d + c] = sum_j p[rh, j] v[slot, h / G, j, c]; grid (d/BLOCK, R n_h), block BLOCK
extern "C" __global__ void softmax_v(const float* __restrict__ p, const float* __restrict__ v,
                                     const int* __restrict__ row_slot, const int* __restrict__ row_len,
                                     float* __restrict__ out, int n_heads, int n_kv, int group,
                                     int d, int S, int L_max) {
    __shared__ float p_sh[BLOCK];
    int rh = blockIdx.y, r = rh / n_heads, h = rh % n_heads, L = row_len[r];
    int tx = threadIdx.x, c = blockIdx.x * BLOCK + tx;
    const float* vv = v + ((size_t)row_slot[r] * n_kv + h / group) * (size_t)S * d;
    float acc = 0.0f;
    for (int j0 = 0; j0 < L; j0 += BLOCK) {
        p_sh[tx] = j0 + tx < L ? p[(size_t)rh * L_max + j0 + tx] : 0.0f;
        __syncthreads();
        if (c < d)
            for (int jj = 0; jj < BLOCK && j0 + jj < L; ++jj) acc += p_sh[jj] * vv[(size_t)(j0 + jj) * d + c];
        __syncthreads();
    }
    if (c < d) out[(size_t)r * n_heads * d + h * d + c] = acc;
}

// out [R, F] = silu(gu[:, :F]) * gu[:, F:]
extern "C" __global__ void silu_mul(const float* __restrict__ gu, float* __restrict__ out, int R, int F) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= R * F) return;
    int r = i / F, f = i % F;
    float g = gu[(size_t)r * 2 * F + f];
    out[i] = g / (1.0f + __expf(-g)) * gu[(size_t)r * 2 * F + F + f];
}

// Does candidate (v2, i2) win over (v1, i1) as np.argmax picks? A NaN beats every number; the
// lower id wins among NaNs and among equal values. Every thread starts from (-inf, V): with a
// plain `x > val` an all -inf or all-NaN row left the index at V and the kernel read emb[V].
__device__ __forceinline__ bool beats(float v2, int i2, float v1, int i1) {
    if (v1 != v1) return v2 != v2 && i2 < i1;
    if (v2 != v2) return true;
    return v2 > v1 || (v2 == v1 && i2 < i1);
}

// a block per sequence: argmax as np.argmax picks it (lowest id on ties; a NaN counts as the
// largest, so an all-NaN or all -inf row gives 0), lengths += 1 or 0 at EOS / max_len, and the
// next token's embedding row for a live sequence; grid n_seq, block BLOCK
extern "C" __global__ void argmax_decode(const float* __restrict__ logits, int* __restrict__ lengths,
                                         int* __restrict__ tokens, int V, int eos, int max_len,
                                         const float* __restrict__ emb, float* __restrict__ x_next,
                                         int H) {
    __shared__ float best_val[BLOCK];
    __shared__ int best_idx[BLOCK];
    int b = blockIdx.x, tx = threadIdx.x, L = lengths[b];
    float val = NEG_INF;
    int idx = V;
    if (L > 0)
        for (int i = tx; i < V; i += BLOCK) {
            float x = logits[(size_t)b * V + i];
            if (beats(x, i, val, idx)) { val = x; idx = i; }
        }
    best_val[tx] = val;
    best_idx[tx] = idx;
    __syncthreads();
    for (int gap = BLOCK / 2; gap > 0; gap >>= 1) {
        if (tx < gap) {
            float v2 = best_val[tx + gap];
            int i2 = best_idx[tx + gap];
            if (beats(v2, i2, best_val[tx], best_idx[tx])) {
                best_val[tx] = v2;
                best_idx[tx] = i2;
            }
        }
        __syncthreads();
    }
    int tok = best_idx[0];
    bool live = L > 0 && tok != eos && L + 1 < max_len;
    if (tx == 0) {
        tokens[b] = L == 0 ? -1 : tok;
        if (L > 0) lengths[b] = live ? L + 1 : 0;
    }
    if (live)
        for (int c = tx; c < H; c += BLOCK) x_next[(size_t)b * H + c] = emb[(size_t)tok * H + c];
}
