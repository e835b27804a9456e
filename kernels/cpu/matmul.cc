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
// Register tiles (MR rows x NPAN panels, 2 MR NPAN accumulators of VW lanes): for decode 1 x 4
// (1 x 2 on a chunk of two panels), 2 x 2, 3 x 1, 4 x 1 -- at most 8 accumulators, so that with the two weight vectors, the
// broadcast and bfloat16 widening's temporaries nothing spills from AVX2's 16 registers, and 8
// independent FMA chains (6 for three rows) cover the FMA latency (4 cycles, 2 FMAs a cycle);
// for prefill 6 x 1 (12 accumulators, fewer weight loads per FMA), then 4 x 1 and the rest.
//
// Threads (pool.h) take chunks of panels (x one block of rows when M is large) on demand; in a
// decode product each first works through its own run of panels (decode_chunks).
//
// Quantised panels (quant.h: Q4_1, Q4_0, Q5_0, Q4_K, Q6_K, Q8_0) go through the same tiles: a block of 32 k at a time,
// each row of weights decoded in registers (the block's scales loaded once per block) and then
// multiplied exactly as a float32 row would be.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "matmul.h"
#include "pool.h"
#include "quant.h"
#include "vec.h"

namespace {

constexpr int NP = 2 * VW;          // columns per panel
constexpr int MB = 48;              // activation rows per block when M is large
constexpr int PF = 64;              // weight rows (cache lines) prefetched ahead, per panel
constexpr int DECODE_ROWS = 16;     // up to this many rows: one block, chunks of panels only
constexpr int PFB = 4;              // quantised blocks prefetched ahead, per panel (8-32: slower, measured)

// The order of each output's FMA chain over k: float32 panels k = 0, 1, 2, ...; bfloat16 panels
// in pairs, k+1 then k (a last odd k alone) -- vdpbf16ps's order (vec.h), so a build that
// multiplies bfloat16 pairs with that instruction gives the bits of one that widens them. For
// that, bfloat16 panels store their rows swapped in pairs: row r holds k = swap_k(r, K) (pack);
// the kernels walk r = 0, 1, 2, ... against x[swap_k(r, K)], and vdpbf16ps takes each pair of
// rows back in order (micro_dot).
template <typename WT>
constexpr bool SWAPPED = std::is_same<WT, uint16_t>::value;

inline int swap_k(int r, int K) { return r < (K & ~1) ? r ^ 1 : r; }

// Activation rows as bfloat16 pairs (x[k] low, x[k+1] high in each uint32_t): row length K / 2.
template <typename XT>
constexpr long row_len(int K) { return std::is_same<XT, uint32_t>::value ? K / 2 : K; }

// One panel's size in WT units (bytes for quantised panels), and how far ahead the first row tile
// prefetches within a panel.
template <typename WT>
constexpr long panel_stride(int K) {
    if constexpr (Quant<WT>::is) return (long)(K / 32) * Quant<WT>::block;
    else return (long)K * NP;
}
template <typename WT>
constexpr long ahead() {
    if constexpr (Quant<WT>::is) return PFB * Quant<WT>::block;
    else return (long)PF * NP;
}

// Write a tile of accumulators to y (or add it; rnd: each rounded to bfloat16, and the sum
// again): whole panels with vector stores, the short last panel element by element.
template <int MR, int NPAN>
inline void store_tile(vf (&acc)[MR][NPAN][2], float* y, long ldy, int cols, int accumulate,
                       int rnd) {
    for (int i = 0; i < MR; ++i) {
        float* yr = y + i * ldy;
        for (int p = 0; p < NPAN; ++p) {
            const int base = p * NP;
            if (base + NP <= cols) {                         // a whole panel: vector stores
                for (int h = 0; h < 2; ++h) {
                    vf v = acc[i][p][h];
                    if (rnd) v = round_bf16_v(v);
                    if (accumulate) v += load(yr + base + h * VW);
                    if (rnd && accumulate) v = round_bf16_v(v);    // (rounding twice: once)
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

// The quantised micro-kernel: as `micro`, a block of 32 k at a time; P, ps and pf in bytes.
template <int MR, int NPAN, typename WT>
inline void micro_quant(const float* x, long ldx, int K, const WT* P, long ps, float* y,
                        long ldy, int cols, int accumulate, int rnd, long pf) {
    using Q = Quant<WT>;
    vf acc[MR][NPAN][2];
    for (int i = 0; i < MR; ++i)
        for (int p = 0; p < NPAN; ++p) acc[i][p][0] = acc[i][p][1] = vf{};
    const uint8_t* base = reinterpret_cast<const uint8_t*>(P);
    for (int b = 0; b < K / 32; ++b) {
        vf s[NPAN][Q::n_scales];
        const uint8_t* blk[NPAN];
        for (int p = 0; p < NPAN; ++p) {
            blk[p] = base + p * ps + b * Q::block;
            for (long c = 0; c < Q::block; c += 64) __builtin_prefetch(blk[p] + pf + c, 0, 3);
            Q::scales(blk[p], s[p]);
        }
        for (int kk = 0; kk < 32; ++kk) {
            const int k = b * 32 + kk;
            vf w[NPAN][2];
            for (int p = 0; p < NPAN; ++p) Q::row(blk[p], kk, s[p], w[p][0], w[p][1]);
            for (int i = 0; i < MR; ++i) {
                const vf xb = bcast(x[i * ldx + k]);
                for (int p = 0; p < NPAN; ++p) {
                    acc[i][p][0] += xb * w[p][0];
                    acc[i][p][1] += xb * w[p][1];
                }
            }
        }
    }
    store_tile<MR, NPAN>(acc, y, ldy, cols, accumulate, rnd);
}

// The activations as a tile reads them, xs(i, k) = x[i, k] for panel row k: plain rows, or
// (SWAPPED bfloat16 panels, below the last even k) x[i, k ^ 1] through each row's own pointer,
// set once per tile (a 64-bit k: no sign extension per step).
struct PlainRows {
    const float* x;
    long ldx;
    float operator()(int i, int k) const { return x[i * ldx + k]; }
};
template <int MR>
struct SwappedRows {
    const float* r[MR];
    SwappedRows(const float* x, long ldx) {
        for (int i = 0; i < MR; ++i) r[i] = x + i * ldx;
    }
    float operator()(int i, long k) const { return r[i][k ^ 1]; }
};

// One k of micro_float: weight row k of NPAN panels against rows 0..MR-1 of xs.
template <int MR, int NPAN, typename WT, typename X, typename KT>
__attribute__((always_inline)) inline void fma_k(vf (&acc)[MR][NPAN][2], const X& xs,
                                                 const WT* P, long ps, KT k, long pf) {
    vf w[NPAN][2];
    for (int p = 0; p < NPAN; ++p) {
        // One row (a decode GEMV) streams NPAN panels at one FMA pair per line: the
        // hardware's stream prefetcher keeps up, and a prefetch per line only took issue
        // slots (removing it: ~10 % faster float32 decode, measured). Several rows reuse
        // each line, and there the prefetch costs nothing measurable.
        if constexpr (MR > 1) __builtin_prefetch(P + p * ps + (long)k * NP + pf, 0, 3);
        load_pair(P + p * ps + (long)k * NP, w[p][0], w[p][1]);
#if defined(__AVX__) && !defined(LLAMANB_AVX512_SIMDE)    // (no 512-bit registers there)
        // keep the weights in registers: left to itself GCC folds each load into every FMA
        // that uses it (MR loads per vector per k), and the load ports, not the FMAs, bind
        asm("" : "+x"(w[p][0]), "+x"(w[p][1]));
#endif
    }
    for (int i = 0; i < MR; ++i) {
        const vf xb = bcast(xs(i, k));
        for (int p = 0; p < NPAN; ++p) {
            acc[i][p][0] += xb * w[p][0];
            acc[i][p][1] += xb * w[p][1];
        }
    }
}

// Rows x[0..MR) (row stride ldx) against NPAN panels starting at P (panel stride ps), all of K.
// `cols` = output columns that exist from this tile's first column (the last panel may be short).
// `pf`: what to prefetch while reading weight row k, as an offset from it (elements): PF rows ahead
// in the same panel, or, for a second pass over a panel already in cache, the next panel.
template <int MR, int NPAN, typename WT>
inline void micro_float(const float* x, long ldx, int K, const WT* P, long ps, float* y,
                        long ldy, int cols, int accumulate, int rnd, long pf) {
    vf acc[MR][NPAN][2];
    for (int i = 0; i < MR; ++i)
        for (int p = 0; p < NPAN; ++p) acc[i][p][0] = acc[i][p][1] = vf{};
    int k = 0;
    if constexpr (SWAPPED<WT>) {
        const SwappedRows<MR> sw(x, ldx);
        for (long r = 0; r < (K & ~1); ++r) fma_k<MR, NPAN>(acc, sw, P, ps, r, pf);
        k = K & ~1;
    }
    const PlainRows plain{x, ldx};
    for (; k < K; ++k) fma_k<MR, NPAN>(acc, plain, P, ps, k, pf);
    store_tile<MR, NPAN>(acc, y, ldy, cols, accumulate, rnd);
}

#if defined(LLAMANB_AVX512BF16)
// bfloat16 panels against activation rows given as bfloat16 pairs xp (row stride ldp pairs), K
// even: per pair of k, rows k and k+1 of each panel become two vectors of pairs and every row's
// pair is multiplied against them by vdpbf16ps -- half the instructions of widening, in the same
// order (SWAPPED), so micro_float's bits.
template <int MR, int NPAN>
inline void micro_dot(const uint32_t* xp, long ldp, int K, const uint16_t* P, long ps, float* y,
                      long ldy, int cols, int accumulate, int rnd, long pf) {
    vf acc[MR][NPAN][2];
    for (int i = 0; i < MR; ++i)
        for (int p = 0; p < NPAN; ++p) acc[i][p][0] = acc[i][p][1] = vf{};
    for (int k = 0; k < K; k += 2) {
        vu w[NPAN][2];
        for (int p = 0; p < NPAN; ++p) {
            const uint16_t* r = P + p * ps + (long)k * NP;
            if constexpr (MR > 1) {
                __builtin_prefetch(r + pf, 0, 3);
                __builtin_prefetch(r + NP + pf, 0, 3);
            }
            load_bf16_pairs(r + NP, r, w[p][0], w[p][1]);    // (SWAPPED: row k+1 holds k)
        }
        for (int i = 0; i < MR; ++i) {
            const vu xb = bcast_u32(xp[i * ldp + k / 2]);
            for (int p = 0; p < NPAN; ++p) {
                acc[i][p][0] = dot_bf16_pairs(acc[i][p][0], w[p][0], xb);
                acc[i][p][1] = dot_bf16_pairs(acc[i][p][1], w[p][1], xb);
            }
        }
    }
    store_tile<MR, NPAN>(acc, y, ldy, cols, accumulate, rnd);
}
#endif

// x: float32 rows, or (bfloat16 panels only) bfloat16 pairs for micro_dot.
template <int MR, int NPAN, typename WT, typename XT>
inline void micro(const XT* x, long ldx, int K, const WT* P, long ps, float* y, long ldy,
                  int cols, int accumulate, int rnd, long pf = ahead<WT>()) {
#if defined(LLAMANB_AVX512BF16)
    if constexpr (std::is_same<XT, uint32_t>::value)
        micro_dot<MR, NPAN>(x, ldx, K, P, ps, y, ldy, cols, accumulate, rnd, pf);
    else
#endif
    if constexpr (Quant<WT>::is)
        micro_quant<MR, NPAN>(x, ldx, K, P, ps, y, ldy, cols, accumulate, rnd, pf);
    else
        micro_float<MR, NPAN>(x, ldx, K, P, ps, y, ldy, cols, accumulate, rnd, pf);
}

template <int MR, typename WT, typename XT>
inline void tile_rows(const XT* x, long ldx, int K, const WT* P, int p0, int p1, float* y,
                      int N, int accumulate, int rnd) {
    // panels per register tile (quantised: 2 for one row, the scales take registers too)
    constexpr int G = MR == 1 ? (Quant<WT>::is ? 2 : 4) : MR == 2 ? 2 : 1;
    const long ps = panel_stride<WT>(K);
    int p = p0;
    for (; p + G <= p1; p += G)
        micro<MR, G>(x, ldx, K, P + p * ps, ps, y + (long)p * NP, N, N - p * NP, accumulate, rnd);
    if constexpr (G == 4)             // a chunk of 2 panels (small products): 4 FMA chains, not 2
        for (; p + 2 <= p1; p += 2)
            micro<MR, 2>(x, ldx, K, P + p * ps, ps, y + (long)p * NP, N, N - p * NP, accumulate, rnd);
    for (; p < p1; ++p)
        micro<MR, 1>(x, ldx, K, P + p * ps, ps, y + (long)p * NP, N, N - p * NP, accumulate, rnd);
}

// Rows m0..m1 against panels p0..p1: row tiles of up to 4, each over the panels.
template <typename WT, typename XT>
inline void rows_panels(const XT* x, int m0, int m1, int K, const WT* P, int p0, int p1,
                        float* y, int N, int accumulate, int rnd) {
    const long L = row_len<XT>(K);
    int m = m0;
    if (m1 - m0 > DECODE_ROWS)
        for (; m + 6 <= m1; m += 6)
            tile_rows<6>(x + m * L, L, K, P, p0, p1, y + (long)m * N, N, accumulate, rnd);
    for (; m + 4 <= m1; m += 4)
        tile_rows<4>(x + m * L, L, K, P, p0, p1, y + (long)m * N, N, accumulate, rnd);
    const XT* xm = x + m * L;
    float* ym = y + (long)m * N;
    switch (m1 - m) {
        case 3: tile_rows<3>(xm, L, K, P, p0, p1, ym, N, accumulate, rnd); break;
        case 2: tile_rows<2>(xm, L, K, P, p0, p1, ym, N, accumulate, rnd); break;
        case 1: tile_rows<1>(xm, L, K, P, p0, p1, ym, N, accumulate, rnd); break;
        default: break;
    }
}

// Rows x[0..MR) against one float32 / bfloat16 panel for k = k0..k1, continuing the sums in
// acc (kept in memory between calls): the same FMA chain per output as micro_float's, cut into
// pieces -- a float stored and loaded back is the same float, so the bits are micro_float's.
template <int MR, typename WT, typename X, typename KT>
__attribute__((always_inline)) inline void part_k(vf (&a)[MR][2], const X& xs, const WT* P, KT k,
                                                  long pf) {
    vf w0, w1;
    for (int b = 0; b < NP * (int)sizeof(WT); b += 64)     // every line of row k (AVX-512 float: 2)
        __builtin_prefetch(reinterpret_cast<const char*>(P + (long)k * NP + pf) + b, 0, 3);
    load_pair(P + (long)k * NP, w0, w1);
#if defined(__AVX__) && !defined(LLAMANB_AVX512_SIMDE)
    asm("" : "+x"(w0), "+x"(w1));
#endif
    for (int i = 0; i < MR; ++i) {
        const vf xb = bcast(xs(i, k));
        a[i][0] += xb * w0;
        a[i][1] += xb * w1;
    }
}

template <int MR, typename WT>
inline void micro_part(const float* x, long ldx, int k0, int k1, int K, const WT* P, vf (*acc)[2],
                       long pf) {
    vf a[MR][2];
    for (int i = 0; i < MR; ++i) a[i][0] = acc[i][0], a[i][1] = acc[i][1];
    int k = k0;                                        // k0 is even (KC is)
    if constexpr (SWAPPED<WT>) {
        const SwappedRows<MR> sw(x, ldx);
        const int end = k1 < (K & ~1) ? k1 : (K & ~1);
        for (long r = k; r < end; ++r) part_k<MR>(a, sw, P, r, pf);
        k = end > k ? end : k;
    }
    const PlainRows plain{x, ldx};
    for (; k < k1; ++k) part_k<MR>(a, plain, P, k, pf);
    for (int i = 0; i < MR; ++i) acc[i][0] = a[i][0], acc[i][1] = a[i][1];
}

#if defined(LLAMANB_AVX512BF16)
// micro_part through vdpbf16ps (as micro_dot): k0 and k1 even, xp bfloat16 pairs.
template <int MR>
inline void micro_part(const uint32_t* xp, long ldp, int k0, int k1, int, const uint16_t* P,
                       vf (*acc)[2], long pf) {
    vf a[MR][2];
    for (int i = 0; i < MR; ++i) a[i][0] = acc[i][0], a[i][1] = acc[i][1];
    for (int k = k0; k < k1; k += 2) {
        vu w0, w1;
        const uint16_t* r = P + (long)k * NP;
        __builtin_prefetch(r + pf, 0, 3);
        __builtin_prefetch(r + NP + pf, 0, 3);
        load_bf16_pairs(r + NP, r, w0, w1);            // (SWAPPED: row k+1 holds k)
        for (int i = 0; i < MR; ++i) {
            const vu xb = bcast_u32(xp[i * ldp + k / 2]);
            a[i][0] = dot_bf16_pairs(a[i][0], w0, xb);
            a[i][1] = dot_bf16_pairs(a[i][1], w1, xb);
        }
    }
    for (int i = 0; i < MR; ++i) acc[i][0] = a[i][0], acc[i][1] = a[i][1];
}
#endif

template <int MR>
inline void store_rows(vf (*acc)[2], float* y, long ldy, int cols, int accumulate, int rnd) {
    vf t[MR][1][2];
    for (int i = 0; i < MR; ++i) t[i][0][0] = acc[i][0], t[i][0][1] = acc[i][1];
    store_tile<MR, 1>(t, y, ldy, cols, accumulate, rnd);
}

// Decode rows 0..M (more than one row tile) against panels p0..p1, panel by panel, and within a
// panel KC k at a time: the first row tile streams that stretch of the panel from memory (and
// prefetches the next), the others find it in L1 -- so the weights keep streaming while the later
// tiles compute, and the panel is read from memory once.
constexpr int KC = 64;

template <int MR, typename WT, typename XT>
inline void part_rows(const XT* x, int m, int K, int k0, int k1, const WT* P, vf (*acc)[2]) {
    const long L = row_len<XT>(K);
    micro_part<MR>(x + m * L, L, k0, k1, K, P, acc + m,
                   m == 0 ? ahead<WT>() : ahead<WT>() + (long)KC * NP);
}

template <typename WT, typename XT>
inline void decode_panels(const XT* x, int M, int K, const WT* P, int p0, int p1, float* y,
                          int N, int accumulate, int rnd) {
    if constexpr (Quant<WT>::is) {                       // quantised panels, float activations
        const long ps = panel_stride<WT>(K);
        for (int p = p0; p < p1; ++p) {
            int m = 0;
            auto tile = [&](auto mr) {
                constexpr int MR = decltype(mr)::value;
                micro<MR, 1>(x + (long)m * K, K, K, P + p * ps, ps, y + (long)m * N + (long)p * NP,
                             N, N - p * NP, accumulate, rnd, m == 0 ? ahead<WT>() : ps);
            };
            for (; m + 4 <= M; m += 4) tile(std::integral_constant<int, 4>{});
            switch (M - m) {
                case 3: tile(std::integral_constant<int, 3>{}); break;
                case 2: tile(std::integral_constant<int, 2>{}); break;
                case 1: tile(std::integral_constant<int, 1>{}); break;
                default: break;
            }
        }
    } else {
        const long ps = panel_stride<WT>(K);
        vf acc[DECODE_ROWS][2];
        for (int p = p0; p < p1; ++p) {
            const WT* pp = P + p * ps;
            for (int i = 0; i < M; ++i) acc[i][0] = acc[i][1] = vf{};
            for (int k0 = 0; k0 < K; k0 += KC) {
                const int k1 = k0 + KC < K ? k0 + KC : K;
                int m = 0;
                for (; m + 4 <= M; m += 4) part_rows<4>(x, m, K, k0, k1, pp, acc);
                switch (M - m) {
                    case 3: part_rows<3>(x, m, K, k0, k1, pp, acc); break;
                    case 2: part_rows<2>(x, m, K, k0, k1, pp, acc); break;
                    case 1: part_rows<1>(x, m, K, k0, k1, pp, acc); break;
                    default: break;
                }
            }
            float* yp = y + (long)p * NP;
            int m = 0;
            for (; m + 4 <= M; m += 4) store_rows<4>(acc + m, yp + (long)m * N, N, N - p * NP, accumulate, rnd);
            for (; m < M; ++m) store_rows<1>(acc + m, yp + (long)m * N, N, N - p * NP, accumulate, rnd);
        }
    }
}

// How a decode product's panels (M <= DECODE_ROWS: one block of rows) are shared among the
// threads, for either kind of panel (`P` the first panel, `panel_bytes` one panel's size);
// fn(p0, p1) runs panels p0..p1-1 for every row.
//
// Each thread owns a region: R = min(threads, panels) runs of adjacent panels, of near-equal
// length. A region is cut into chunks of `per` panels (4, or 2 or 1 where that leaves each thread
// fewer than 8 chunks), its last two one panel each. The thread that takes region h claims its
// chunks from the front, so it reads one ascending stream of memory and every prefetch ahead of
// its current chunk lands in its next one; a thread whose own region is done claims what is left
// of the others from the back, a chunk at a time, so the threads finish together (the small
// chunks at each region's end are the last claimed). With the chunks handed to whichever thread
// came next (interleaving them), a thread's stream jumped every chunk: a decode token took 1.10x
// the time at Q4_1, 1.08x at bf16, 1.02x at float32 (2-core Zen 3, 15 alternated rounds).
// A chunk that starts a thread's stream (the first of its region, or one taken from another
// region) first prefetches the first `ahead_bytes` of each of its panels: the kernels' own
// prefetch starts that far in. A chunk that continues the stream skips that, since the reads
// ahead of the chunk before it have already run into it. Issuing that burst for every chunk
// made a Q4_1 decode token take 1.08x the time (2-core Zen 3; two runs of 61 alternated rounds,
// lower quartile 1.03x both times).
// Regions are taken through the pool (pool.h), so a thread that has not started leaves its
// region to the others, and no panel's result depends on who ran it.
struct DecodeRegion {
    std::atomic<uint64_t> lo_hi;            // chunks lo .. hi-1 unclaimed: lo << 32 | hi
    int base, body, n_body;                 // first panel, panels in `per` chunks, those chunks
};

template <typename F>
inline void decode_chunks(const void* P, long panel_bytes, long ahead_bytes, int panels, F&& fn) {
    if (panels <= 0) return;
    const int T = llamanb_cpu::pool_threads();
    const int per = panels >= 32 * T ? 4 : panels >= 16 * T ? 2 : 1;
    const int R = T < panels ? T : panels;
    static thread_local std::unique_ptr<DecodeRegion[]> regions;
    static thread_local int capacity = 0;
    if (capacity < R) regions.reset(new DecodeRegion[capacity = R]);
    DecodeRegion* reg = regions.get();
    for (int h = 0; h < R; ++h) {
        const int a = int((long)h * panels / R), b = int((long)(h + 1) * panels / R);
        const int tail = per == 1 ? 0 : b - a < 2 ? b - a : 2;
        reg[h].base = a;
        reg[h].body = b - a - tail;
        reg[h].n_body = (reg[h].body + per - 1) / per;
        reg[h].lo_hi.store(uint64_t(reg[h].n_body + tail), std::memory_order_relaxed);
    }
    // runs chunk i of region g; `next` is the panel after the thread's previous chunk (-1: none)
    auto run_chunk = [&](const DecodeRegion& g, int i, int next) {
        const bool in_body = i < g.n_body;          // a chunk of `per` panels, or a single one
        const int p0 = in_body ? g.base + i * per : g.base + g.body + (i - g.n_body);
        const int p1 = in_body ? std::min(p0 + per, g.base + g.body) : p0 + 1;
        if (p0 != next)
            for (int p = p0; p < p1; ++p) {
                const char* head = static_cast<const char*>(P) + p * panel_bytes;
                for (long b = 0; b < ahead_bytes && b < panel_bytes; b += 64)
                    __builtin_prefetch(head + b, 0, 2);
            }
        fn(p0, p1);
        return p1;
    };
    llamanb_cpu::parallel_for(R, [&](int64_t lane) {
        int next = -1;
        for (int k = 0; k < R; ++k) {                    // its own region, then the others'
            DecodeRegion& g = reg[(lane + k) % R];
            const bool own = k == 0;
            uint64_t v = g.lo_hi.load(std::memory_order_acquire);
            while (uint32_t(v >> 32) < uint32_t(v)) {
                const uint64_t w = own ? v + (uint64_t(1) << 32) : v - 1;
                if (!g.lo_hi.compare_exchange_weak(v, w, std::memory_order_acq_rel,
                                                   std::memory_order_acquire))
                    continue;                           // v now holds the current word
                next = run_chunk(g, own ? int(v >> 32) : int(uint32_t(v)) - 1, next);
                v = g.lo_hi.load(std::memory_order_acquire);
            }
        }
    });
}

// The bytes of panels P[0 .. panels) read the way a decode product reads them -- shared among the
// threads by decode_chunks, each thread streaming its own region -- with no arithmetic but a
// wrapping sum of their 32-bit words (so that no read can be skipped, and a test can check that
// every byte was read): a bare read of what a decode token's products read, which the bench times
// beside the decode (llamanb.bench.runners). `panel_bytes` is a multiple of 4.
inline uint32_t read_like_decode(const uint8_t* P, long panel_bytes, int panels) {
    std::atomic<uint32_t> sum{0};
    decode_chunks(P, panel_bytes, 256, panels, [&](int p0, int p1) {
        const uint8_t* a = P + (long)p0 * panel_bytes;
        const long n = (long)(p1 - p0) * panel_bytes;
        constexpr long V = sizeof(vu);
        vu s0 = {}, s1 = {}, s2 = {}, s3 = {};
        long j = 0;
        auto at = [a](long o) {
            vu v;
            std::memcpy(&v, a + o, V);
            return v;
        };
        for (; j + 4 * V <= n; j += 4 * V) {           // four independent sums: loads, not adds, bind
            s0 += at(j);
            s1 += at(j + V);
            s2 += at(j + 2 * V);
            s3 += at(j + 3 * V);
        }
        const vu t = s0 + s1 + s2 + s3;
        uint32_t part = 0;
        for (int l = 0; l < VW; ++l) part += t[l];
        for (; j + 4 <= n; j += 4) {
            uint32_t w;
            std::memcpy(&w, a + j, 4);
            part += w;
        }
        sum.fetch_add(part, std::memory_order_relaxed);
    });
    return sum.load();
}

// Prefill (large M): chunks of one block of MB rows x 4 panels; fn(m0, m1, p) runs rows m0..m1-1
// against panel p.
template <typename F>
inline void prefill_chunks(int M, int panels, F&& fn) {
    constexpr int PER = 4;
    const int64_t groups = (panels + PER - 1) / PER, blocks = (M + MB - 1) / MB;
    llamanb_cpu::parallel_for(groups * blocks, [&](int64_t c) {
        const int m0 = int(c / groups) * MB, m1 = m0 + MB < M ? m0 + MB : M;
        const int p0 = int(c % groups) * PER, p1 = p0 + PER < panels ? p0 + PER : panels;
        for (int p = p0; p < p1; ++p) fn(m0, m1, p);
    });
}

template <typename WT, typename XT>
void run_matmul(const XT* x, int M, int K, const WT* P, int N, float* y, int accumulate, int rnd) {
    const int panels = (N + NP - 1) / NP;
    if (M <= DECODE_ROWS) {
        // up to 4 rows (8 through vdpbf16ps: its pair steps measured 1.11-1.15x faster so, on a
        // Zen 4, where float32 measured the same) each tile runs all of K; more, decode_panels
        constexpr int WHOLE_K = std::is_same<XT, uint32_t>::value ? 8 : 4;
        decode_chunks(P, panel_stride<WT>(K) * (long)sizeof(WT), ahead<WT>() * (long)sizeof(WT),
                      panels, [&](int p0, int p1) {
                          if (M <= WHOLE_K) rows_panels(x, 0, M, K, P, p0, p1, y, N, accumulate, rnd);
                          else decode_panels(x, M, K, P, p0, p1, y, N, accumulate, rnd);
                      });
        return;
    }
    prefill_chunks(M, panels, [&](int m0, int m1, int p) {
        rows_panels(x, m0, m1, K, P, p, p + 1, y, N, accumulate, rnd);
    });
}

#if defined(LLAMANB_AVX512BF16)
// x [n] -> bfloat16 pairs (x[2j] in the low half of out[j], x[2j+1] in the high half), if every
// x is a bfloat16 value and none is subnormal (which vdpbf16ps would read as 0); else false.
inline bool bf16_pairs(const float* x, long n, uint32_t* out) {
    uint32_t bad = 0;
    for (long j = 0; j < n / 2; ++j) {
        uint32_t a, b;
        std::memcpy(&a, x + 2 * j, 4);
        std::memcpy(&b, x + 2 * j + 1, 4);
        for (uint32_t u : {a, b})
            bad |= (u & 0xffffu) | ((u & 0x7f800000u) == 0 && (u & 0x7fffffffu) ? 1u : 0u);
        out[j] = (a >> 16) | (b & 0xffff0000u);
    }
    return bad == 0;
}
#endif

// y = x @ W^T over packed panels. bfloat16 panels, where the CPU has vdpbf16ps (or its
// emulation), K is even and x holds bfloat16 values (the bf16 engine rounds every activation):
// by pairs through that instruction; otherwise widened. Both in SWAPPED's order: the same bits.
template <typename WT>
void matmul(const float* x, int M, int K, const WT* P, int N, float* y, int accumulate, int rnd) {
    if constexpr (SWAPPED<WT>) {
#if defined(LLAMANB_AVX512BF16)
        static thread_local std::vector<uint32_t> xp;
        if (K % 2 == 0) {
            xp.resize((size_t)M * K / 2);
            if (bf16_pairs(x, (long)M * K, xp.data())) {
                run_matmul(xp.data(), M, K, P, N, y, accumulate, rnd);
                return;
            }
        }
#endif
    }
    run_matmul(x, M, K, P, N, y, accumulate, rnd);
}

// ---- quantised panels x 8-bit activations (quant.h's IDot) -------------------------------------
//
// The activation rows are quantised once per product (quantize_q8: per row and block of 32, int8
// quants, a scale and the block's sum), then each output element is, over the blocks b,
//     y[i, n] = sum_b  d[n, b] da[i, b] isum[i, n, b]  +  m[n, b] sa[i, b]
// accumulated in one vector lane in block order (the integer isum is exact): as in the float
// path, a row's result depends on nothing but its own activations.

struct Q8Rows {
    const int8_t* q;                // [M, K]
    const float* d;                 // [M, K / 32]
    const float* s;                 // [M, K / 32]
};

// Each row's integer sums so far, times the block's scales (lo, hi columns) and the row's da.
template <int MR, typename D>
inline void fold_q8(const typename D::Acc (&a)[MR], const Q8Rows& x, int nb, int b, vf s_lo,
                    vf s_hi, vf (&acc)[MR][1][2]) {
    for (int i = 0; i < MR; ++i) {
        vi lo, hi;
        D::sums(a[i], lo, hi);
        const vf da = bcast(x.d[(long)i * nb + b]);
        acc[i][0][0] += __builtin_convertvector(lo, vf) * (s_lo * da);
        acc[i][0][1] += __builtin_convertvector(hi, vf) * (s_hi * da);
    }
}

template <int MR, typename WT>
inline void micro_q8(const Q8Rows& x, int K, const uint8_t* P, float* y, long ldy, int cols,
                     int accumulate, int rnd, long pf) {
    using Q = Quant<WT>;
    using D = IDot<WT>;
    const int nb = K / 32;
    vf acc[MR][1][2];
    for (int i = 0; i < MR; ++i) acc[i][0][0] = acc[i][0][1] = vf{};
    for (int b = 0; b < nb; ++b) {
        const uint8_t* blk = P + b * Q::block;
        for (long c = 0; c < Q::block; c += 64) __builtin_prefetch(blk + pf + c, 0, 3);
        typename D::Acc a[MR];
        for (int i = 0; i < MR; ++i) D::zero(a[i]);
        vf s[Q::n_scales];
        if constexpr (Q::halves) Q::scales(blk, s);
        for (int g = 0; g < 8; ++g) {
            const typename D::G q = D::decode(blk + Q::head, g);
            for (int i = 0; i < MR; ++i) D::step(a[i], q, x.q + (long)i * K + 32 * b + 4 * g);
            if constexpr (Q::halves)
                if (g == 3) {                      // k 0..15 done: their own scales (Q6_K's D0)
                    fold_q8<MR, D>(a, x, nb, b, s[0], s[1], acc);
                    for (int i = 0; i < MR; ++i) D::zero(a[i]);
                }
        }
        if constexpr (Q::halves) {
            fold_q8<MR, D>(a, x, nb, b, s[2], s[3], acc);
            continue;
        }
        Q::scales(blk, s);
        fold_q8<MR, D>(a, x, nb, b, s[0], s[1], acc);
        if constexpr (Q::n_scales == 4) {                     // Q4_1, Q4_0, Q5_0, Q4_K: + m sa
            for (int i = 0; i < MR; ++i) {
                const vf sa = bcast(x.s[(long)i * nb + b]);
                acc[i][0][0] += s[2] * sa;
                acc[i][0][1] += s[3] * sa;
            }
        }
    }
    store_tile<MR, 1>(acc, y, ldy, cols, accumulate, rnd);
}

// Rows m0..m1 against one panel p, in tiles of 4 rows.
template <typename WT>
inline void rows_panel_q8(const Q8Rows& x, int m0, int m1, int K, const uint8_t* P, int p,
                          float* y, int N, int accumulate, int rnd) {
    const long ps = panel_stride<WT>(K), nb = K / 32;
    const uint8_t* pp = P + p * ps;
    auto at = [&](int m) { return Q8Rows{x.q + (long)m * K, x.d + m * nb, x.s + m * nb}; };
    int m = m0;
    for (; m + 4 <= m1; m += 4)
        micro_q8<4, WT>(at(m), K, pp, y + (long)m * N + (long)p * NP, N, N - p * NP, accumulate,
                        rnd, m == m0 ? ahead<WT>() : ps);
    float* ym = y + (long)m * N + (long)p * NP;
    const long pf = m == m0 ? ahead<WT>() : ps;
    switch (m1 - m) {
        case 3: micro_q8<3, WT>(at(m), K, pp, ym, N, N - p * NP, accumulate, rnd, pf); break;
        case 2: micro_q8<2, WT>(at(m), K, pp, ym, N, N - p * NP, accumulate, rnd, pf); break;
        case 1: micro_q8<1, WT>(at(m), K, pp, ym, N, N - p * NP, accumulate, rnd, pf); break;
        default: break;
    }
}

template <typename WT>
void matmul_q8(const float* x, int M, int K, const uint8_t* P, int N, float* y, int accumulate,
               int rnd) {
    static thread_local std::vector<int8_t> q;
    static thread_local std::vector<float> ds;
    const long nb = K / 32;
    q.resize((size_t)M * K);
    ds.resize((size_t)2 * M * nb);
    for (int i = 0; i < M; ++i)
        quantize_q8(x + (long)i * K, K, q.data() + (long)i * K, ds.data() + i * nb,
                    ds.data() + (M + i) * nb);
    const Q8Rows xr{q.data(), ds.data(), ds.data() + M * nb};
    const int panels = (N + NP - 1) / NP;
    const long ps = panel_stride<WT>(K);
    if (M <= DECODE_ROWS) {                     // as matmul: chunks of panels, all rows each
        decode_chunks(P, ps, ahead<WT>(), panels, [&](int p0, int p1) {
            for (int p = p0; p < p1; ++p) rows_panel_q8<WT>(xr, 0, M, K, P, p, y, N, accumulate, rnd);
        });
        return;
    }
    prefill_chunks(M, panels, [&](int m0, int m1, int p) {
        rows_panel_q8<WT>(xr, m0, m1, K, P, p, y, N, accumulate, rnd);
    });
}

// f rounded to bfloat16 (nearest even); a subnormal result becomes a zero of its sign, as
// vdpbf16ps would read it (vec.h): every build multiplies the same weights.
inline uint16_t bf16_bits(float f) {
    const float r = round_bf16(f);
    uint32_t u;
    std::memcpy(&u, &r, 4);
    if ((u & 0x7f800000u) == 0) u &= 0x80000000u;
    return uint16_t(u >> 16);
}

// slot(j): where column j of a panel row is stored (identity for float32; bf16_slot for bfloat16)
template <typename WT, typename Conv, typename Slot>
void pack(const float* W, int N, int K, WT* out, Conv conv, Slot slot) {
    auto row = [K](int k) { return SWAPPED<WT> ? swap_k(k, K) : k; };
    const int panels = (N + NP - 1) / NP;
    llamanb_cpu::parallel_for(panels, [&](int64_t p) {
        WT* o = out + p * (long)K * NP;
        for (int j = 0; j < NP; ++j) {
            const long n = p * NP + j;
            const float* src = n < N ? W + n * K : nullptr;
            const int at = slot(j);
            for (int k = 0; k < K; ++k) o[(long)row(k) * NP + at] = src ? conv(src[k]) : WT(0);
        }
    });
}

}  // namespace

#if defined(LLAMANB_MATMUL_Q8_UNIT)
// matmul_q8.cc: this file compiled a second time for the 8-bit-activation entry points alone
extern "C" {
#define LLAMANB_Q8_MATMUL(fmt)                                                                    \
    void llamanb_cpu_matmul_##fmt##_q8(const float* x, int M, int K, const uint8_t* P, int N,    \
                                       float* y, int accumulate, int rnd) {                      \
        matmul_q8<fmt##_t>(x, M, K, P, N, y, accumulate, rnd);                                   \
    }
LLAMANB_QUANT_FORMATS(LLAMANB_Q8_MATMUL)
#undef LLAMANB_Q8_MATMUL
}
#else
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

// Quantised panels (quant.h), two entry points per format (matmul.h's LLAMANB_QUANT_FORMATS):
// llamanb_cpu_matmul_<fmt> decodes each weight to float32 (the float32 engine's bits),
// llamanb_cpu_matmul_<fmt>_q8 quantises each activation row to 8 bits per block of 32 and takes
// integer dot products (quant.h's IDot): the float path's results to within the activations'
// rounding. The _q8 ones are compiled in matmul_q8.cc (above), in parallel with this file.
#define LLAMANB_QUANT_MATMULS(fmt)                                                                \
    void llamanb_cpu_matmul_##fmt(const float* x, int M, int K, const uint8_t* P, int N,         \
                                  float* y, int accumulate, int rnd) {                           \
        matmul(x, M, K, reinterpret_cast<const fmt##_t*>(P), N, y, accumulate, rnd);             \
    }
LLAMANB_QUANT_FORMATS(LLAMANB_QUANT_MATMULS)
#undef LLAMANB_QUANT_MATMULS

// `count` packed matrices, one after another, each read as a decode product reads it
// (read_like_decode; P[i] its panels, panel_bytes[i] one panel's size): the wrapping sum of every
// 32-bit word, over all of them.
uint32_t llamanb_cpu_read_panels(const void* const* P, const long* panel_bytes, const int* panels,
                                 int count) {
    uint32_t s = 0;
    for (int i = 0; i < count; ++i)
        s += read_like_decode(static_cast<const uint8_t*>(P[i]), panel_bytes[i], panels[i]);
    return s;
}

// Rows x [M, K] -> their 8-bit blocks as the q8 products make them: q int8 [M, K], d and s
// float32 [M, K / 32] (quant.h's quantize_q8), for the tests and chapter 11.
void llamanb_cpu_quantize_q8(const float* x, int M, int K, int8_t* q, float* d, float* s) {
    for (int i = 0; i < M; ++i)
        quantize_q8(x + (long)i * K, K, q + (long)i * K, d + (long)i * (K / 32),
                    s + (long)i * (K / 32));
}

// 1 when the q8 products use byte dot products (vpmaddubsw or vpdpbusd: AVX2, AVX-512BW), 0 when
// they multiply in 32-bit lanes.
int llamanb_cpu_int_dot_bytes() { return INT_DOT_BYTES ? 1 : 0; }

// The width of the vpdpbusd the q8 products use (512, 256; emulated in the *-simde flavours), 0
// where they use vpmaddubsw or 32-bit lanes (quant.h's dot4).
int llamanb_cpu_dpbusd_bits() { return DPBUSD_BITS; }

// out[j] = sum_t u[4j + t] s[4j + t], t < 4, j < n / 4 (n a multiple of 64), through the step the
// q8 products are made of (quant.h's dot4: vpdpbusd, or vpmaddubsw + vpmaddwd with its
// saturation), or in 32-bit lanes where the build has no byte dot products: for the tests.
void llamanb_cpu_dot4(const uint8_t* u, const int8_t* s, int n, int32_t* out) {
#if LLAMANB_BYTE_DOTS
    constexpr int B = VW * 4;                             // bytes per vector
    for (int i = 0; i + B <= n; i += B) {
        const iv r = dot4(izero(), iload(u + i), iload(reinterpret_cast<const uint8_t*>(s) + i));
        std::memcpy(out + i / 4, &r, B);
    }
#else
    for (int j = 0; j < n / 4; ++j) {
        int32_t a = 0;
        for (int t = 0; t < 4; ++t) a += int32_t(u[4 * j + t]) * int32_t(s[4 * j + t]);
        out[j] = a;
    }
#endif
}

// Quantised panels [ceil(N/NP), K/32, block] -> W [N, K] float32, through the decode the matmul
// uses (quant.h): what each weight is, for the tests against the gguf package. fmt: 2 Q4_1, 3 Q8_0,
// 6 Q4_0, 8 Q4_K, 10 Q6_K.
void llamanb_cpu_unpack_quant(int fmt, const uint8_t* P, int N, int K, float* W) {
    auto run = [&](auto tag) {
        using Q = Quant<decltype(tag)>;
        const long ps = (long)(K / 32) * Q::block;
        for (int p = 0; p * NP < N; ++p)
            for (int b = 0; b < K / 32; ++b) {
                const uint8_t* blk = P + p * ps + b * Q::block;
                vf s[Q::n_scales];
                Q::scales(blk, s);
                for (int kk = 0; kk < 32; ++kk) {
                    vf w[2];
                    Q::row(blk, kk, s, w[0], w[1]);
                    for (int j = 0; j < NP && p * NP + j < N; ++j)
                        W[(long)(p * NP + j) * K + b * 32 + kk] = w[j / VW][j % VW];
                }
            }
    };
    if (fmt == 2) run(q4_1_t{});
    else if (fmt == 3) run(q8_0_t{});
    else if (fmt == 6) run(q4_0_t{});
    else if (fmt == 8) run(q4_k_t{});
    else if (fmt == 10) run(q6_k_t{});
    else if (fmt == 12) run(q5_0_t{});
}

int llamanb_cpu_vector_width() { return VW; }

// 1 where bfloat16 products multiply pairs by vdpbf16ps (AVX512-BF16, or its emulation), 0 where
// they widen to float32 (the same bits either way: vec.h).
int llamanb_cpu_bf16_dot() {
#if defined(LLAMANB_AVX512BF16)
    return 1;
#else
    return 0;
#endif
}

// 1 where instructions this build uses run emulated through SIMDe on an AVX2 target (vec.h): the
// AVX-512 paths (avx512-simde) or the 256-bit vpdpbusd (vnni256-simde)
int llamanb_cpu_emulated() {
#if defined(LLAMANB_AVX512_SIMDE) || defined(LLAMANB_VNNI256_SIMDE)
    return 1;
#else
    return 0;
#endif
}

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
#endif  // LLAMANB_MATMUL_Q8_UNIT
