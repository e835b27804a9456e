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

#include "attention.h"
#include "pool.h"
#include "vec.h"

namespace llamanb_cpu {
namespace {

constexpr long CHUNK_MACS = 16384;

struct Job {
    int seg, i;     // segment, row within it
};

#if defined(__AVX__) && LLAMANB_VW == 8
// The eight lane sums of a[0..7], as one vector (three rounds of pairwise adds across registers
// instead of eight horizontal sums).
inline vf hsum8(const vf* a) {
    const __m256 h01 = _mm256_hadd_ps((__m256)a[0], (__m256)a[1]);
    const __m256 h23 = _mm256_hadd_ps((__m256)a[2], (__m256)a[3]);
    const __m256 h45 = _mm256_hadd_ps((__m256)a[4], (__m256)a[5]);
    const __m256 h67 = _mm256_hadd_ps((__m256)a[6], (__m256)a[7]);
    const __m256 q0 = _mm256_hadd_ps(h01, h23), q1 = _mm256_hadd_ps(h45, h67);
    // q0 = [s0 s1 s2 s3 | s0' s1' s2' s3'] (lane halves of keys 0-3), q1 likewise for keys 4-7
    const __m256 lo = _mm256_permute2f128_ps(q0, q1, 0x20), hi = _mm256_permute2f128_ps(q0, q1, 0x31);
    return (vf)_mm256_add_ps(lo, hi);
}
constexpr int KEYS = 8;
#else
inline vf hsum8(const vf* a) {
    vf r = {};
    for (int u = 0; u < 8; ++u) r[u] = hsum(a[u]);
    return r;
}
constexpr int KEYS = VW >= 8 ? 8 : 0;       // keys per round of hsum8 (0: one at a time)
#endif

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
// flight, reduced together), then one at a time. The grouping depends on n alone, never on how
// the keys are split into blocks, so a paged cache gives the contiguous cache's bits.
inline float scores(const float* qr, const Rows& K, int n, float scale, float* p) {
    const int d = K.d;
    float mx = -INFINITY;
    int t = 0;
    if (KEYS && d % VW == 0)
        for (; t + 8 <= n; t += 8) {
            const float* kp[8];
            kp[0] = K.at(t);
            const bool one_block = t % K.B + 8 <= K.B;
            for (int u = 1; u < 8; ++u) kp[u] = one_block ? kp[0] + u * d : K.at(t + u);
            vf a[8] = {};
            for (int j = 0; j < d; j += VW) {
                const vf qv = load(qr + j);
                for (int u = 0; u < 8; ++u) a[u] += qv * load(kp[u] + j);
            }
            const vf sv = hsum8(a);
            for (int u = 0; u < 8; ++u) {
                p[t + u] = sv[u] * scale;
                mx = p[t + u] > mx ? p[t + u] : mx;
            }
        }
    for (; t < n; ++t) {
        const float* k1 = K.at(t);
        vf a = {};
        int j = 0;
        for (; j + VW <= d; j += VW) a += load(qr + j) * load(k1 + j);
        float sc = hsum(a);
        for (; j < d; ++j) sc += qr[j] * k1[j];
        p[t] = sc * scale;
        mx = p[t] > mx ? p[t] : mx;
    }
    return mx;
}

// acc [DV VW] = sum over keys u < n of w(u) V[u], w(u) = p[u] inv: DV vector accumulators in
// registers, keys walked block by block (the order is u = 0, 1, .. whatever the blocks).
template <int DV>
inline void weighted_sum(const float* p, float inv, int rnd, const Rows& V, int n, float* acc) {
    vf a[DV] = {};
    for (int t0 = 0; t0 < n; t0 += V.B - t0 % V.B) {
        const float* vb = V.at(t0);
        const int t1 = t0 - t0 % V.B + V.B < n ? t0 - t0 % V.B + V.B : n;
        for (int u = t0; u < t1; ++u) {
            float w = p[u] * inv;
            if (rnd) w = round_bf16(w);
            const vf wv = bcast(w);
            const float* vt = vb + (long)(u - t0) * DV * VW;
            for (int j = 0; j < DV; ++j) a[j] += wv * load(vt + j * VW);
        }
    }
    for (int j = 0; j < DV; ++j) std::memcpy(acc + j * VW, &a[j], sizeof(vf));
}

inline void weighted_sum_any(const float* p, float inv, int rnd, const Rows& V, int n, float* acc) {
    const int d = V.d;
    switch (d == 2 * VW ? 2 : d == 4 * VW ? 4 : d == 8 * VW ? 8 : d == 16 * VW ? 16 : 0) {
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
    float sum = 0.0f;
    for (u = 0; u < n; ++u) sum += p[u];              // in key order, as before
    weighted_sum_any(p, 1.0f / sum, rnd, V, n, acc);
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
