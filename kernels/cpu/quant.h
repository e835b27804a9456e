// GGUF's quantised blocks (Q4_1, Q4_0, Q5_0, Q4_K, Q6_K, Q8_0), repacked into panels and decoded
// in registers by the matmul.
//
// A GGUF row of K weights is K/32 blocks; llamanb.backends.cpu_kernels.pack_quant regroups them so
// that NP = 2 VW output columns (one panel, as for float32) share each block of 32 k, and the 32 k
// of a block form 8 groups of 4 consecutive k. In a group, 32-bit lane j holds column j's 4 quants
// (byte t = k 4g + t), so one vector load brings VW columns x 4 k:
//
//   Q4_1 panel block (20 NP bytes, as many as GGUF's 20 per 32 weights):
//       uint16 d[NP], m[NP]        float16 scale and minimum of each column's block
//       uint8  q[8][VW][4]         group g, lane j, byte t: low nibble = column j, high nibble =
//                                  column j + VW, at k = 4 g + t
//       w[k, j] = d[j] * q + m[j]
//   Q4_0 panel block (18 NP bytes, GGUF's 18 per 32 weights): Q4_1's without the minimums
//       uint16 d[NP]               float16 scale of each column's block
//       uint8  q[8][VW][4]         as Q4_1's
//       w[k, j] = d[j] * (q - 8)       (the 8-bit-activation path: d q + m with m = -8 d, exact)
//   Q5_0 panel block (22 NP bytes, GGUF's 22 per 32 weights): Q4_0's with a fifth bit per weight
//       uint16 d[NP]               float16 scale of each column's block
//       uint32 h[2][VW]            word w, lane j: bit 8 t + 2 g' + c is the fifth bit of column
//                                  c VW + j at k = 4 (4 w + g') + t, so one shift of a word puts
//                                  a group's bits for one half of the columns at bit 4 of the
//                                  bytes its quants occupy
//       uint8  q[8][VW][4]         the low 4 bits, as Q4_1's
//       w[k, j] = d[j] * (q - 16)      (q = low | fifth << 4; the 8-bit path: m = -16 d, exact)
//   Q4_K panel block (24 NP bytes; GGUF's Q4_K holds 18 per 32 weights): a super-block of 256
//   weights has float16 d and dmin and 6-bit scale and minimum per sub-block of 32 (sc, m); here
//   each sub-block gets its products, D = d sc and M = -dmin m, as float32 (exact: 11 + 6
//   significant bits; float16 holds 11, hence the 4/3 of the file's bytes), and Q4_1's quants:
//       float  D[NP], M[NP]
//       uint8  q[8][VW][4]         as Q4_1's
//       w[k, j] = D[j] * q + M[j]
//   Q6_K panel block (40 NP bytes; GGUF's Q6_K holds 26.25 per 32 weights): a super-block of 256
//   weights has a float16 d and an int8 scale sc per 16 weights, and 6-bit quants q (w = d sc
//   (q - 32)); here each half block of 16 k gets D = d sc as float32 (exact: 11 + 7 bits), and
//   the quants q - 32 as int8, laid out as Q8_0's:
//       float  D0[NP], D1[NP]      k 0..15, k 16..31
//       int8   q[8][2][VW][4]      as Q8_0's
//       w[k, j] = (k < 16 ? D0 : D1)[j] * q
//   Q8_0 panel block (34 NP bytes):
//       uint16 d[NP]               float16 scale of each column's block
//       int8   q[8][2][VW][4]      group g, half h, lane j, byte t: column h VW + j at k = 4 g + t
//       w[k, j] = d[j] * q
//
// Two ways to multiply them (matmul.cc):
//
// * float activations (Quant<WT>::row): each weight decoded to float32 and multiplied as a float32
//   panel's would be. Each decoded weight is bit for bit the float32 the `gguf` package's
//   dequantisation gives (and that the model cache stores): a float16 widens to float32 exactly; d
//   has 11 significant bits and q at most 4 (Q4_1) or 8 (Q8_0), so d * q is exact in float32's 24;
//   Q4_1's d * q + m then rounds once, whether or not the compiler fuses it (an exact product
//   rounds the same either way; Q4_K's D q + M likewise, as gguf's (d sc) q - dmin m rounds
//   once; Q6_K's D q is exact, 11 + 7 + 5 bits). Q4_0's d * (q - 8) and Q5_0's d * (q - 16) are
//   exact likewise, and formed as gguf forms them, so that even their zeros carry gguf's signs.
//   So this path computes the float32 engine's bits.
//
// * 8-bit activations (IDot<WT>): each activation row is quantised once per product into blocks of
//   32 (quantize_q8 below: scale da = max|x| / 127, qa = round(x / da), and the block's sum
//   sa = da * sum qa), and a block's dot product is then integer:
//       sum_k w x  ~  d da sum_k q qa  +  m sa             (Q8_0: no m term)
//   the minimum's term folded through the activation block's sum. With AVX2 / AVX-512BW, a group
//   is one vpmaddubsw (unsigned quant bytes x signed activation bytes, adjacent pairs summed to
//   16 bits) against the row's 4 activation bytes broadcast to every lane, and one vpmaddwd
//   against ones sums the pairs into lane j's 32-bit total: no horizontal sums, as in the float
//   path. Elsewhere the same sums in 32-bit lanes. The integer sums are exact; what this path
//   adds is the activations' rounding, |x - da qa| <= da / 2 (+ |x| u for the division), times
//   |w| summed (tests/backends/test_cpu_backend.py derives the bound).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "vec.h"

typedef int32_t vi __attribute__((vector_size(VW * 4)));
typedef uint32_t vq __attribute__((vector_size(VW * 4)));

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
#if defined(LLAMANB_AVX512F) && LLAMANB_VW == 16
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

template <typename V>
static inline V loadv(const void* p) {
    V v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Weight formats of the panels: the matmul's WT for quantised panels is one of these byte types
// (pointer arithmetic in bytes); `block` is the bytes of one panel block of 32 k, `head` the
// bytes of its scales, `group` the bytes of one group of 4 k.
struct q4_1_t { uint8_t byte; };
struct q4_0_t { uint8_t byte; };
struct q5_0_t { uint8_t byte; };
struct q4_k_t { uint8_t byte; };
struct q6_k_t { uint8_t byte; };
struct q8_0_t { uint8_t byte; };

template <typename WT> struct Quant { static constexpr bool is = false; };

// Four vectors of float32 scales at b (the K-quant panels' head: 4 VW floats in a row).
static inline void float_scales(const uint8_t* b, vf* s) {
    for (int i = 0; i < 4; ++i) s[i] = loadv<vf>(b + 4L * VW * i);
}

// Row kk of a block's 4-bit quants q (8 groups of 4 VW bytes, laid out as Q4_1's): lo = column
// j's weight d q + m, hi = column j + VW's, with s = {d lo, d hi, m lo, m hi}.
static inline void nibble_row(const uint8_t* q, int kk, const vf* s, vf& lo, vf& hi) {
    const vq v = loadv<vq>(q + (kk >> 2) * 4L * VW) >> (8 * (kk & 3));
    lo = __builtin_convertvector((vi)(v & 15), vf) * s[0] + s[2];
    hi = __builtin_convertvector((vi)((v >> 4) & 15), vf) * s[1] + s[3];
}

template <> struct Quant<q4_1_t> {
    static constexpr bool is = true, halves = false;
    static constexpr long head = 8L * VW, group = 4L * VW, block = head + 8 * group;
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
        nibble_row(b + head, kk, s, lo, hi);
    }
};

// A block's float16 scales d (columns 0..VW-1, VW..2VW-1) and the minimums m = offset d made
// from them, for the 8-bit-activation path (Q4_0: offset -8, Q5_0: -16; exact, a power of two).
static inline void scales_offset(const uint8_t* b, float offset, vf* s) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
    s[0] = load_half(h);
    s[1] = load_half(h + VW);
    s[2] = s[0] * offset;
    s[3] = s[1] * offset;
}

// Q4_0: the scales d, and m = -8 d made from them for the 8-bit-activation path (4 scales, as
// Q4_1's); the quants as Q4_1's, decoded to d (q - 8).
template <> struct Quant<q4_0_t> {
    static constexpr bool is = true, halves = false;
    static constexpr long head = 4L * VW, group = 4L * VW, block = head + 8 * group;
    static constexpr int n_scales = 4;
    static inline void scales(const uint8_t* b, vf* s) { scales_offset(b, -8.0f, s); }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        const vq v = loadv<vq>(b + head + (kk >> 2) * group) >> (8 * (kk & 3));
        lo = __builtin_convertvector((vi)(v & 15) - 8, vf) * s[0];
        hi = __builtin_convertvector((vi)((v >> 4) & 15) - 8, vf) * s[1];
    }
};

// Q5_0: Q4_0's scales (and m = -16 d for the 8-bit-activation path), the low 4 bits as Q4_1's
// quants, the fifth bits in the two words per lane (h, see the top of this file) before them.
template <> struct Quant<q5_0_t> {
    static constexpr bool is = true, halves = false;
    static constexpr long word_bytes = 4L * VW, head = 4L * VW + 2 * word_bytes, group = 4L * VW,
                          block = head + 8 * group;
    static constexpr int n_scales = 4;
    // group g's fifth bits for columns of half c sit at bit 8 t + slot(g, c) of the lanes of the
    // word that words(q, g) points to (q: where the block's quants start, `head` past it)
    static constexpr int slot(int g, int c) { return 2 * (g & 3) + c; }
    static inline const uint8_t* words(const uint8_t* q, int g) {
        return q - 2 * word_bytes + (g >> 2) * word_bytes;
    }
    static inline void scales(const uint8_t* b, vf* s) { scales_offset(b, -16.0f, s); }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        const int g = kk >> 2, t = kk & 3;
        const vq v = loadv<vq>(b + head + g * group) >> (8 * t);
        const vq h = loadv<vq>(words(b + head, g)) >> (8 * t + slot(g, 0));
        lo = __builtin_convertvector((vi)((v & 15) | ((h & 1) << 4)) - 16, vf) * s[0];
        hi = __builtin_convertvector((vi)(((v >> 4) & 15) | ((h & 2) << 3)) - 16, vf) * s[1];
    }
};

// Q4_K: float32 D and M per sub-block (4 scales, as Q4_1's float16 d and m); Q4_1's quants.
template <> struct Quant<q4_k_t> {
    static constexpr bool is = true, halves = false;
    static constexpr long head = 16L * VW, group = 4L * VW, block = head + 8 * group;
    static constexpr int n_scales = 4;
    static inline void scales(const uint8_t* b, vf* s) { float_scales(b, s); }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        nibble_row(b + head, kk, s, lo, hi);
    }
};

// Row kk of a block's int8 quants q (8 groups of 8 VW bytes, laid out as Q8_0's), as floats:
// lo = column j's, hi = column j + VW's.
static inline void byte_row(const uint8_t* q, int kk, vf& lo, vf& hi) {
    const uint8_t* g = q + (kk >> 2) * 8L * VW;
    const int up = 24 - 8 * (kk & 3);                       // byte t to the top, then back down
    lo = __builtin_convertvector((loadv<vi>(g) << up) >> 24, vf);
    hi = __builtin_convertvector((loadv<vi>(g + 4 * VW) << up) >> 24, vf);
}

template <> struct Quant<q8_0_t> {
    static constexpr bool is = true, halves = false;
    static constexpr long head = 4L * VW, group = 8L * VW, block = head + 8 * group;
    static constexpr int n_scales = 2;
    static inline void scales(const uint8_t* b, vf* s) {
        const uint16_t* h = reinterpret_cast<const uint16_t*>(b);
        s[0] = load_half(h);
        s[1] = load_half(h + VW);
    }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        byte_row(b + head, kk, lo, hi);
        lo *= s[0];
        hi *= s[1];
    }
};

// Q6_K: float32 D0 (k 0..15) and D1 (k 16..31), then Q8_0's quants. `halves`: the 8-bit-activation
// product folds each half block's integer sums with its own scale (matmul.cc's micro_q8).
template <> struct Quant<q6_k_t> {
    static constexpr bool is = true, halves = true;
    static constexpr long head = 16L * VW, group = 8L * VW, block = head + 8 * group;
    static constexpr int n_scales = 4;                      // D0 lo, D0 hi, D1 lo, D1 hi
    static inline void scales(const uint8_t* b, vf* s) { float_scales(b, s); }
    static inline void row(const uint8_t* b, int kk, const vf* s, vf& lo, vf& hi) {
        byte_row(b + head, kk, lo, hi);
        lo *= s[kk < 16 ? 0 : 2];
        hi *= s[kk < 16 ? 1 : 3];
    }
};

// ---- 8-bit activations ------------------------------------------------------------------------

// One row of K activations -> K/32 blocks: q (int8, K), d and s (float32, K/32) with
//   d = max|x| / 127 (float32 division), q = round-half-even(x / d) in [-127, 127] (0 where d is
//   0), s = d * (sum of the block's q)                          (one float32 rounding each)
// A block with a NaN or an infinity gets d = s = NaN (and q = 0), so its products are NaN, as the
// float path's would be.
#if defined(__AVX2__)
// One block of 32 as quantize_q8 states it, 8 lanes at a time, the same bits: max|x| and the sum
// of integers are exact in any order, x / d is one IEEE division per lane (vdivps, as divss), and
// vroundps to nearest rounds half to even, as nearbyint does in the default rounding mode.
// A block in about 94 instructions (the call included) where the scalar loop took 898
// (callgrind, a SmolLM2-135M decode token: 2.76 M -> 0.29 M).
static inline void quantize_block_q8(const float* xb, int8_t* q, float& d, float& s) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 fmax = _mm256_set1_ps(3.4028235e38f);
    __m256 v[4], m = _mm256_setzero_ps();
    int fin = 0xff;
    for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xb + 8 * i);
        const __m256 a = _mm256_and_ps(v[i], absmask);
        fin &= _mm256_movemask_ps(_mm256_cmp_ps(a, fmax, _CMP_LE_OQ));   // NaN: false
        m = _mm256_max_ps(m, a);
    }
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
    const bool finite = fin == 0xff;
    const float dd = _mm_cvtss_f32(h) / 127.0f;
    if (!finite || dd == 0.0f) {                 // q = 0 (and d = s = NaN for a NaN or inf)
        std::memset(q, 0, 32);
        d = finite ? dd : NAN;
        s = finite ? dd * 0.0f : NAN;
        return;
    }
    const __m256 vd = _mm256_set1_ps(dd), hi = _mm256_set1_ps(127.0f), lo = _mm256_set1_ps(-127.0f);
    __m256i t[4], sum = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
        __m256 r = _mm256_round_ps(_mm256_div_ps(v[i], vd), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
        t[i] = _mm256_cvtps_epi32(r);                         // integral already: exact
        sum = _mm256_add_epi32(sum, t[i]);
    }
    // int32 -> int8 (no saturation: |t| <= 127). The packs work within 128-bit lanes and leave
    // the dwords of 4 bytes in the order 0 8 16 24 4 12 20 28 (in elements / 4); the permute
    // puts them back.
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(t[0], t[1]), _mm256_packs_epi32(t[2], t[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q),
                        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4e));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xb1));
    d = dd;
    s = dd * float(_mm_cvtsi128_si32(s4));
}
#endif

static inline void quantize_q8(const float* x, int K, int8_t* q, float* d, float* s) {
#if defined(__AVX2__)
    for (int b = 0; b < K / 32; ++b) quantize_block_q8(x + 32 * b, q + 32 * b, d[b], s[b]);
#else
    for (int b = 0; b < K / 32; ++b) {
        const float* xb = x + 32 * b;
        float amax = 0.0f;
        bool finite = true;
        for (int i = 0; i < 32; ++i) {
            const float a = std::fabs(xb[i]);
            finite &= a <= 3.4028235e38f;
            amax = a > amax ? a : amax;
        }
        const float dd = amax / 127.0f;
        int sum = 0;
        for (int i = 0; i < 32; ++i) {
            float t = (finite && dd != 0.0f) ? std::nearbyint(xb[i] / dd) : 0.0f;
            t = t > 127.0f ? 127.0f : t < -127.0f ? -127.0f : t;
            q[32 * b + i] = int8_t(t);
            sum += int(t);
        }
        d[b] = finite ? dd : NAN;
        s[b] = finite ? dd * float(sum) : NAN;
    }
#endif
}

// IDot<WT>: a group's integer dot products for one activation row. Acc holds a block's running
// sums (two vectors: columns 0..VW-1 and VW..2VW-1), G one group's decoded quants (decode(q, g):
// group g of the block whose quants start at q, Quant<WT>::head past its start); step adds
// sum_t q[4g + t, j] qa[4g + t] to lane j, and `sums` returns the block's 32-bit totals.
#if (LLAMANB_VW == 8 && defined(__AVX2__)) || (LLAMANB_VW == 16 && defined(LLAMANB_AVX512BW))
#if LLAMANB_VW == 8
typedef __m256i iv;
static inline iv iload(const uint8_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
static inline iv set1_32(int32_t v) { return _mm256_set1_epi32(v); }
static inline iv set1_16(int16_t v) { return _mm256_set1_epi16(v); }
static inline iv set1_8(int8_t v) { return _mm256_set1_epi8(v); }
static inline iv izero() { return _mm256_setzero_si256(); }
static inline iv band(iv a, iv b) { return _mm256_and_si256(a, b); }
static inline iv bor(iv a, iv b) { return _mm256_or_si256(a, b); }
static inline iv srl16(iv a, int n) { return _mm256_srli_epi16(a, n); }
static inline iv sll32(iv a, int n) { return _mm256_slli_epi32(a, n); }
static inline iv srl32(iv a, int n) { return _mm256_srli_epi32(a, n); }
static inline iv sra32(iv a, int n) { return _mm256_srai_epi32(a, n); }
static inline iv add16(iv a, iv b) { return _mm256_add_epi16(a, b); }
static inline iv add32(iv a, iv b) { return _mm256_add_epi32(a, b); }
static inline iv dot_u8s8(iv u, iv s) { return _mm256_maddubs_epi16(u, s); }     // vpmaddubsw
static inline iv pairs16(iv a) { return _mm256_madd_epi16(a, set1_16(1)); }       // vpmaddwd
static inline iv abs8(iv a) { return _mm256_abs_epi8(a); }
static inline iv sign8(iv a, iv w) { return _mm256_sign_epi8(a, w); }   // -a where w < 0
#else
typedef __m512i iv;
static inline iv iload(const uint8_t* p) { return _mm512_loadu_si512(p); }
static inline iv set1_32(int32_t v) { return _mm512_set1_epi32(v); }
static inline iv set1_16(int16_t v) { return _mm512_set1_epi16(v); }
static inline iv set1_8(int8_t v) { return _mm512_set1_epi8(v); }
static inline iv izero() { return _mm512_setzero_si512(); }
static inline iv band(iv a, iv b) { return _mm512_and_si512(a, b); }
static inline iv bor(iv a, iv b) { return _mm512_or_si512(a, b); }
static inline iv srl16(iv a, int n) { return _mm512_srli_epi16(a, n); }
static inline iv sll32(iv a, int n) { return _mm512_slli_epi32(a, n); }
static inline iv srl32(iv a, int n) { return _mm512_srli_epi32(a, n); }
#if defined(LLAMANB_AVX512_SIMDE)
// SIMDe 0.7.4 has no _mm512_srai_epi32: the logical shift, its sign extended by
// ((x >>> n) ^ h) - h with h = 2^(31 - n) -- the same integers
static inline iv sra32(iv a, int n) {
    const iv h = set1_32(int32_t(1u << (31 - n)));
    return _mm512_sub_epi32(_mm512_xor_si512(srl32(a, n), h), h);
}
#else
static inline iv sra32(iv a, int n) { return _mm512_srai_epi32(a, n); }
#endif
static inline iv add16(iv a, iv b) { return _mm512_add_epi16(a, b); }
static inline iv add32(iv a, iv b) { return _mm512_add_epi32(a, b); }
static inline iv dot_u8s8(iv u, iv s) { return _mm512_maddubs_epi16(u, s); }
static inline iv pairs16(iv a) { return _mm512_madd_epi16(a, set1_16(1)); }
static inline iv abs8(iv a) { return _mm512_abs_epi8(a); }
static inline iv sign8(iv a, iv w) {                         // -a where w < 0 (w = 0: |w| = 0)
    return _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(w), izero(), a);
}
#endif
#define LLAMANB_BYTE_DOTS 1

// dot4(acc, u, s): in every 32-bit lane j, acc[j] + sum_t u[4j + t] s[4j + t] (t < 4), u unsigned
// bytes, s signed bytes -- the step every IDot below is made of.
//
// * vpdpbusd (AVX512-VNNI's 512-bit form; AVX-VNNI's VEX or AVX512VL's EVEX 256-bit form): that in
//   one instruction. Intel SDM, "VPDPBUSD -- Multiply and Add Unsigned and Signed Bytes": each
//   unsigned byte of the first source times the signed byte of the second is an intermediate
//   signed word (exact: 255 * -128 = -32640 fits), and the four words are summed and added to the
//   doubleword without saturation (VPDPBUSDS is the saturating form): the exact sum, as long as
//   the lane stays within int32.
// * Elsewhere (AVX2, AVX-512BW): vpmaddubsw then vpmaddwd against ones, then an add. SDM,
//   "PMADDUBSW": the products of adjacent pairs are added "with signed saturation" into a word,
//   so a pair whose sum passes 32767 (255 * 127 * 2) is clipped there; vpmaddwd then sums the two
//   words of each lane in 32 bits exactly. Wherever no pair can pass 32767, the two are the same
//   integers -- each IDot below says why its operands cannot (tests/cpu/test_cpu_int8.py runs both
//   on a pair that does, against int64).
#if LLAMANB_VW == 16 && defined(LLAMANB_AVX512VNNI)
#define LLAMANB_DPBUSD_BITS 512
static inline iv dot4(iv acc, iv u, iv s) { return _mm512_dpbusd_epi32(acc, u, s); }
#elif LLAMANB_VW == 8 && defined(__AVXVNNI__)
#define LLAMANB_DPBUSD_BITS 256
static inline iv dot4(iv acc, iv u, iv s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
#elif LLAMANB_VW == 8 && defined(__AVX512VNNI__) && defined(__AVX512VL__)
// (the EVEX encoding of the same operation, for a 256-bit build on an AVX512-VNNI target; this
// project's AVX-512 builds take 512-bit vectors, so its own flavours reach the 512-bit form)
#define LLAMANB_DPBUSD_BITS 256
static inline iv dot4(iv acc, iv u, iv s) { return _mm256_dpbusd_epi32(acc, u, s); }
#elif LLAMANB_VW == 8 && defined(LLAMANB_VNNI256_SIMDE)
#define LLAMANB_DPBUSD_BITS 256      // emulated (vec.h)
static inline iv dot4(iv acc, iv u, iv s) { return simde_mm256_dpbusd_epi32(acc, u, s); }
#else
#define LLAMANB_DPBUSD_BITS 0
static inline iv dot4(iv acc, iv u, iv s) { return add32(acc, pairs16(dot_u8s8(u, s))); }
#endif

// Keep a block's running sums in registers, added group by group: left to itself GCC computed
// all of a block's products first and parked them on the stack (int16 adds reassociate freely).
#if defined(LLAMANB_AVX512_SIMDE)
#define LLAMANB_KEEP(a, b) ((void)0)      // a 512-bit value has no register in an AVX2 build
#elif LLAMANB_VW == 16
#define LLAMANB_KEEP(a, b) asm("" : "+v"(a), "+v"(b))
#else
#define LLAMANB_KEEP(a, b) asm("" : "+x"(a), "+x"(b))
#endif

template <typename WT> struct IDot;

// Q4_1: quants 0..15, activations -127..127 (quantize_q8 clips there): a pair is at most
// 2 * 15 * 127 = 3810 < 32767, so vpmaddubsw never saturates and dot4's two forms agree.
#if LLAMANB_DPBUSD_BITS       // (a macro: #if reads no constexpr)
// With vpdpbusd each group's products go straight into the 32-bit lanes, so the high nibbles need
// no shift: v & 0xf0 is 16 q, its lane sums are 16 times the true ones, at most
// 16 * 32 * 15 * 127 = 975360 < 2^31 over a block, and one arithmetic shift per block (exact: a
// multiple of 16) gives the true sums back. Per group: 2 ands, 1 broadcast, 2 vpdpbusd.
template <> struct IDot<q4_1_t> {
    struct Acc { iv lo, hi; };
    struct G { iv lo, hi; };
    static inline void zero(Acc& a) { a.lo = a.hi = izero(); }
    static inline G decode(const uint8_t* q, int g) {
        const iv v = iload(q + g * 4 * VW);
        return {band(v, set1_8(0x0f)), band(v, set1_8(int8_t(0xf0)))};
    }
    static inline void step(Acc& a, const G& g, const int8_t* x4) {
        int32_t w;
        std::memcpy(&w, x4, 4);
        const iv x = set1_32(w);                      // the row's 4 activations, in every lane
        a.lo = dot4(a.lo, g.lo, x);
        a.hi = dot4(a.hi, g.hi, x);
        LLAMANB_KEEP(a.lo, a.hi);
    }
    static inline void sums(const Acc& a, vi& lo, vi& hi) {
        lo = (vi)a.lo;
        hi = (vi)sra32(a.hi, 4);                      // 16 S -> S
    }
};
#else
// Without it, the 8 groups of a block add up in 16 bits (8 * 3810 = 30480 < 32767) before one
// vpmaddwd. Per group: load, and, shift, and (the high nibbles), 1 broadcast, 2 vpmaddubsw, 2 adds.
template <> struct IDot<q4_1_t> {
    struct Acc { iv lo, hi; };
    struct G { iv lo, hi; };
    static inline void zero(Acc& a) { a.lo = a.hi = izero(); }
    static inline G decode(const uint8_t* q, int g) {
        const iv v = iload(q + g * 4 * VW), m = set1_8(15);
        return {band(v, m), band(srl16(v, 4), m)};
    }
    static inline void step(Acc& a, const G& g, const int8_t* x4) {
        int32_t w;
        std::memcpy(&w, x4, 4);
        const iv x = set1_32(w);
        a.lo = add16(a.lo, dot_u8s8(g.lo, x));
        a.hi = add16(a.hi, dot_u8s8(g.hi, x));
        LLAMANB_KEEP(a.lo, a.hi);
    }
    static inline void sums(const Acc& a, vi& lo, vi& hi) {
        lo = (vi)pairs16(a.lo);
        hi = (vi)pairs16(a.hi);
    }
};
#endif

// Q8_0: signed quants; vpmaddubsw and vpdpbusd want one unsigned operand, so |q| (0..128, as an
// unsigned byte) times the activation with q's sign (-127..127: never -128, which quantize_q8
// does not make). A pair is at most 2 * 128 * 127 = 32512 < 32767, so vpmaddubsw never
// saturates and dot4's two forms agree; two pairs would pass 32767, so each group's pairs go to
// 32 bits at once (vpdpbusd: into the lane).
template <> struct IDot<q8_0_t> {
    struct Acc { iv lo, hi; };
    struct G { iv lo, hi; };
    static inline void zero(Acc& a) { a.lo = a.hi = izero(); }
    static inline G decode(const uint8_t* q, int g) {
        const uint8_t* p = q + g * 8 * VW;
        return {iload(p), iload(p + 4 * VW)};
    }
    static inline void step(Acc& a, const G& g, const int8_t* x4) {
        int32_t w;
        std::memcpy(&w, x4, 4);
        const iv x = set1_32(w);
        a.lo = dot4(a.lo, abs8(g.lo), sign8(x, g.lo));
        a.hi = dot4(a.hi, abs8(g.hi), sign8(x, g.hi));
        LLAMANB_KEEP(a.lo, a.hi);
    }
    static inline void sums(const Acc& a, vi& lo, vi& hi) {
        lo = (vi)a.lo;
        hi = (vi)a.hi;
    }
};

// Q5_0: quants 0..31 (the low 4 bits as Q4_1's, the fifth shifted from its word to bit 4 of each
// byte). A pair is at most 2 * 31 * 127 = 7874 < 32767 (vpmaddubsw never saturates: dot4's two
// forms agree); 8 groups would pass 32767 in 16 bits, so each group's pairs go to 32 bits at
// once, as Q8_0's.
template <> struct IDot<q5_0_t> {
    struct Acc { iv lo, hi; };
    struct G { iv lo, hi; };
    static inline void zero(Acc& a) { a.lo = a.hi = izero(); }
    // bit 8 t + s of each lane to bit 8 t + 4
    static inline iv to_bit4(iv h, int s) { return s <= 4 ? sll32(h, 4 - s) : srl32(h, s - 4); }
    static inline G decode(const uint8_t* q, int g) {
        const iv v = iload(q + g * 4 * VW), m = set1_8(15), b4 = set1_8(16);
        const iv h = iload(Quant<q5_0_t>::words(q, g));
        return {bor(band(v, m), band(to_bit4(h, Quant<q5_0_t>::slot(g, 0)), b4)),
                bor(band(srl16(v, 4), m), band(to_bit4(h, Quant<q5_0_t>::slot(g, 1)), b4))};
    }
    static inline void step(Acc& a, const G& g, const int8_t* x4) {
        int32_t w;
        std::memcpy(&w, x4, 4);
        const iv x = set1_32(w);
        a.lo = dot4(a.lo, g.lo, x);
        a.hi = dot4(a.hi, g.hi, x);
        LLAMANB_KEEP(a.lo, a.hi);
    }
    static inline void sums(const Acc& a, vi& lo, vi& hi) {
        lo = (vi)a.lo;
        hi = (vi)a.hi;
    }
};
#else
#define LLAMANB_BYTE_DOTS 0
#define LLAMANB_DPBUSD_BITS 0

template <typename WT> struct IDot;

// Without byte dot products: lane j's 4 quants taken apart by shifts, each multiplied in 32 bits.
// Both formats in 32-bit lanes: a group decodes to 4 x (lo, hi) lane vectors, and every step
// adds each one times its activation byte; only decode differs between formats.
struct IDot32 {
    struct Acc { vi lo, hi; };
    struct G { vi lo[4], hi[4]; };
    static inline void zero(Acc& a) { a.lo = a.hi = vi{}; }
    static inline void step(Acc& a, const G& g, const int8_t* x4) {
        for (int t = 0; t < 4; ++t) {
            const vi x = int32_t(x4[t]) - vi{};
            a.lo += g.lo[t] * x;
            a.hi += g.hi[t] * x;
        }
    }
    static inline void sums(const Acc& a, vi& lo, vi& hi) { lo = a.lo; hi = a.hi; }
};

template <> struct IDot<q4_1_t> : IDot32 {
    static inline G decode(const uint8_t* q, int g) {
        const vq v = loadv<vq>(q + g * 4L * VW);
        G r;
        for (int t = 0; t < 4; ++t) {
            r.lo[t] = (vi)((v >> (8 * t)) & 15);
            r.hi[t] = (vi)((v >> (8 * t + 4)) & 15);
        }
        return r;
    }
};

template <> struct IDot<q8_0_t> : IDot32 {
    static inline G decode(const uint8_t* q, int g) {
        const uint8_t* p = q + g * 8L * VW;
        const vi v = loadv<vi>(p), w = loadv<vi>(p + 4 * VW);
        G r;
        for (int t = 0; t < 4; ++t) {
            r.lo[t] = (v << (24 - 8 * t)) >> 24;
            r.hi[t] = (w << (24 - 8 * t)) >> 24;
        }
        return r;
    }
};

template <> struct IDot<q5_0_t> : IDot32 {
    static inline G decode(const uint8_t* q, int g) {
        const vq v = loadv<vq>(q + g * 4L * VW);
        const vq h = loadv<vq>(Quant<q5_0_t>::words(q, g));
        const int s0 = Quant<q5_0_t>::slot(g, 0), s1 = Quant<q5_0_t>::slot(g, 1);
        G r;
        for (int t = 0; t < 4; ++t) {
            r.lo[t] = (vi)(((v >> (8 * t)) & 15) | (((h >> (8 * t + s0)) & 1) << 4));
            r.hi[t] = (vi)(((v >> (8 * t + 4)) & 15) | (((h >> (8 * t + s1)) & 1) << 4));
        }
        return r;
    }
};
#endif

// (the two facts as macros for #if, and as constants for C++)
constexpr bool INT_DOT_BYTES = LLAMANB_BYTE_DOTS;
constexpr int DPBUSD_BITS = LLAMANB_DPBUSD_BITS;

// Q4_0's quants are Q4_1's (0..15, m = -8 d taken through the activation block's sum): a pair at
// most 2 * 15 * 127, as Q4_1's.
template <> struct IDot<q4_0_t> : IDot<q4_1_t> {};
// Q4_K's quants are Q4_1's too (0..15, M taken through the activation block's sum).
template <> struct IDot<q4_k_t> : IDot<q4_1_t> {};
// Q6_K's quants (q - 32: -32..31) are signed bytes, as Q8_0's: a pair at most 2 * 32 * 127.
template <> struct IDot<q6_k_t> : IDot<q8_0_t> {};
