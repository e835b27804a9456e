// rope_halfsplit.cc -- rotary position embedding, half-split pairing (HF transformers' Llama).
//
//   void rope_halfsplit_bf16(const uint16_t* x, const uint16_t* lut, uint16_t* y,
//                            int32_t rows, int32_t dim)
//     x, y  [rows, dim] bfloat16, row-major; one row is one head of one position
//     lut   [rows, dim] bfloat16: cos(theta) in [:, :dim/2], sin(theta) in [:, dim/2:]
//     with h = dim/2, for i < h (c = lut[i], s = lut[h + i]):
//       y[i]     = x[i] * c - x[h + i] * s
//       y[h + i] = x[h + i] * c + x[i] * s
//
// Numerics (bf16.h): each product of two bfloat16 numbers is exact in float32 (8 + 8 significant
// bits fit in 24), so the only float32 rounding is the one sum; then one rounding to bfloat16.
// Because the products are exact, fusing a multiply into the add (FMA) cannot change the result.
// dim must be even; the caller (the MLIR herd, or llamanb/npu/extern.py) guarantees it.
//
// What the AIE2P version vectorizes: the loop over i, 16 or 32 lanes at a time -- four vector
// loads (x[i..], x[h+i..], cos, sin), two vector multiplies into float accumulators, a subtract and
// an add, then a bfloat16 conversion (round to nearest even) and two vector stores. An herd tile
// receives whole rows through its L1 buffers, so rows is the tile's share of positions x heads.
#include <stdint.h>

#include "bf16.h"

extern "C" void rope_halfsplit_bf16(const uint16_t* x, const uint16_t* lut, uint16_t* y,
                                    int32_t rows, int32_t dim) {
  const int32_t h = dim / 2;
  for (int32_t row = 0; row < rows; ++row) {
    const uint16_t* xr = x + static_cast<int64_t>(row) * dim;
    const uint16_t* lr = lut + static_cast<int64_t>(row) * dim;
    uint16_t* yr = y + static_cast<int64_t>(row) * dim;
    for (int32_t i = 0; i < h; ++i) {
      const float x1 = llamanb::bf16_to_float(xr[i]);
      const float x2 = llamanb::bf16_to_float(xr[h + i]);
      const float c = llamanb::bf16_to_float(lr[i]);
      const float s = llamanb::bf16_to_float(lr[h + i]);
      const float a = x1 * c;
      const float b = x2 * s;
      const float d = x2 * c;
      const float e = x1 * s;
      yr[i] = llamanb::float_to_bf16(a - b);
      yr[h + i] = llamanb::float_to_bf16(d + e);
    }
  }
}
