// GGUF's Q4_1 and Q8_0 blocks, repacked into panels and decoded in registers by the matmul.
//
// A GGUF row of K weights is K/32 blocks; llamanb.backends.cpu_kernels.pack_quant regroups them so
// that NP = 2 VW output columns (one panel, as for float32) share each block of 32 k:
//
//   Q4_1 panel block (20 NP bytes, as many as GGUF's 20 per 32 weights):
//       uint16 d[NP], m[NP]        float16 scale and minimum of each column's block
//       uint8  q[32][VW]           row kk: low nibble = column j, high nibble = column j + VW
//       w[k, j] = d[j] * q + m[j]
//   Q8_0 panel block (34 NP bytes):
//       uint16 d[NP]               float16 scale of each column's block
//       int8   q[32][NP]           row kk: column j
//       w[k, j] = d[j] * q
//
// Each decoded weight is bit for bit the float32 the `gguf` package's dequantisation gives (and
// that the model cache stores): a float16 widens to float32 exactly; d has 11 significant bits and
// q at most 4 (Q4_1) or 8 (Q8_0), so d * q is exact in float32's 24; Q4_1's d * q + m then rounds
// once, whether or not the compiler fuses it (an exact product rounds the same either way). So the
// matmul over quantised panels multiplies the same numbers in the same order as over float32
// panels of the dequantised weights: the same bits, from a quarter (Q4_1) of the bytes.
#pragma once
#include <cstdint>
#include <cstring>

#include "vec.h"

typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint8_t vb __attribute__((vector_size(VW)));
typedef int8_t vsb __attribute__((vector_size(VW)));

// float16 bits -> float32, exactly (normal, subnormal, zero, inf, NaN)
static inline float half_to_float(uint16_t h) {
    const uint32_t s = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    uint32_t u;
    if (e == 0x1f) {
        u = s | 0x7f800000u | (m << 13);
    } else if (e != 0) {
        u = s | ((e + 112u) << 23) | (m << 13);
    } else {
        const float f = float(m) * 0x1p-24f;            // m 2^-24: exact (m < 2^10)
        std::memcpy(&u, &f, 4);
        u |= s;
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// VW float16 values -> float32 lanes
static inline vf load_half(const uint16_t* p) {
#if defined(__AVX512F__) && LLAMANB_VW == 16
    return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
#elif defined(__F16C__) && LLAMANB_VW == 8
    return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
#else
    uint16_t h[VW];
    std::memcpy(h, p, sizeof h);
    vf v;
    for (int i = 0; i < VW; ++i) v[i] = half_to_float(h[i]);
    return v;
#endif
}

// Weight formats of the panels: the matmul's WT for quantised panels is one of these byte types
// (pointer arithmetic in bytes); `block` is the bytes of one panel block of 32 k.
struct q4_1_t { uint8_t byte; };
struct q8_0_t { uint8_t byte; };

template <typename WT> struct Quant { static constexpr bool is = false; };

template <> struct Quant<q4_1_t> {
    static constexpr bool is = true;
    static constexpr long block = 20L * 2 * VW;
    static constexpr int n_scales = 4;
    // d (columns 0..VW-1, VW..2VW-1), then m likewise
    static inline void scales(const uint8_t* b, vf* s) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
        s[0] = load_half(h);
        s[1] = load_half(h + VW);
        s[2] = load_half(h + 2 * VW);
        s[3] = load_half(h + 3 * VW);
    }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        vb q;
        std::memcpy(&q, b + 8 * VW + kk * VW, sizeof q);
        const vi v = __builtin_convertvector(q, vi);
        lo = __builtin_convertvector(v & 15, vf) * s[0] + s[2];
        hi = __builtin_convertvector(v >> 4, vf) * s[1] + s[3];
    }
};

template <> struct Quant<q8_0_t> {
    static constexpr bool is = true;
    static constexpr long block = 34L * 2 * VW;
    static constexpr int n_scales = 2;
    static inline void scales(const uint8_t* b, vf* s) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
        s[0] = load_half(h);
        s[1] = load_half(h + VW);
    }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        vsb a, c;
        const uint8_t* q = b + 4 * VW + kk * 2 * VW;
        std::memcpy(&a, q, sizeof a);
        std::memcpy(&c, q + VW, sizeof c);
        lo = __builtin_convertvector(__builtin_convertvector(a, vi), vf) * s[0];
        hi = __builtin_convertvector(__builtin_convertvector(c, vi), vf) * s[1];
    }
};
