// Vector types for the cpu backend's kernels (GCC/clang vector extensions, any target).
//
//   vf     VW float32 lanes: 16 where the compiler targets AVX-512, else 8 (AVX2, NEON pairs,
//          or plain scalar code the compiler splits it into)
//   load   unaligned loads of VW float32 weights, or VW bfloat16 weights widened to float32
//          (a bfloat16 is the top 16 bits of a float32: widen, shift left 16, reinterpret)
#pragma once
#include <cstdint>
#include <cstring>
#if defined(__AVX__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__)
#define LLAMANB_VW 16
#else
#define LLAMANB_VW 8
#endif
constexpr int VW = LLAMANB_VW;

typedef float vf __attribute__((vector_size(VW * 4)));
typedef uint16_t vh __attribute__((vector_size(VW * 2)));
typedef uint32_t vu __attribute__((vector_size(VW * 4)));

static inline vf load(const float* p) {
    vf v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

static inline vf load(const uint16_t* p) {
    vh h;
    std::memcpy(&h, p, sizeof h);
    vu u = __builtin_convertvector(h, vu) << 16;
    return (vf)u;
}

// 2 VW bfloat16 weights -> two float32 vectors (lo = the first VW columns, hi = the next VW).
// With AVX2 / AVX-512BW one load and two unpacks with a zero register do it (a bfloat16 is the top
// half of a float32), but an unpack works within each 128-bit lane: it yields elements 0-3 of
// every lane, then 4-7. So packed bfloat16 panels store column j at bf16_slot(j) (matmul.cc's
// pack), which the unpacks put back in order. Elsewhere: plain widening, identity order.
#if defined(__AVX2__) && (LLAMANB_VW == 8 || defined(__AVX512BW__))
#include <immintrin.h>
constexpr bool BF16_UNPACK = true;
static inline void load_pair(const uint16_t* p, vf& lo, vf& hi) {
#if LLAMANB_VW == 16
    const __m512i v = _mm512_loadu_si512(p), z = _mm512_setzero_si512();
    lo = (vf)_mm512_unpacklo_epi16(z, v);
    hi = (vf)_mm512_unpackhi_epi16(z, v);
#else
    const __m256i v = _mm256_loadu_si256((const __m256i*)p), z = _mm256_setzero_si256();
    lo = (vf)_mm256_unpacklo_epi16(z, v);
    hi = (vf)_mm256_unpackhi_epi16(z, v);
#endif
}
#else
constexpr bool BF16_UNPACK = false;
static inline void load_pair(const uint16_t* p, vf& lo, vf& hi) {
    lo = load(p);
    hi = load(p + VW);
}
#endif

static inline void load_pair(const float* p, vf& lo, vf& hi) {
    lo = load(p);
    hi = load(p + VW);
}

// Where column j (0 <= j < 2 VW) of a bfloat16 panel row is stored, so load_pair reads it back in
// order: 128-bit lane L of the loaded vector holds columns 4L..4L+3 (for lo) then VW+4L..VW+4L+3.
static inline int bf16_slot(int j) {
    if (!BF16_UNPACK) return j;
    const int h = j / VW, r = j % VW;
    return 8 * (r / 4) + 4 * h + r % 4;
}

// Sum of the lanes as a tree of adjacent pairs, ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))
// for 8 lanes: the order attention.cc's eight-at-a-time reduction (hadd) gives each sum too, so a
// score has the same bits whichever path computed it.
static inline float hsum(vf v) {
    float t[VW];
    std::memcpy(t, &v, sizeof v);
    for (int w = 1; w < VW; w *= 2)
        for (int i = 0; i < VW; i += 2 * w) t[i] += t[i + w];
    return t[0];
}

// VW copies of s: one vbroadcastss. (GCC compiles `vf{} + s` to a real add, since -0 + 0 = +0,
// and a lane-by-lane fill to a chain of inserts.)
static inline vf bcast(float s) {
#if defined(__AVX512F__)
    return (vf)_mm512_set1_ps(s);
#elif defined(__AVX__)
    return (vf)_mm256_set1_ps(s);
#else
    return s - vf{};
#endif
}

// e^x in every lane: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 in two parts,
// so r is nearly exact), e^r by Cephes' expf polynomial, then 2^n in two exact steps (2^(n/2)
// twice: n reaches 128 just below float's overflow). Within 2 ulp of e^x wherever e^x is a
// normal float (tests/backends/test_cpu_backend.py measures it against float64 over that whole
// range); below -87.3365 (a subnormal result) it gives 0, above 88.7228 infinity, NaN stays NaN.
// Every lane is the same function of its own x: a value's bits never depend on its neighbours.
static inline vf exp_vf(vf x) {
    typedef int32_t vi32 __attribute__((vector_size(VW * 4)));
    const vf round_big = bcast(12582912.0f);            // 1.5 2^23: adding it rounds to integer
    const vf n = (x * 1.44269504088896341f + round_big) - round_big;
    vf r = x - n * 0.693359375f;                        // ln2's first 9 bits: n ln2_hi is exact
    r = r - n * -2.12194440e-4f;                        // the rest of ln2
    vf p = bcast(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * (r * r) + r + 1.0f;                          // e^r
    const vi32 ni = __builtin_convertvector(n, vi32);
    const vi32 h = ni >> 1;                             // n = h + (n - h), each in float's range
    const vf s1 = (vf)((h + 127) << 23), s2 = (vf)((ni - h + 127) << 23);
    vf y = p * s1 * s2;
    y = x < -87.33654475f ? vf{} : y;
    y = x > 88.72283905f ? bcast(__builtin_inff()) : y;
    return x != x ? x : y;                              // NaN in, NaN out
}

// e^x of one float: exp_vf's value, so a scalar tail gives a vector body's bits.
static inline float exp1(float x) { return exp_vf(bcast(x))[0]; }

// Round a float32 to the nearest bfloat16 (ties to even), kept as float32. NaN stays NaN.
static inline float round_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return f;
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    std::memcpy(&f, &u, 4);
    return f;
}
