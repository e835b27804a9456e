// y [M, N] = x [M, K] @ W[N, K]^T  (or y += that), over weights packed once at load into panels.
//
// The packed layout (llamanb_cpu_pack_*): NP = 2 VW consecutive output columns form a panel, and
// a panel is stored k-major:
//
//     P[p, k, j] = W[p NP + j, k]        p < ceil(N / NP), k < K, j < NP   (zeros past N)
//
// so one weight row-slice W[n0 : n0+NP, k] is two vector loads, and an activation x[i, k] is
// broadcast against it. Every output element y[i, n] is one lane of one accumulator, summed over
// k = 0, 1, .., K-1 in that order with fused multiply-adds: the order is fixed by K alone, so a
// row's result never depends on how many rows share the step (no horizontal sums, no K split).
//
// Decode (M = 1..16): a step streams each panel once and multiplies every activation row
// against it while it sits in L1/L2 -- 8 decoding sequences read the weights once, as one does.
// Prefill (large M): the same micro-kernel over blocks of MB rows; a panel (K NP floats) stays in
// L2 while the block's row tiles pass over it.
//
// Register tiles (MR rows x NPAN panels, 2 MR NPAN accumulators of VW lanes): for decode 1 x 4,
// 2 x 2, 3 x 1, 4 x 1 -- at most 8 accumulators, so that with the two weight vectors, the
// broadcast and bfloat16 widening's temporaries nothing spills from AVX2's 16 registers, and 8
// independent FMA chains (6 for three rows) cover the FMA latency (4 cycles, 2 FMAs a cycle);
// for prefill 6 x 1 (12 accumulators, fewer weight loads per FMA), then 4 x 1 and the rest.
//
// Threads (pool.h) take chunks of panels (x one block of rows when M is large) on demand.
#include <cstring>

#include "pool.h"
#include "vec.h"

namespace {

constexpr int NP = 2 * VW;          // columns per panel
constexpr int MB = 48;              // activation rows per block when M is large
constexpr int PF = 64;              // weight rows (cache lines) prefetched ahead, per panel
constexpr int DECODE_ROWS = 16;     // up to this many rows: one block, chunks of panels only

// Rows x[0..MR) (row stride ldx) against NPAN panels starting at P (panel stride ps), all of K.
// `cols` = output columns that exist from this tile's first column (the last panel may be short).
// `pf`: what to prefetch while reading weight row k, as an offset from it (elements): PF rows ahead
// in the same panel, or, for a second pass over a panel already in cache, the next panel.
template <int MR, int NPAN, typename WT>
inline void micro(const float* x, long ldx, int K, const WT* P, long ps, float* y, long ldy,
                  int cols, int accumulate, int rnd, long pf = (long)PF * NP) {
    vf acc[MR][NPAN][2];
    for (int i = 0; i < MR; ++i)
        for (int p = 0; p < NPAN; ++p) acc[i][p][0] = acc[i][p][1] = vf{};
    for (int k = 0; k < K; ++k) {
        vf w[NPAN][2];
        for (int p = 0; p < NPAN; ++p) {
            __builtin_prefetch(P + p * ps + (long)k * NP + pf, 0, 3);
            load_pair(P + p * ps + (long)k * NP, w[p][0], w[p][1]);
#if defined(__AVX__)
            // keep the weights in registers: left to itself GCC folds each load into every FMA
            // that uses it (MR loads per vector per k), and the load ports, not the FMAs, bind
            asm("" : "+x"(w[p][0]), "+x"(w[p][1]));
#endif
        }
        for (int i = 0; i < MR; ++i) {
            const vf xb = bcast(x[i * ldx + k]);
            for (int p = 0; p < NPAN; ++p) {
                acc[i][p][0] += xb * w[p][0];
                acc[i][p][1] += xb * w[p][1];
            }
        }
    }
    for (int i = 0; i < MR; ++i) {
        float* yr = y + i * ldy;
        for (int p = 0; p < NPAN; ++p) {
            const int base = p * NP;
            if (!rnd && base + NP <= cols) {                 // a whole panel: vector stores
                for (int h = 0; h < 2; ++h) {
                    vf v = acc[i][p][h];
                    if (accumulate) v += load(yr + base + h * VW);
                    std::memcpy(yr + base + h * VW, &v, sizeof v);
                }
                continue;
            }
            for (int j = 0; j < NP && base + j < cols; ++j) {
                float s = acc[i][p][j / VW][j % VW];
                if (rnd) s = round_bf16(s);
                float v = accumulate ? yr[base + j] + s : s;
                yr[base + j] = rnd ? round_bf16(v) : v;
            }
        }
    }
}

template <int MR, typename WT>
inline void tile_rows(const float* x, long ldx, int K, const WT* P, int p0, int p1, float* y,
                      int N, int accumulate, int rnd) {
    constexpr int G = MR == 1 ? 4 : MR == 2 ? 2 : 1;      // panels per register tile
    const long ps = (long)K * NP;
    int p = p0;
    for (; p + G <= p1; p += G)
        micro<MR, G>(x, ldx, K, P + p * ps, ps, y + (long)p * NP, N, N - p * NP, accumulate, rnd);
    for (; p < p1; ++p)
        micro<MR, 1>(x, ldx, K, P + p * ps, ps, y + (long)p * NP, N, N - p * NP, accumulate, rnd);
}

// Rows m0..m1 against panels p0..p1: row tiles of up to 4, each over the panels.
template <typename WT>
inline void rows_panels(const float* x, int m0, int m1, int K, const WT* P, int p0, int p1,
                        float* y, int N, int accumulate, int rnd) {
    int m = m0;
    if (m1 - m0 > DECODE_ROWS)
        for (; m + 6 <= m1; m += 6)
            tile_rows<6>(x + (long)m * K, K, K, P, p0, p1, y + (long)m * N, N, accumulate, rnd);
    for (; m + 4 <= m1; m += 4)
        tile_rows<4>(x + (long)m * K, K, K, P, p0, p1, y + (long)m * N, N, accumulate, rnd);
    const float* xm = x + (long)m * K;
    float* ym = y + (long)m * N;
    switch (m1 - m) {
        case 3: tile_rows<3>(xm, K, K, P, p0, p1, ym, N, accumulate, rnd); break;
        case 2: tile_rows<2>(xm, K, K, P, p0, p1, ym, N, accumulate, rnd); break;
        case 1: tile_rows<1>(xm, K, K, P, p0, p1, ym, N, accumulate, rnd); break;
        default: break;
    }
}

// Decode rows 0..M (more than one row tile) against panels p0..p1, panel by panel: the first
// tile streams the panel from memory, the others find it in cache and meanwhile prefetch the
// next panel, so the weights keep streaming while the later tiles compute.
template <int MR, typename WT>
inline void tile_panel(const float* x, int m, int K, const WT* P, int p, float* y, int N,
                       int accumulate, int rnd) {
    const long ps = (long)K * NP;
    micro<MR, 1>(x + (long)m * K, K, K, P + p * ps, ps, y + (long)m * N + (long)p * NP, N,
                 N - p * NP, accumulate, rnd, m == 0 ? (long)PF * NP : ps);
}

template <typename WT>
inline void decode_panels(const float* x, int M, int K, const WT* P, int p0, int p1, float* y,
                          int N, int accumulate, int rnd) {
    for (int p = p0; p < p1; ++p) {
        int m = 0;
        for (; m + 4 <= M; m += 4) tile_panel<4>(x, m, K, P, p, y, N, accumulate, rnd);
        switch (M - m) {
            case 3: tile_panel<3>(x, m, K, P, p, y, N, accumulate, rnd); break;
            case 2: tile_panel<2>(x, m, K, P, p, y, N, accumulate, rnd); break;
            case 1: tile_panel<1>(x, m, K, P, p, y, N, accumulate, rnd); break;
            default: break;
        }
    }
}

template <typename WT>
void matmul(const float* x, int M, int K, const WT* P, int N, float* y, int accumulate, int rnd) {
    const int panels = (N + NP - 1) / NP;
    if (M <= DECODE_ROWS) {
        // one block of rows; chunks of 4 panels, or 2 or 1 where that leaves each thread fewer
        // than 8 chunks (the last chunk claimed decides when the step may go on)
        const int T = llamanb_cpu::pool_threads();
        const int per = panels >= 32 * T ? 4 : panels >= 16 * T ? 2 : 1;
        // The pool hands chunks out from the last index down, so the first `small` panels --
        // the chunks claimed last -- go one at a time: the threads finish together.
        const int small = per > 1 && panels > 2 * T ? 2 * T : 0;
        const int64_t chunks = small + (panels - small + per - 1) / per;
        llamanb_cpu::parallel_for(chunks, [&](int64_t c) {
            const int p0 = c < small ? int(c) : small + int(c - small) * per;
            const int p1 = c < small ? p0 + 1 : p0 + per < panels ? p0 + per : panels;
            // the first PF rows of each panel: the kernel's own prefetch starts PF rows in
            for (int p = p0; p < p1; ++p)
                for (int k = 0; k < PF && k < K; ++k)
                    __builtin_prefetch(P + (long)p * K * NP + (long)k * NP, 0, 2);
            if (M <= 4) rows_panels(x, 0, M, K, P, p0, p1, y, N, accumulate, rnd);
            else decode_panels(x, M, K, P, p0, p1, y, N, accumulate, rnd);
        });
        return;
    }
    constexpr int PER = 4;
    const int64_t groups = (panels + PER - 1) / PER, blocks = (M + MB - 1) / MB;
    llamanb_cpu::parallel_for(groups * blocks, [&](int64_t c) {
        const int m0 = int(c / groups) * MB, m1 = m0 + MB < M ? m0 + MB : M;
        const int p0 = int(c % groups) * PER, p1 = p0 + PER < panels ? p0 + PER : panels;
        for (int p = p0; p < p1; ++p) rows_panels(x, m0, m1, K, P, p, p + 1, y, N, accumulate, rnd);
    });
}

inline uint16_t bf16_bits(float f) {
    const float r = round_bf16(f);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    return uint16_t(u >> 16);
}

// slot(j): where column j of a panel row is stored (identity for float32; bf16_slot for bfloat16)
template <typename WT, typename Conv, typename Slot>
void pack(const float* W, int N, int K, WT* out, Conv conv, Slot slot) {
    const int panels = (N + NP - 1) / NP;
    llamanb_cpu::parallel_for(panels, [&](int64_t p) {
        WT* o = out + p * (long)K * NP;
        for (int j = 0; j < NP; ++j) {
            const long n = p * NP + j;
            const float* row = n < N ? W + n * K : nullptr;
            const int at = slot(j);
            for (int k = 0; k < K; ++k) o[(long)k * NP + at] = row ? conv(row[k]) : WT(0);
        }
    });
}

}  // namespace

extern "C" {

int llamanb_cpu_panel_width() { return NP; }

// 1 when bfloat16 panels store their columns in load_pair's unpack order (vec.h), 0 in order.
int llamanb_cpu_bf16_unpack_order() { return BF16_UNPACK ? 1 : 0; }

// W [N, K] float32 -> panels [ceil(N/NP), K, NP]: float32, or bfloat16 bits (rounded to nearest
// even) with each panel row's columns in load_pair's order (vec.h)
void llamanb_cpu_pack_f32(const float* W, int N, int K, float* out) {
    pack(W, N, K, out, [](float v) { return v; }, [](int j) { return j; });
}

void llamanb_cpu_pack_bf16(const float* W, int N, int K, uint16_t* out) {
    pack(W, N, K, out, bf16_bits, bf16_slot);
}

void llamanb_cpu_matmul_f32(const float* x, int M, int K, const float* P, int N, float* y,
                            int accumulate, int rnd) {
    matmul(x, M, K, P, N, y, accumulate, rnd);
}

void llamanb_cpu_matmul_bf16(const float* x, int M, int K, const uint16_t* P, int N, float* y,
                             int accumulate, int rnd) {
    matmul(x, M, K, P, N, y, accumulate, rnd);
}

int llamanb_cpu_vector_width() { return VW; }

// Which instruction-set macros the compiler defined for this build, bit i for
// llamanb.backends.cpu_kernels.ISA_MACROS[i]: what the kernels were compiled to use.
int llamanb_cpu_isa() {
    int bits = 0;
#if defined(__SSE2__)
    bits |= 1 << 0;
#endif
#if defined(__AVX__)
    bits |= 1 << 1;
#endif
#if defined(__AVX2__)
    bits |= 1 << 2;
#endif
#if defined(__FMA__)
    bits |= 1 << 3;
#endif
#if defined(__F16C__)
    bits |= 1 << 4;
#endif
#if defined(__AVX512F__)
    bits |= 1 << 5;
#endif
#if defined(__AVX512BW__)
    bits |= 1 << 6;
#endif
#if defined(__AVX512BF16__)
    bits |= 1 << 7;
#endif
    return bits;
}

}
