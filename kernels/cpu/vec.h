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

// The AVX-512 code paths are compiled where the compiler targets AVX-512 -- or, to check them on a
// CPU without it, with LLAMANB_AVX512_SIMDE on an AVX2 target (cpu_kernels' "avx512-simde"
// flavour): the same source, every _mm512 intrinsic carried out by SIMDe (SIMD Everywhere,
// Debian's libsimde-dev) in AVX2 instructions. That build gives the AVX-512 paths' results and
// packs panels as an AVX-512 build does; it is slower than the AVX2 build and times nothing.
#if defined(LLAMANB_AVX512_SIMDE)
#if defined(__AVX512F__) || !defined(__AVX2__) || !defined(__F16C__)
#error "LLAMANB_AVX512_SIMDE wants an AVX2 target without AVX-512 (-march=x86-64-v3)"
#endif
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#define LLAMANB_AVX512F 1
#define LLAMANB_AVX512BW 1
#undef _mm512_madd_epi16             // SIMDe 0.7.4 (Debian 12) gives this alias four arguments
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
// SIMDe 0.7 has no 512-bit float16 conversion: its two 256-bit halves, by F16C (exact, as the
// 512-bit instruction is)
static inline __m512 llamanb_cvtph_ps(__m256i h) {
    const __m256 lo = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    const __m256 hi = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    return __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
#define _mm512_cvtph_ps llamanb_cvtph_ps
#define LLAMANB_AVX512BF16 1         // vdpbf16ps as its definition states it (dot_bf16_pairs)
#define LLAMANB_AVX512VNNI 1         // vpdpbusd: SIMDe's _mm512_dpbusd_epi32 (quant.h's dot4)
#else
#if defined(__AVX512F__)
#define LLAMANB_AVX512F 1
#endif
#if defined(__AVX512BW__)
#define LLAMANB_AVX512BW 1
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define LLAMANB_AVX512BF16 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define LLAMANB_AVX512VNNI 1
#endif
#endif

// The 256-bit vpdpbusd (AVX-VNNI's VEX form, AVX512VL's EVEX form: one operation) is compiled
// where the compiler targets either -- or, to check it on a CPU without it, with
// LLAMANB_VNNI256_SIMDE on an AVX2 target (cpu_kernels' "vnni256-simde" flavour): the AVX2
// kernels with every vpdpbusd carried out by SIMDe's simde_mm256_dpbusd_epi32 in AVX2
// instructions. Its results are a VNNI build's; its speed is nobody's.
#if defined(LLAMANB_VNNI256_SIMDE)
#if defined(__AVX512F__) || defined(__AVXVNNI__) || !defined(__AVX2__)
#error "LLAMANB_VNNI256_SIMDE wants an AVX2 target without AVX-512 or AVX-VNNI (-march=x86-64-v3)"
#endif
#include <simde/x86/avx512/dpbusd.h>
#endif

#if defined(LLAMANB_AVX512F)
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
#if defined(__AVX2__) && (LLAMANB_VW == 8 || defined(LLAMANB_AVX512BW))
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

// ---- bfloat16 pairs (AVX512-BF16's vdpbf16ps) ------------------------------------------------
// vdpbf16ps multiplies pairs of bfloat16s: in float32 lane j, with a = (a[2j], a[2j+1]) and
// b likewise (Intel SDM, VDPBF16PS, "Operation"):
//     acc[j] += a[2j+1] b[2j+1]          one FMA, round to nearest even,
//     acc[j] += a[2j]   b[2j]            inputs' subnormals read as 0 (DAZ), outputs' flushed (FTZ)
// A product of two bfloat16s (8 significant bits each) is exact in float32 unless it under- or
// overflows, so each step is acc + (exact product), rounded once: an FMA chain over k in the
// order k+1, k, k+3, k+2, ... -- which every build of matmul.cc follows for bfloat16 panels, so
// that the same bits come out whether this instruction or widening FMAs did the work.
#if defined(LLAMANB_AVX512BF16)
// Rows k and k+1 of a bfloat16 panel (2 VW columns each, in bf16_slot order) -> per column the
// pair (w[k], w[k+1]): lo = columns 0..VW-1, hi = VW..2VW-1 (the unpacks of load_pair, with row
// k+1 in place of the zeros).
static inline void load_bf16_pairs(const uint16_t* k0, const uint16_t* k1, vu& lo, vu& hi) {
    const __m512i a = _mm512_loadu_si512(k0), b = _mm512_loadu_si512(k1);
    lo = (vu)_mm512_unpacklo_epi16(a, b);
    hi = (vu)_mm512_unpackhi_epi16(a, b);
}

static inline vu bcast_u32(uint32_t v) { return (vu)_mm512_set1_epi32((int)v); }

#if defined(LLAMANB_AVX512_SIMDE)
// The instruction's definition in AVX2 code (SIMDe 0.7.4's own _mm512_dpbf16_ps adds the even
// product first and keeps subnormals, so it is not used): x with a subnormal's bits -> +-0.
static inline vf flush_subnormal(vf x) {
    const vu e = (vu)x & 0x7f800000u;
    const vu keep = (vu)(e != 0) | 0x80000000u;         // the sign stays: +-0
    return (vf)((vu)x & keep);
}
static inline vf dot_bf16_pairs(vf acc, vu a, vu b) {
    const vf a_odd = flush_subnormal((vf)(a & 0xffff0000u)), b_odd = flush_subnormal((vf)(b & 0xffff0000u));
    const vf a_even = flush_subnormal((vf)(a << 16)), b_even = flush_subnormal((vf)(b << 16));
    acc = flush_subnormal(acc + a_odd * b_odd);
    return flush_subnormal(acc + a_even * b_even);
}
#else
static inline vf dot_bf16_pairs(vf acc, vu a, vu b) {
    return (vf)_mm512_dpbf16_ps((__m512)acc, (__m512bh)a, (__m512bh)b);
}
#endif
#endif

// Where column j (0 <= j < 2 VW) of a bfloat16 panel row is stored, so load_pair reads it back in
// order: 128-bit lane L of the loaded vector holds columns 4L..4L+3 (for lo) then VW+4L..VW+4L+3.
static inline int bf16_slot(int j) {
    if (!BF16_UNPACK) return j;
    const int h = j / VW, r = j % VW;
    return 8 * (r / 4) + 4 * h + r % 4;
}

// ---- sums across lanes: the same bits at either vector width ----------------------------------
// A dot product or sum of squares over n elements is summed in 16 lanes whatever VW is: lane l
// takes the elements i = l (mod 16) below n16 = n - n % 16, one FMA chain in increasing i (G =
// 16 / VW vectors of VW lanes on AVX2, one on AVX-512); then the halves are added, lane l + lane
// l + 8 (fold16), and the 8 sums reduced as a tree of adjacent pairs, ((s0 + s1) + (s2 + s3)) +
// ((s4 + s5) + (s6 + s7)) (tree8: the order attention.cc's eight-at-a-time hadd reduction gives
// too); the elements from n16 on follow one at a time. So a norm or an attention score has the
// same bits on an AVX2 and an AVX-512 build (summing in VW lanes would not: lane l would take
// i = l (mod VW)).
constexpr int G16 = 16 / VW;                      // vectors per 16 lanes
typedef float v8f __attribute__((vector_size(32)));

static inline v8f load8(const float* p) {
    v8f v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

static inline v8f fold16(const vf (&a)[G16]) {
#if LLAMANB_VW == 16
    v8f lo, hi;
    std::memcpy(&lo, &a[0], sizeof lo);
    std::memcpy(&hi, reinterpret_cast<const char*>(&a[0]) + sizeof lo, sizeof hi);
    return lo + hi;
#else
    return a[0] + a[1];
#endif
}

static inline float tree8(v8f v) {
    return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}

// sum over i < n of a[i], in that order (see above)
static inline float sum16(const float* a, int n) {
    vf acc[G16] = {};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int g = 0; g < G16; ++g) acc[g] += load(a + i + g * VW);
    float s = tree8(fold16(acc));
    for (; i < n; ++i) s += a[i];
    return s;
}

// sum over i < n of a[i] b[i], in that order (see above)
static inline float dot16(const float* a, const float* b, int n) {
    vf acc[G16] = {};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int g = 0; g < G16; ++g) acc[g] += load(a + i + g * VW) * load(b + i + g * VW);
    float s = tree8(fold16(acc));
    for (; i < n; ++i) s += a[i] * b[i];
    return s;
}

// VW copies of s: one vbroadcastss. (GCC compiles `vf{} + s` to a real add, since -0 + 0 = +0,
// and a lane-by-lane fill to a chain of inserts.)
static inline vf bcast(float s) {
#if defined(LLAMANB_AVX512F)
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

// round_bf16 in every lane (the same bits as the scalar one, lane by lane)
static inline vf round_bf16_v(vf f) {
    const vu u = (vu)f;
    const vu r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return (vf)((u & 0x7fffffffu) > 0x7f800000u ? u : r);       // NaN stays NaN
}
