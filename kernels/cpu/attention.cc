// Causal grouped-query attention of a step's rows, each over its own sequence's cached keys/values.
//
//   q     [R, n_heads, d]     row stride ldq floats (rows of the fused qkv buffer)
//   seg   rows row .. row+n-1 of one sequence, at positions start .. start+n-1, and where its
//         cached keys/values lie (attention.h: blocks of a pool, or one contiguous block)
//   out   [R, n_heads * d]    rows outside every segment (padding) are left as they are
//
// Query row i of a segment sees keys 0 .. start + i. Each (row, head) is one computation: scores
// (eight keys at a time, reduced together), a max-subtracted softmax, and the weighted sum of
// values (accumulated in registers). A job is a row's query heads of one key/value head; jobs go
// to the pool in chunks of about CHUNK_MACS multiply-adds, and a job's result never depends on
// which thread ran it.
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
    int seg, i;     // segment, row within it
};

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

// Scores of query row qr against keys 0 .. n-1: eight keys at a time (eight dot products in
// flight, reduced together), then one at a time -- each score is vec.h's dot16, the same bits
// whichever path and whichever vector width computed it. The grouping depends on n alone, never
// on how the keys are split into blocks, so a paged cache gives the contiguous cache's bits.
inline float scores(const float* qr, const Rows& K, int n, float scale, float* p) {
    const int d = K.d;
    float mx = -INFINITY;
    int t = 0;
    if (d % 16 == 0)
        for (; t + 8 <= n; t += 8) {
            const float* kp[8];
            kp[0] = K.at(t);
            const bool one_block = t % K.B + 8 <= K.B;
            for (int u = 1; u < 8; ++u) kp[u] = one_block ? kp[0] + u * d : K.at(t + u);
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
        }
    for (; t < n; ++t) {
        p[t] = dot16(qr, K.at(t), d) * scale;
        mx = p[t] > mx ? p[t] : mx;
    }
    return mx;
}

// acc [DV 8] = sum over keys u < n of w(u) V[u], w(u) = p[u] inv: DV vector accumulators in
// registers, keys walked block by block (the order is u = 0, 1, .. whatever the blocks).
template <int DV>
inline void weighted_sum(const float* p, float inv, int rnd, const Rows& V, int n, float* acc) {
    v8f a[DV] = {};
    for (int t0 = 0; t0 < n; t0 += V.B - t0 % V.B) {
        const float* vb = V.at(t0);
        const int t1 = t0 - t0 % V.B + V.B < n ? t0 - t0 % V.B + V.B : n;
        for (int u = t0; u < t1; ++u) {
            float w = p[u] * inv;
            if (rnd) w = round_bf16(w);
            const v8f wv = bcast8(w);
            const float* vt = vb + (long)(u - t0) * DV * 8;
            for (int j = 0; j < DV; ++j) a[j] += wv * load8(vt + j * 8);
        }
    }
    for (int j = 0; j < DV; ++j) std::memcpy(acc + j * 8, &a[j], sizeof(v8f));
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

void one(const float* q, long ldq, const AttnSeg& s, int i, int h, int n_heads, int group, int d,
         float* out, float scale, int rnd, float* p, float* acc) {
    const int row = s.row + i;
    const float* qr = q + row * ldq + (long)h * d;
    const long head = (long)(h / group) * s.head_stride;
    const int n = s.start + i + 1;
    const Rows K{s.k + head, s.block_stride, s.block, d, s.table};
    const Rows V{s.v + head, s.block_stride, s.block, d, s.table};
    const float mx = scores(qr, K, n, scale, p);
    int u = 0;                                        // p = e^(p - mx), VW at a time
    for (; u + VW <= n; u += VW) {
        const vf e = exp_vf(load(p + u) - mx);
        std::memcpy(p + u, &e, sizeof e);
    }
    for (; u < n; ++u) p[u] = exp1(p[u] - mx);
    // summed in 16 lanes, as the scores (one sum in key order was a chain of n dependent adds:
    // a 512-token prefill's attention 7 % faster without it, measured on a Zen 4)
    weighted_sum_any(p, 1.0f / sum16(p, n), rnd, V, n, acc);
    float* o = out + (long)row * n_heads * d + (long)h * d;
    for (int j = 0; j < d; ++j) o[j] = rnd ? round_bf16(acc[j]) : acc[j];
}

}  // namespace

void attention(const float* q, long ldq, const AttnSeg* segs, int n_seg, int n_heads, int n_kv,
               int d, float* out, float scale, int rnd) {
    const int group = n_heads / n_kv;
    std::vector<Job> rows;
    long macs = 0;
    int T = 0;
    for (int s = 0; s < n_seg; ++s)
        for (int i = 0; i < segs[s].n; ++i) {
            rows.push_back({s, i});
            const int n = segs[s].start + i + 1;
            macs += 2L * n * d * n_heads;
            T = n > T ? n : T;
        }
    // A job is one row and one key/value head: its `group` query heads one after another on one
    // thread, so the keys and values it reads for the first are in cache for the others.
    const long jobs = (long)rows.size() * n_kv;
    if (jobs == 0) return;
    long per = jobs * CHUNK_MACS / (macs > 0 ? macs : 1);      // jobs per chunk, by average work
    per = per < 1 ? 1 : per > jobs ? jobs : per;
    parallel_for((jobs + per - 1) / per, [&](int64_t c) {
        std::vector<float> p(T), acc(d);
        const long j1 = (c + 1) * per < jobs ? (c + 1) * per : jobs;
        for (long job = c * per; job < j1; ++job) {
            const Job& r = rows[job / n_kv];
            const int kv = int(job % n_kv);
            for (int h = kv * group; h < (kv + 1) * group; ++h)
                one(q, ldq, segs[r.seg], r.i, h, n_heads, group, d, out, scale, rnd, p.data(),
                    acc.data());
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
