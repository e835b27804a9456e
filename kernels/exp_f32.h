// exp_f32.h -- e^x in float32 from + and * only, for the llamanb external kernels.
//
// Why our own exp: an AIE core has no libm, and the host's expf (glibc) and numpy's float32 exp
// (SIMD code) disagree in the last bit now and then, which after rounding to bfloat16 would make
// "host build == numpy model" true only most of the time. This function is a fixed sequence of
// IEEE float32 operations; llamanb/npu/extern.py (exp_f32) performs the same sequence on numpy
// float32 arrays, so the two agree bit for bit on every input. Accuracy: within 2 float32 ulp of
// e^x (tests/test_npu_extern.py measures it against float64), far below bfloat16's resolution.
//
// Method (Cody and Waite's range reduction, then a Taylor polynomial):
//   k = round(x * log2(e))                     round to nearest via the 1.5 * 2^23 trick
//   r = (x - k * LN2_HI) - k * LN2_LO          |r| <= ln2/2; k * LN2_HI is exact (LN2_HI has 9 bits)
//   e^r = 1 + r + r^2/2! + ... + r^7/7!        Horner; the next term is below 2^-30 for |r| <= 0.35
//   e^x = e^r * 2^k                            2^k built from its bits, in two steps near the ends
// Every constant is written in hex so its float32 value is exact on both sides.
#ifndef LLAMANB_EXP_F32_H
#define LLAMANB_EXP_F32_H

#include <stdint.h>

#include "bf16.h"   // for the fp-contract pragma

namespace llamanb {

// 2^k as a float32 for -126 <= k <= 127 (a normal number: exponent field k + 127).
static inline float pow2i(int32_t k) {
  return __builtin_bit_cast(float, static_cast<uint32_t>(k + 127) << 23);
}

static inline float exp_f32(float x) {
  const float kOverflow = 0x1.62e42ep+6f;    // largest float32 x with e^x < FLT_MAX (88.7228)
  const float kUnderflow = -104.0f;          // e^x < 2^-150: rounds to zero
  const float kLog2e = 0x1.715476p+0f;
  const float kRound = 0x1.8p+23f;           // 1.5 * 2^23: (y + kRound) - kRound rounds y to an integer
  const float kLn2Hi = 0x1.63p-1f;           // 0.693359375
  const float kLn2Lo = -0x1.bd0106p-13f;     // ln 2 - kLn2Hi
  if (x != x) return x;                      // NaN
  if (x > kOverflow) return __builtin_inff();
  if (x < kUnderflow) return 0.0f;

  float kf = x * kLog2e;
  kf = kf + kRound;
  kf = kf - kRound;                          // nearest integer (ties to even), exact in float32
  int32_t k = static_cast<int32_t>(kf);      // -150 <= k <= 128
  float r = kf * kLn2Hi;
  r = x - r;
  float t = kf * kLn2Lo;
  r = r - t;

  float p = 0x1.a01a02p-13f;                 // 1/7!
  p = p * r; p = p + 0x1.6c16c2p-10f;        // 1/6!
  p = p * r; p = p + 0x1.111112p-7f;         // 1/5!
  p = p * r; p = p + 0x1.555556p-5f;         // 1/4!
  p = p * r; p = p + 0x1.555556p-3f;         // 1/3!
  p = p * r; p = p + 0x1.0p-1f;              // 1/2!
  p = p * r; p = p + 1.0f;
  p = p * r; p = p + 1.0f;

  if (k > 127) {                             // k == 128: 2^128 is not a float32
    p = p * pow2i(127);
    return p * 2.0f;
  }
  if (k < -126) {                            // result is subnormal: scale in two steps
    p = p * pow2i(k + 64);
    return p * pow2i(-64);
  }
  return p * pow2i(k);
}

}  // namespace llamanb

#endif  // LLAMANB_EXP_F32_H
