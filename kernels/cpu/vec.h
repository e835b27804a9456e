// Vector types for the cpu backend's kernels (GCC/clang vector extensions, any target).
//
//   vf     VW float32 lanes: 16 where the compiler targets AVX-512, else 8 (AVX2, NEON pairs,
//          or plain scalar code the compiler splits it into)
//   load   unaligned loads of VW float32 weights, or VW bfloat16 weights widened to float32
//          (a bfloat16 is the top 16 bits of a float32: widen, shift left 16, reinterpret)
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
constexpr int VW = 16;
#else
constexpr int VW = 8;
#endif

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

static inline float hsum(vf v) {
    float s = 0.0f;
    for (int i = 0; i < VW; ++i) s += v[i];
    return s;
}

static inline float widen(float w) { return w; }
static inline float widen(uint16_t w) {
    uint32_t u = uint32_t(w) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
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
