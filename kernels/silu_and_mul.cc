// silu_and_mul.cc -- SwiGLU's elementwise half: out = silu(gate) * up.
//
//   void silu_and_mul_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out, int32_t n)
//     gate, up, out  [n] bfloat16 (any shape, flattened)
//     out[i] = bf16( (g / (1 + exp_f32(-g))) * u )    with g = gate[i], u = up[i] in float32
//
// The formula is llamanb.ops.silu_mul's, written the same way (a division, not a multiply by a
// reciprocal): silu(-inf) is NaN and silu(g) is -0 once e^-g overflows (g < -88.72), in both.
// Numerics (bf16.h): float32 operations one at a time, one rounding to bfloat16 at the end.
// exp_f32 is our own (exp_f32.h), reproduced operation for operation by the numpy model, so the
// host build and the model agree bit for bit.
//
// What the AIE2P version vectorizes: the loop over i, 16 lanes at a time. Upstream's kernel
// (Xilinx/mlir-air, programming_examples/llama32_1b/kernel_builder/ffn_swiglu/silu_and_mul.cc)
// computes sigmoid(g) as 0.5 * (1 + tanh(g / 2)) with the AIE API's vector tanh in bfloat16;
// that approximation is the hardware's, and it differs from this exact-formula reference by up
// to a few bfloat16 ulp -- the reason this file, not the vendor intrinsic, defines the contract.
#include <stdint.h>

#include "bf16.h"
#include "exp_f32.h"

extern "C" void silu_and_mul_bf16(const uint16_t* gate, const uint16_t* up, uint16_t* out,
                                  int32_t n) {
  for (int32_t i = 0; i < n; ++i) {
    const float g = llamanb::bf16_to_float(gate[i]);
    const float u = llamanb::bf16_to_float(up[i]);
    float den = llamanb::exp_f32(-g);
    den = den + 1.0f;
    const float silu = g / den;
    out[i] = llamanb::float_to_bf16(silu * u);
  }
}
