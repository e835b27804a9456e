// The row-wise pieces of a Llama block: RMSNorm, RoPE (half-split pairs), SwiGLU; and the streaming
// sum the benchmark probes memory with. `rnd` != 0 rounds each output to bfloat16 (the --dtype bf16
// numerics of the numpy engine).
#include <cmath>
#include <cstring>
#include <vector>

#include "pool.h"
#include "vec.h"

using llamanb_cpu::parallel_for;

extern "C" {

// out [M, H] = x [M, H] / sqrt(mean(x^2) + eps) * w [H]
void llamanb_cpu_rmsnorm(const float* x, const float* w, float* out, int M, int H, float eps,
                         int rnd) {
    parallel_for(M, [&](int64_t m) {
        const float* xr = x + (long)m * H;
        float* o = out + (long)m * H;
        const float ss = dot16(xr, xr, H);          // the same bits at either vector width
        const float inv = 1.0f / std::sqrt(ss / float(H) + eps);
        for (int i = 0; i < H; ++i) {
            float v = xr[i] * inv * w[i];
            o[i] = rnd ? round_bf16(v) : v;
        }
    });
}

// Rotate heads [R rows, n_heads, d] in place (row stride `ld` floats) by cos/sin [R, d/2]:
// (x1, x2) -> (x1 c - x2 s, x2 c + x1 s) for the halves x1 = x[:d/2], x2 = x[d/2:].
void llamanb_cpu_rope(float* x, int R, long ld, int n_heads, int d, const float* cos,
                      const float* sin, int rnd) {
    const int half = d / 2;
    parallel_for(R, [&](int64_t r) {
        const float* c = cos + (long)r * half;
        const float* s = sin + (long)r * half;
        for (int h = 0; h < n_heads; ++h) {
            float* v = x + r * ld + (long)h * d;
            for (int i = 0; i < half; ++i) {
                const float a = v[i], b = v[i + half];
                float lo = a * c[i] - b * s[i];
                float hi = b * c[i] + a * s[i];
                v[i] = rnd ? round_bf16(lo) : lo;
                v[i + half] = rnd ? round_bf16(hi) : hi;
            }
        }
    });
}

// out [M, F] = silu(gu[:, :F]) * gu[:, F:]   for gu [M, 2F] (gate and up packed side by side);
// e^-g by vec.h's exp_vf (each element the same function of its own g)
void llamanb_cpu_silu_mul(const float* gu, float* out, int M, int F, int rnd) {
    parallel_for(M, [&](int64_t m) {
        const float* g = gu + (long)m * 2 * F;
        const float* u = g + F;
        float* o = out + (long)m * F;
        int i = 0;
        for (; i + VW <= F; i += VW) {                  // e^-g by exp_vf, VW at a time
            const vf gv = load(g + i);
            vf v = gv / (1.0f + exp_vf(-gv)) * load(u + i);
            if (rnd) v = round_bf16_v(v);
            std::memcpy(o + i, &v, sizeof v);
        }
        for (; i < F; ++i) {
            const float v = g[i] / (1.0f + exp1(-g[i])) * u[i];
            o[i] = rnd ? round_bf16(v) : v;
        }
    });
}

}

// y[i] = e^x[i] by vec.h's exp_vf (its tail by exp1): what the tests measure against float64.
extern "C" void llamanb_cpu_exp(const float* x, float* y, long n) {
    long i = 0;
    for (; i + VW <= n; i += VW) {
        const vf v = exp_vf(load(x + i));
        std::memcpy(y + i, &v, sizeof v);
    }
    for (; i < n; ++i) y[i] = exp1(x[i]);
}

// The sum of n floats, read by every pool thread in 256 KiB chunks with four accumulators each:
// the streaming read a decode step's weights get, used as a memory-bandwidth probe by the
// benchmark (llamanb.bench.machine). Returns the sum so that the reads cannot be skipped.
extern "C" double llamanb_cpu_read_sum(const float* p, long n) {
    constexpr long CHUNK = 65536;
    const long chunks = (n + CHUNK - 1) / CHUNK;
    std::vector<double> part(chunks);
    llamanb_cpu::parallel_for(chunks, [&](int64_t c) {
        const long i0 = c * CHUNK, i1 = i0 + CHUNK < n ? i0 + CHUNK : n;
        vf a0 = {}, a1 = {}, a2 = {}, a3 = {};
        long i = i0;
        for (; i + 4 * VW <= i1; i += 4 * VW) {
            a0 += load(p + i);
            a1 += load(p + i + VW);
            a2 += load(p + i + 2 * VW);
            a3 += load(p + i + 3 * VW);
        }
        const vf t = a0 + a1 + a2 + a3;
        double s = 0.0;
        for (int l = 0; l < VW; ++l) s += t[l];
        for (; i < i1; ++i) s += p[i];
        part[c] = s;
    });
    double s = 0.0;
    for (double v : part) s += v;
    return s;
}
