// Causal grouped-query attention of S query rows of one sequence over its cached keys/values.
//
//   q   [S, n_heads, d]   row stride ldq floats (rows of the fused qkv buffer)
//   k,v [n_kv, T, d]      head stride ldk floats (a view into the cache, T >= start + S)
//   out [S, n_heads * d]
//
// Query row i sits at position start + i and sees keys 0 .. start + i. Each (row, head) is one
// thread's work: scores, a max-subtracted softmax, and the weighted sum of values.
#include <cmath>
#include <vector>

#include "pool.h"
#include "vec.h"

extern "C" void llamanb_cpu_attention(const float* q, long ldq, int S, int start, int n_heads,
                                      int n_kv, int d, const float* k, const float* v, long ldk,
                                      float* out, float scale, int rnd) {
    const int group = n_heads / n_kv;
    const int T = start + S;
    auto one = [&](int job, std::vector<float>& p, std::vector<float>& acc) {
        const int i = job / n_heads, h = job % n_heads;
        const float* qr = q + i * ldq + (long)h * d;
        const float* kh = k + (long)(h / group) * ldk;
        const float* vh = v + (long)(h / group) * ldk;
        const int n = start + i + 1;
        float mx = -INFINITY;
        for (int t = 0; t < n; ++t) {
            const float* kt = kh + (long)t * d;
            vf a = {};
            int j = 0;
            for (; j + VW <= d; j += VW) a += load(qr + j) * load(kt + j);
            float s = hsum(a);
            for (; j < d; ++j) s += qr[j] * kt[j];
            s *= scale;
            p[t] = s;
            mx = s > mx ? s : mx;
        }
        float sum = 0.0f;
        for (int t = 0; t < n; ++t) {
            p[t] = std::exp(p[t] - mx);
            sum += p[t];
        }
        const float inv = 1.0f / sum;
        for (int j = 0; j < d; ++j) acc[j] = 0.0f;
        for (int t = 0; t < n; ++t) {
            float w = p[t] * inv;
            if (rnd) w = round_bf16(w);
            const float* vt = vh + (long)t * d;
            for (int j = 0; j < d; ++j) acc[j] += w * vt[j];
        }
        float* o = out + (long)i * n_heads * d + (long)h * d;
        for (int j = 0; j < d; ++j) o[j] = rnd ? round_bf16(acc[j]) : acc[j];
    };
    const int jobs = S * n_heads;
    const int per_chunk = (long)S * T > 256 ? 4 : jobs;     // a short decode: one thread
    llamanb_cpu::parallel_for((jobs + per_chunk - 1) / per_chunk, [&](int64_t c) {
        std::vector<float> p(T), acc(d);
        const int j1 = int(c + 1) * per_chunk < jobs ? int(c + 1) * per_chunk : jobs;
        for (int job = int(c) * per_chunk; job < j1; ++job) one(job, p, acc);
    });
}
