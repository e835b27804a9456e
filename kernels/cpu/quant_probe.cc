// Probes of the 8-bit-activation path for chapter 11b and the tests: quant.h's own inline code on
// one block, so that numpy can be held to it bit for bit.
//
// * llamanb_cpu_q4_1_block_isum: one Q4_1 panel block (NP columns x 32 k) times one block of 32
//   int8 activations -> the NP columns' 32-bit integer sums, through IDot<q4_1_t>'s decode, step
//   and sums in the order matmul.cc's micro_q8 runs them (whichever instructions this build uses).
// * llamanb_cpu_dot_u8s8: quant.h's dot_u8s8 (vpmaddubsw) on one vector of bytes: unsigned bytes u
//   times signed bytes s, adjacent products summed and saturated to int16.
#include <cstring>

#include "quant.h"

extern "C" {

// P: one panel block (Quant<q4_1_t>::block bytes), qa: 32 int8 activations, isum: NP int32.
void llamanb_cpu_q4_1_block_isum(const uint8_t* P, const int8_t* qa, int32_t* isum) {
    using D = IDot<q4_1_t>;
    typename D::Acc a;
    D::zero(a);
    for (int g = 0; g < 8; ++g) D::step(a, D::decode(P + Quant<q4_1_t>::head, g), qa + 4 * g);
    vi lo, hi;
    D::sums(a, lo, hi);
    std::memcpy(isum, &lo, sizeof lo);
    std::memcpy(isum + VW, &hi, sizeof hi);
}

// u, s: 4 VW bytes each (one vector), out: 2 VW int16. Returns 1, or 0 (out untouched) where this
// build has no byte dot product (quant.h's INT_DOT_BYTES; the guard below is quant.h's own).
int llamanb_cpu_dot_u8s8(const uint8_t* u, const int8_t* s, int16_t* out) {
#if (LLAMANB_VW == 8 && defined(__AVX2__)) || (LLAMANB_VW == 16 && defined(LLAMANB_AVX512BW))
    static_assert(INT_DOT_BYTES && sizeof(iv) == 4 * VW);
    const iv r = dot_u8s8(iload(u), iload(reinterpret_cast<const uint8_t*>(s)));
    std::memcpy(out, &r, sizeof r);
    return 1;
#else
    (void)u, (void)s, (void)out;
    return 0;
#endif
}

}  // extern "C"
