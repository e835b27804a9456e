// mv.cc -- bfloat16 matrix-vector product with float32 accumulation (GEMV: decode projections
// and the LM head).
//
//   void matvec_bf16(const uint16_t* a, const uint16_t* x, uint16_t* y, int32_t m, int32_t k)
//     a  [m, k] bfloat16, row-major (K contiguous: "K-major" weights)
//     x  [k]    bfloat16
//     y  [m]    bfloat16: y[i] = bf16( sum_j a[i, j] * x[j] ), the sum in float32
//
// Summation order (the one place this kernel and the numpy model differ): LANES partial sums,
// lane l accumulating j = l, l + LANES, l + 2 LANES, ..., then the lanes added pairwise (a tree).
// The model uses numpy's float32 `a @ x` (BLAS, its own blocking), so the two float32 sums differ
// by a few float32 rounding errors; after rounding to bfloat16 they agree exactly or differ by
// one bfloat16 ulp (measured in tests/test_npu_extern.py). Each product is exact in float32.
//
// What the AIE2P version vectorizes: exactly this shape. One vector multiply-accumulate per
// LANES elements of k into a float accumulator register (accfloat), a reduction of the lanes
// at the end of the row; a tile handles a block of rows (upstream's DIM_M_OUTPUT) so that x,
// loaded once into L1, is reused across them.
#include <stdint.h>

#include "bf16.h"

namespace {
constexpr int32_t LANES = 16;
}

extern "C" void matvec_bf16(const uint16_t* a, const uint16_t* x, uint16_t* y, int32_t m,
                            int32_t k) {
  const int32_t k_main = k - k % LANES;
  for (int32_t i = 0; i < m; ++i) {
    const uint16_t* row = a + static_cast<int64_t>(i) * k;
    float acc[LANES];
    for (int32_t l = 0; l < LANES; ++l) acc[l] = 0.0f;
    for (int32_t j = 0; j < k_main; j += LANES) {
      for (int32_t l = 0; l < LANES; ++l) {
        const float p = llamanb::bf16_to_float(row[j + l]) * llamanb::bf16_to_float(x[j + l]);
        acc[l] = acc[l] + p;
      }
    }
    for (int32_t j = k_main; j < k; ++j) {   // the tail: lane j - k_main
      const float p = llamanb::bf16_to_float(row[j]) * llamanb::bf16_to_float(x[j]);
      acc[j - k_main] = acc[j - k_main] + p;
    }
    for (int32_t width = LANES / 2; width > 0; width /= 2) {
      for (int32_t l = 0; l < width; ++l) acc[l] = acc[l] + acc[l + width];
    }
    y[i] = llamanb::float_to_bf16(acc[0]);
  }
}
