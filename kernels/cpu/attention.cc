// Causal grouped-query attention of a step's rows, each over its own sequence's cached keys/values.
//
//   q     [R, n_heads, d]     row stride ldq floats (rows of the fused qkv buffer)
//   seg   rows row .. row+n-1 of one sequence, at positions start .. start+n-1, and where its
//         cached keys/values lie (attention.h: blocks of a pool, or one contiguous block)
//   out   [R, n_heads * d]    rows outside every segment (padding) are left as they are
//
// Query row i of a segment sees keys 0 .. start + i. Each (row, head) is one job: scores (four
// keys at a time, so four dot products are in flight), a max-subtracted softmax, and the weighted
// sum of values. Jobs go to the pool in chunks of about CHUNK_MACS multiply-adds; a job's result
// never depends on which thread ran it.
#include <cmath>
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

// Scores of query row qr against keys t0 .. t1-1 stored contiguously from kt (row stride d).
inline void scores(const float* qr, const float* kt, int t0, int t1, int d, float scale, float* p,
                   float& mx) {
    int t = t0;
    for (; t + 4 <= t1; t += 4) {
        const float* k0 = kt + (long)(t - t0) * d;
        vf a0 = {}, a1 = {}, a2 = {}, a3 = {};
        int j = 0;
        for (; j + VW <= d; j += VW) {
            const vf qv = load(qr + j);
            a0 += qv * load(k0 + j);
            a1 += qv * load(k0 + d + j);
            a2 += qv * load(k0 + 2 * d + j);
            a3 += qv * load(k0 + 3 * d + j);
        }
        float s4[4] = {hsum(a0), hsum(a1), hsum(a2), hsum(a3)};
        for (; j < d; ++j)
            for (int u = 0; u < 4; ++u) s4[u] += qr[j] * k0[u * d + j];
        for (int u = 0; u < 4; ++u) {
            p[t + u] = s4[u] * scale;
            mx = p[t + u] > mx ? p[t + u] : mx;
        }
    }
    for (; t < t1; ++t) {
        const float* k1 = kt + (long)(t - t0) * d;
        vf a = {};
        int j = 0;
        for (; j + VW <= d; j += VW) a += load(qr + j) * load(k1 + j);
        float sc = hsum(a);
        for (; j < d; ++j) sc += qr[j] * k1[j];
        p[t] = sc * scale;
        mx = p[t] > mx ? p[t] : mx;
    }
}

void one(const float* q, long ldq, const AttnSeg& s, int i, int h, int n_heads, int group, int d,
         float* out, float scale, int rnd, float* p, float* acc) {
    const int row = s.row + i;
    const float* qr = q + row * ldq + (long)h * d;
    const long head = (long)(h / group) * s.head_stride;
    const int n = s.start + i + 1, B = s.block;
    float mx = -INFINITY;
    for (int t0 = 0; t0 < n; t0 += B) {                         // block by block
        const long at = (long)s.table[t0 / B] * s.block_stride + head;
        scores(qr, s.k + at, t0, t0 + B < n ? t0 + B : n, d, scale, p, mx);
    }
    float sum = 0.0f;
    for (int u = 0; u < n; ++u) {
        p[u] = std::exp(p[u] - mx);
        sum += p[u];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j < d; ++j) acc[j] = 0.0f;
    for (int t0 = 0; t0 < n; t0 += B) {
        const float* vb = s.v + (long)s.table[t0 / B] * s.block_stride + head;
        const int t1 = t0 + B < n ? t0 + B : n;
        for (int u = t0; u < t1; ++u) {
            float w = p[u] * inv;
            if (rnd) w = round_bf16(w);
            const float* vt = vb + (long)(u - t0) * d;
            for (int j = 0; j < d; ++j) acc[j] += w * vt[j];
        }
    }
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
    const long jobs = (long)rows.size() * n_heads;
    if (jobs == 0) return;
    long per = jobs * CHUNK_MACS / (macs > 0 ? macs : 1);      // jobs per chunk, by average work
    per = per < 1 ? 1 : per > jobs ? jobs : per;
    parallel_for((jobs + per - 1) / per, [&](int64_t c) {
        std::vector<float> p(T), acc(d);
        const long j1 = (c + 1) * per < jobs ? (c + 1) * per : jobs;
        for (long job = c * per; job < j1; ++job) {
            const Job& r = rows[job / n_heads];
            one(q, ldq, segs[r.seg], r.i, int(job % n_heads), n_heads, group, d, out, scale, rnd,
                p.data(), acc.data());
        }
    });
}

}  // namespace llamanb_cpu

// One segment (rows 0 .. S-1 at positions start ..), for the per-op path (paged caches).
extern "C" void llamanb_cpu_attention(const float* q, long ldq, int S, int start, int n_heads,
                                      int n_kv, int d, const float* k, const float* v, long ldk,
                                      float* out, float scale, int rnd) {
    const int block0 = 0;                   // one block holding every position
    const llamanb_cpu::AttnSeg seg{k, v, 0, ldk, start + S, &block0, 0, S, start};
    llamanb_cpu::attention(q, ldq, &seg, 1, n_heads, n_kv, d, out, scale, rnd);
}
