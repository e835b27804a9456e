// The matrix products of matmul.cc, as forward.cc (and the Python side, through ctypes) calls
// them: y [M, N] = x [M, K] @ W[N, K]^T (or y += that, `accumulate`), over packed panels.
#pragma once
#include <cstdint>

// The quantised panel formats (quant.h), each with two products: llamanb_cpu_matmul_<fmt>
// decodes each weight to float32, llamanb_cpu_matmul_<fmt>_q8 takes 8-bit activations.
#define LLAMANB_QUANT_FORMATS(X) X(q4_1) X(q8_0) X(q4_0) X(q4_k) X(q6_k) X(q5_0)

extern "C" {
void llamanb_cpu_matmul_f32(const float* x, int M, int K, const float* P, int N, float* y,
                            int accumulate, int rnd);
void llamanb_cpu_matmul_bf16(const float* x, int M, int K, const uint16_t* P, int N, float* y,
                             int accumulate, int rnd);
#define LLAMANB_DECLARE_QUANT_MATMULS(fmt)                                                        \
    void llamanb_cpu_matmul_##fmt(const float* x, int M, int K, const uint8_t* P, int N,         \
                                  float* y, int accumulate, int rnd);                            \
    void llamanb_cpu_matmul_##fmt##_q8(const float* x, int M, int K, const uint8_t* P, int N,    \
                                       float* y, int accumulate, int rnd);
LLAMANB_QUANT_FORMATS(LLAMANB_DECLARE_QUANT_MATMULS)
#undef LLAMANB_DECLARE_QUANT_MATMULS
}
