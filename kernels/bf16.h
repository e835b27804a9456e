// bf16.h -- bfloat16 <-> float32 for the llamanb external kernels.
//
// The numerics contract every kernel in this directory follows (the numpy models in
// llamanb/npu/extern.py implement the same contract):
//   * tensors are stored as bfloat16 and travel as uint16_t bit patterns (row-major);
//   * arithmetic is IEEE float32, one operation at a time, with no fused multiply-add
//     (the pragma below, and -ffp-contract=off in the host build);
//   * each result is rounded to bfloat16 once, round to nearest, ties to even;
//   * a NaN becomes the quiet NaN 0x7fc0 with its sign kept (what ml_dtypes produces);
//     infinities and subnormals are kept as IEEE float32 has them (no flush to zero).
//
// Portability: only <stdint.h> and compiler builtins, so the same file builds with the host's
// g++ and with Peano (clang for --target=aie2p-none-unknown-elf): no libstdc++, no libm,
// no exceptions, no heap.
#ifndef LLAMANB_BF16_H
#define LLAMANB_BF16_H

#include <stdint.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace llamanb {

// The float32 whose upper 16 bits are b and lower 16 bits zero: exact.
static inline float bf16_to_float(uint16_t b) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(b) << 16);
}

// Nearest bfloat16, ties to even. Adding 0x7fff plus the lowest kept bit to the float's bits
// and truncating rounds to nearest-even; a carry out of the mantissa bumps the exponent, which
// is the right answer (up to infinity for values past the largest bfloat16).
static inline uint16_t float_to_bf16(float f) {
  uint32_t bits = __builtin_bit_cast(uint32_t, f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {              // NaN: quiet, sign kept
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7fc0u);
  }
  uint32_t lsb = (bits >> 16) & 1u;
  return static_cast<uint16_t>((bits + 0x7fffu + lsb) >> 16);
}

}  // namespace llamanb

#endif  // LLAMANB_BF16_H
