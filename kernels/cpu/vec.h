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
