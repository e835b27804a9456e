// y [M, N] = x [M, K] @ W[N, K]^T  (or y += that), W float32 or bfloat16, row-major K-contiguous.
//
// Decode is M = 1..16 rows against every weight: the kernel streams rows of W once and multiplies
// each against all M activation rows while it is in L1, so a step of 8 decoding sequences reads
// the weights once, as one sequence does. Prefill (M up to thousands) runs the same tiles over
// blocks of MB rows: W is read once per block, the block's activations stay in L2.
//
// Threads (pool.h) take chunks of 32 output columns (weight rows) x one block of rows, on
// demand. Each output element is one thread's dot
// product, accumulated in the same order whatever M is and whichever rows share the step -- so a
// row's result does not depend on its neighbours (see tests/test_cpu_backend.py).
#include "pool.h"
#include "vec.h"

namespace {

constexpr int MB = 64;      // activation rows per block when M is large

// MR activation rows x NR weight rows, over all K: MR*NR vector accumulators in registers.
template <int MR, int NR, typename WT>
inline void tile(const float* x, int K, const WT* W, float* y, int N, int accumulate, int rnd) {
    vf acc[MR][NR] = {};
    int k = 0;
    for (; k + VW <= K; k += VW) {
        vf w[NR];
        for (int j = 0; j < NR; ++j) w[j] = load(W + (long)j * K + k);
        for (int i = 0; i < MR; ++i) {
            vf xv = load(x + (long)i * K + k);
            for (int j = 0; j < NR; ++j) acc[i][j] += xv * w[j];
        }
    }
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) {
            float s = hsum(acc[i][j]);
            for (int kk = k; kk < K; ++kk) s += x[(long)i * K + kk] * widen(W[(long)j * K + kk]);
            float* out = y + (long)i * N + j;
            if (rnd) s = round_bf16(s);
            float v = accumulate ? *out + s : s;
            *out = rnd ? round_bf16(v) : v;
        }
}

// Rows m0..m1 of x against NR weight rows starting at n.
template <int NR, typename WT>
inline void rows(const float* x, int m0, int m1, int K, const WT* W, int n, float* y, int N,
                 int accumulate, int rnd) {
    const WT* w = W + (long)n * K;
    int m = m0;
    for (; m + 4 <= m1; m += 4) tile<4, NR>(x + (long)m * K, K, w, y + (long)m * N + n, N, accumulate, rnd);
    const float* xm = x + (long)m * K;
    float* ym = y + (long)m * N + n;
    switch (m1 - m) {
        case 3: tile<3, NR>(xm, K, w, ym, N, accumulate, rnd); break;
        case 2: tile<2, NR>(xm, K, w, ym, N, accumulate, rnd); break;
        case 1: tile<1, NR>(xm, K, w, ym, N, accumulate, rnd); break;
        default: break;
    }
}

template <typename WT>
void matmul(const float* x, int M, int K, const WT* W, int N, float* y, int accumulate, int rnd) {
    // one row alone: four weight rows at a time keeps four streams of W in flight
    constexpr int NR = 4, TILES_PER_CHUNK = 8;
    const int tiles = (N + NR - 1) / NR;
    const int64_t n_chunks = (tiles + TILES_PER_CHUNK - 1) / TILES_PER_CHUNK;
    const int64_t m_blocks = (M + MB - 1) / MB;
    llamanb_cpu::parallel_for(m_blocks * n_chunks, [&](int64_t chunk) {
        const int m0 = int(chunk / n_chunks) * MB, m1 = m0 + MB < M ? m0 + MB : M;
        const int t0 = int(chunk % n_chunks) * TILES_PER_CHUNK;
        const int t1 = t0 + TILES_PER_CHUNK < tiles ? t0 + TILES_PER_CHUNK : tiles;
        for (int t = t0; t < t1; ++t) {
            const int n = t * NR;
            if (n + NR <= N) {
                if (m1 - m0 == 1) rows<4>(x, m0, m1, K, W, n, y, N, accumulate, rnd);
                else {
                    rows<2>(x, m0, m1, K, W, n, y, N, accumulate, rnd);
                    rows<2>(x, m0, m1, K, W, n + 2, y, N, accumulate, rnd);
                }
            } else {
                for (int j = n; j < N; ++j) rows<1>(x, m0, m1, K, W, j, y, N, accumulate, rnd);
            }
        }
    });
}

}  // namespace

extern "C" {

void llamanb_cpu_matmul_f32(const float* x, int M, int K, const float* W, int N, float* y,
                            int accumulate, int rnd) {
    matmul(x, M, K, W, N, y, accumulate, rnd);
}

void llamanb_cpu_matmul_bf16(const float* x, int M, int K, const uint16_t* W, int N, float* y,
                             int accumulate, int rnd) {
    matmul(x, M, K, W, N, y, accumulate, rnd);
}

int llamanb_cpu_vector_width() { return VW; }

}
