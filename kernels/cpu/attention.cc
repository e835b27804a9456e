// Causal grouped-query attention of a step's rows, each over its own sequence's cached keys/values.
//
//   q     [R, n_heads, d]     row stride ldq floats (rows of the fused qkv buffer)
//   seg   rows row .. row+n-1 of one sequence, at positions start .. start+n-1, and where its
//         cached keys/values lie (attention.h: blocks of a pool, or one contiguous block)
//   out   [R, n_heads * d]    rows outside every segment (padding) are left as they are
//
// Query row i of a segment sees keys 0 .. start + i. Each (row, head) is one computation: scores
// (eight keys at a time, reduced together), a max-subtracted softmax, and the weighted sum of
// values (accumulated in registers). A job is a tile of up to QT rows of one segment and one
// key/value head's query heads: a decode row alone, its heads one after another; a prompt's rows
// together (`tile`), walking the keys and values once for all of them, each (row, head) still
// computed exactly as alone. Jobs go to the pool in chunks of about CHUNK_MACS multiply-adds,
// and a job's result never depends on which thread ran it.
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "attention.h"
#include "pool.h"
#include "vec.h"

namespace llamanb_cpu {
namespace {

constexpr long CHUNK_MACS = 16384;

struct Job {
    int seg, i, r;  // segment, first row within it, rows (a tile of up to QT)
};

constexpr int QT = 4;               // rows of one segment a job takes together (prompt rows)

// tree8 of each of f[0..7], as one vector: three rounds of pairwise adds across registers instead
// of eight horizontal sums (hadd adds adjacent pairs, so each lane is tree8's order).
#if defined(__AVX__)
inline v8f tree8x8(const v8f* f) {
    const __m256 h01 = _mm256_hadd_ps((__m256)f[0], (__m256)f[1]);
    const __m256 h23 = _mm256_hadd_ps((__m256)f[2], (__m256)f[3]);
    const __m256 h45 = _mm256_hadd_ps((__m256)f[4], (__m256)f[5]);
    const __m256 h67 = _mm256_hadd_ps((__m256)f[6], (__m256)f[7]);
    const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
    // q0 = [s0 s1 s2 s3 | s0' s1' s2' s3'] (lane halves of keys 0-3), q1 likewise for keys 4-7
    const __m256 lo = _mm256_permute2f128_ps(q0, q1, 0x20), hi = _mm256_permute2f128_ps(q0, q1, 0x31);
    return (v8f)_mm256_add_ps(lo, hi);
}
#else
inline v8f tree8x8(const v8f* f) {
    v8f r = {};
    for (int u = 0; u < 8; ++u) r[u] = tree8(f[u]);
    return r;
}
#endif
inline v8f bcast8(float s) {
#if defined(__AVX__)
    return (v8f)_mm256_set1_ps(s);
#else
    return s - v8f{};
#endif
}

// Attention works in 8-lane vectors (v8f) on every build: on an AVX-512 build 16-lane ones were
// measured slower here (a 512-token prefill's attention 7.6 against 6.3 ms a layer on a Zen 4);
// the bits are the same either way (the 16-lane sums of vec.h).

// Where a sequence's position t lies in its cache: row t % B of block table[t / B].
struct Rows {
    const float* base;      // block 0 of the pool, this layer and head
    long block_stride;
    int B, d;
    const int* table;
    const float* at(int t) const {
        return base + (long)table[t / B] * block_stride + (long)(t % B) * d;
    }
};

// The keys t .. t+7 (d % 16 == 0).
inline void keys8(const Rows& K, int t, const float* (&kp)[8]) {
    kp[0] = K.at(t);
    const bool one_block = t % K.B + 8 <= K.B;
    for (int u = 1; u < 8; ++u) kp[u] = one_block ? kp[0] + u * K.d : K.at(t + u);
}

// Scores p[t .. t+7] of query row qr against the keys kp; returns the running max.
inline float group8(const float* qr, const float* const (&kp)[8], int d, float scale, int t,
                    float* p, float mx) {
    v8f f[8];
    for (int u0 = 0; u0 < 8; u0 += 4) {             // 4 keys x 16 lanes: 8 accumulators
        v8f a[4][2] = {};
        for (int j = 0; j < d; j += 16)
            for (int g = 0; g < 2; ++g) {
                const v8f qv = load8(qr + j + 8 * g);
                for (int u = 0; u < 4; ++u) a[u][g] += qv * load8(kp[u0 + u] + j + 8 * g);
            }
        for (int u = 0; u < 4; ++u) f[u0 + u] = a[u][0] + a[u][1];    // fold16
    }
    const v8f sv = tree8x8(f);
    for (int u = 0; u < 8; ++u) {
        p[t + u] = sv[u] * scale;
        mx = p[t + u] > mx ? p[t + u] : mx;
    }
    return mx;
}

// Scores of query row qr against keys 0 .. n-1: eight keys at a time (eight dot products in
// flight, reduced together), then one at a time -- each score is vec.h's dot16, the same bits
// whichever path and whichever vector width computed it. The grouping depends on n alone, never
// on how the keys are split into blocks, so a paged cache gives the contiguous cache's bits.
// From t0 (a multiple of 8: a tile has scored the keys before it); returns their max, or mx
// if higher.
inline float scores(const float* qr, const Rows& K, int t0, int n, float scale, float* p,
                    float mx = -INFINITY) {
    const int d = K.d;
    int t = t0;
    if (d % 16 == 0)
        for (; t + 8 <= n; t += 8) {
            const float* kp[8];
            keys8(K, t, kp);
            mx = group8(qr, kp, d, scale, t, p, mx);
        }
    for (; t < n; ++t) {
        p[t] = dot16(qr, K.at(t), d) * scale;
        mx = p[t] > mx ? p[t] : mx;
    }
    return mx;
}

// acc [DV 8] += sum over keys u0 <= u < u1 of w(u) V[u], w(u) = p[u] inv: DV vector
// accumulators in registers over each cache block's run of keys, stored between runs, the keys
// in order u = u0, u0 + 1, .. whatever the blocks (a float stored and loaded back is the same
// float, so where the runs are cut never changes a bit).
template <int DV>
inline void weighted_keys(const float* p, float inv, int rnd, const Rows& V, int u0, int u1,
                          float* acc) {
    for (int t0 = u0; t0 < u1;) {
        const int t1 = t0 - t0 % V.B + V.B < u1 ? t0 - t0 % V.B + V.B : u1;
        const float* vt = V.at(t0);
        v8f a[DV];
        for (int j = 0; j < DV; ++j) a[j] = load8(acc + j * 8);
        for (int u = t0; u < t1; ++u, vt += DV * 8) {
            float w = p[u] * inv;
            if (rnd) w = round_bf16(w);
            const v8f wv = bcast8(w);
            for (int j = 0; j < DV; ++j) a[j] += wv * load8(vt + j * 8);
        }
        for (int j = 0; j < DV; ++j) std::memcpy(acc + j * 8, &a[j], sizeof(v8f));
        t0 = t1;
    }
}

// acc [DV 8] = the sum over keys u < n
template <int DV>
inline void weighted_sum(const float* p, float inv, int rnd, const Rows& V, int n, float* acc) {
    std::memset(acc, 0, DV * sizeof(v8f));
    weighted_keys<DV>(p, inv, rnd, V, 0, n, acc);
}

inline void weighted_sum_any(const float* p, float inv, int rnd, const Rows& V, int n, float* acc) {
    const int d = V.d;
    switch (d == 16 ? 2 : d == 32 ? 4 : d == 64 ? 8 : d == 128 ? 16 : 0) {
        case 2: return weighted_sum<2>(p, inv, rnd, V, n, acc);
        case 4: return weighted_sum<4>(p, inv, rnd, V, n, acc);
        case 8: return weighted_sum<8>(p, inv, rnd, V, n, acc);
        case 16: return weighted_sum<16>(p, inv, rnd, V, n, acc);
        default: break;
    }
    for (int j = 0; j < d; ++j) acc[j] = 0.0f;
    for (int u = 0; u < n; ++u) {
        float w = p[u] * inv;
        if (rnd) w = round_bf16(w);
        const float* vt = V.at(u);
        for (int j = 0; j < d; ++j) acc[j] += w * vt[j];
    }
}

// p[0 .. n-1] = e^(p - mx), VW at a time (then one at a time); returns their sum, in 16 lanes as
// the scores are (one sum in key order was a chain of n dependent adds: a 512-token prefill's
// attention 7 % faster without it, measured on a Zen 4)
inline float softmax_weights(float* p, int n, float mx) {
    int u = 0;
    for (; u + VW <= n; u += VW) {
        const vf e = exp_vf(load(p + u) - mx);
        std::memcpy(p + u, &e, sizeof e);
    }
    for (; u < n; ++u) p[u] = exp1(p[u] - mx);
    return sum16(p, n);
}

// Head h of row `row` of out [R, n_heads * d] = acc [d] (rnd: rounded to bfloat16).
inline void store_head(const float* acc, int row, int h, int n_heads, int d, float* out, int rnd) {
    float* o = out + (long)row * n_heads * d + (long)h * d;
    for (int j = 0; j < d; ++j) o[j] = rnd ? round_bf16(acc[j]) : acc[j];
}

void one(const float* q, long ldq, const AttnSeg& s, int i, int h, int n_heads, int group, int d,
         float* out, float scale, int rnd, float* p, float* acc) {
    const int row = s.row + i;
    const float* qr = q + row * ldq + (long)h * d;
    const long head = (long)(h / group) * s.head_stride;
    const int n = s.start + i + 1;
    const Rows K{s.k + head, s.block_stride, s.block, d, s.table};
    const Rows V{s.v + head, s.block_stride, s.block, d, s.table};
    const float mx = scores(qr, K, 0, n, scale, p);
    weighted_sum_any(p, 1.0f / softmax_weights(p, n, mx), rnd, V, n, acc);
    store_head(acc, row, h, n_heads, d, out, rnd);
}

// Rows i0 .. i0+r-1 of segment s, every query head of key/value head kv: each (row, head)
// computed exactly as `one` computes it, but the keys and values are walked once for all of
// them, a group of eight keys (scores) or KB keys (values) at a time, so that the r x group
// queries read them from L1 instead of each streaming them again. d of 16, 32, 64 or 128.
template <int DV>
void tile(const float* q, long ldq, const AttnSeg& s, int i0, int r, int kv, int n_heads,
          int group, float* out, float scale, int rnd, int T, std::vector<float>& P,
          std::vector<float>& A) {
    constexpr int d = DV * 8, KB = 32;
    const long head = (long)kv * s.head_stride;
    const Rows K{s.k + head, s.block_stride, s.block, d, s.table};
    const Rows V{s.v + head, s.block_stride, s.block, d, s.table};
    const int nq = r * group;
    P.resize((size_t)nq * T);
    A.assign((size_t)nq * d, 0.0f);
    const float* qr[64];
    int nn[64];
    float mx[64], inv[64];
    for (int a = 0; a < r; ++a)
        for (int g = 0; g < group; ++g) {
            const int qi = a * group + g;
            qr[qi] = q + (s.row + i0 + a) * ldq + (long)(kv * group + g) * d;
            nn[qi] = s.start + i0 + a + 1;
            mx[qi] = -INFINITY;
        }
    const int n_min = nn[0], n_max = nn[nq - 1];
    int t = 0;
    for (; t + 8 <= n_min; t += 8) {                      // the groups every row sees
        const float* kp[8];
        keys8(K, t, kp);
        for (int qi = 0; qi < nq; ++qi)
            mx[qi] = group8(qr[qi], kp, d, scale, t, P.data() + (size_t)qi * T, mx[qi]);
    }
    for (int qi = 0; qi < nq; ++qi) {                     // each row's own last keys
        float* p = P.data() + (size_t)qi * T;
        mx[qi] = scores(qr[qi], K, t, nn[qi], scale, p, mx[qi]);
        inv[qi] = 1.0f / softmax_weights(p, nn[qi], mx[qi]);
    }
    for (int b0 = 0; b0 < n_max; b0 += KB)               // KB keys' values at a time, for all
        for (int qi = 0; qi < nq; ++qi) {
            const int e = b0 + KB < nn[qi] ? b0 + KB : nn[qi];
            if (e > b0)
                weighted_keys<DV>(P.data() + (size_t)qi * T, inv[qi], rnd, V, b0, e,
                                  A.data() + (size_t)qi * d);
        }
    for (int a = 0; a < r; ++a)
        for (int g = 0; g < group; ++g)
            store_head(A.data() + (size_t)(a * group + g) * d, s.row + i0 + a, kv * group + g,
                       n_heads, d, out, rnd);
}

}  // namespace

void attention(const float* q, long ldq, const AttnSeg* segs, int n_seg, int n_heads, int n_kv,
               int d, float* out, float scale, int rnd) {
    const int group = n_heads / n_kv;
    const int dv = d == 16 ? 2 : d == 32 ? 4 : d == 64 ? 8 : d == 128 ? 16 : 0;
    const int qt = dv && QT * group <= 64 ? QT : 1;
    std::vector<Job> rows;
    long macs = 0;
    int T = 0;
    for (int s = 0; s < n_seg; ++s)
        for (int i = 0; i < segs[s].n; i += qt) {
            const int r = segs[s].n - i < qt ? segs[s].n - i : qt;
            rows.push_back({s, i, r});
            for (int a = 0; a < r; ++a) macs += 2L * (segs[s].start + i + a + 1) * d * n_heads;
            T = segs[s].start + i + r > T ? segs[s].start + i + r : T;
        }
    // A job is a tile of rows and one key/value head: a decode row's `group` query heads one
    // after another on one thread, so the keys and values it reads for the first are in cache
    // for the others; a tile's rows and heads together (`tile`).
    const long jobs = (long)rows.size() * n_kv;
    if (jobs == 0) return;
    long per = jobs * CHUNK_MACS / (macs > 0 ? macs : 1);      // jobs per chunk, by average work
    per = per < 1 ? 1 : per > jobs ? jobs : per;
    parallel_for((jobs + per - 1) / per, [&](int64_t c) {
        std::vector<float> p(T), acc(d), P, A;
        const long j1 = (c + 1) * per < jobs ? (c + 1) * per : jobs;
        for (long job = c * per; job < j1; ++job) {
            const Job& r = rows[job / n_kv];
            const int kv = int(job % n_kv);
            if (r.r == 1) {
                for (int h = kv * group; h < (kv + 1) * group; ++h)
                    one(q, ldq, segs[r.seg], r.i, h, n_heads, group, d, out, scale, rnd,
                        p.data(), acc.data());
                continue;
            }
            switch (dv) {
                case 2: tile<2>(q, ldq, segs[r.seg], r.i, r.r, kv, n_heads, group, out, scale, rnd, T, P, A); break;
                case 4: tile<4>(q, ldq, segs[r.seg], r.i, r.r, kv, n_heads, group, out, scale, rnd, T, P, A); break;
                case 8: tile<8>(q, ldq, segs[r.seg], r.i, r.r, kv, n_heads, group, out, scale, rnd, T, P, A); break;
                default: tile<16>(q, ldq, segs[r.seg], r.i, r.r, kv, n_heads, group, out, scale, rnd, T, P, A);
            }
        }
    });
}

}  // namespace llamanb_cpu

// One segment (rows 0 .. S-1 at positions start ..) over one contiguous block, for the block-by-
// block path (CpuBackend.block: `collect`, or a store forward.cc cannot write in place).
extern "C" void llamanb_cpu_attention(const float* q, long ldq, int S, int start, int n_heads,
                                      int n_kv, int d, const float* k, const float* v, long ldk,
                                      float* out, float scale, int rnd) {
    const int block0 = 0;                   // one block holding every position
    const llamanb_cpu::AttnSeg seg{k, v, 0, ldk, start + S, &block0, 0, S, start};
    llamanb_cpu::attention(q, ldq, &seg, 1, n_heads, n_kv, d, out, scale, rnd);
}
