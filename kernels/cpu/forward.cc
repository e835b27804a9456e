// Every transformer block of one engine step in one call, over a float32 KV cache (contiguous or
// paged: both are pools of blocks, see Cache).
//
//   for each layer l (weights W[6 l .. 6 l + 5]: attn_norm, wqkv, wo, ffn_norm, gate_up, down):
//     h   = rmsnorm(x) * attn_norm                 [R, H]
//     qkv = h @ wqkv^T                              [R, (Nh + 2 Nkv) d]
//     rope(q, k) at each row's position             cos, sin [R, d/2]
//     cache[block of p, l, :, p % B] = k, v         each segment's rows, p = start + i
//     a   = attention of each row over its cache    [R, Nh d]   (padding rows: 0)
//     x  += a @ wo^T
//     h   = rmsnorm(x) * ffn_norm
//     g|u = h @ gate_up^T                           [R, 2 F]
//     x  += (silu(g) * u) @ down^T
//
// The same kernels as the per-block path (llamanb.backends.cpu.CpuBackend.block), called in the
// same order with the same arguments, so both give the same bits; this one only saves the
// Python between them (about 10 calls and their arrays per layer). Weights are packed panels
// (matmul.cc), each matrix in its own format fmt[6 l + i] (0 float32, 1 bfloat16 bits, 2 Q4_1,
// 3 Q8_0, 6 Q4_0, 8 Q4_K, 10 Q6_K, 12 Q5_0: quant.h; 4, 5, 7, 9, 11, 13: the same with 8-bit
// activations);
// `rnd` rounds every op's output to bfloat16.
#include <cstdint>
#include <cstring>
#include <vector>

#include "attention.h"
#include "matmul.h"

extern "C" {
void llamanb_cpu_rmsnorm(const float* x, const float* w, float* out, int M, int H, float eps,
                         int rnd);
void llamanb_cpu_rope(float* x, int R, long ld, int n_heads, int d, const float* cos,
                      const float* sin, int rnd);
void llamanb_cpu_silu_mul(const float* gu, float* out, int M, int F, int rnd);
}

namespace {

struct Dims {
    int32_t L, H, n_heads, n_kv, d, F, rnd;
    float eps, scale;
    const int32_t* fmt;             // 6 L weight formats, as W
};

struct Seg {
    int32_t row, n, start, slot;
    const int32_t* table;           // the sequence's block ids, in position order
};

// The KV store as a pool of blocks: k, v [n_blocks, L, N_kv, block, d] (strides in floats).
// Paged: the pool itself. Contiguous [slots, L, N_kv, capacity, d]: one block per slot, of the
// whole capacity, and each sequence's table is its own slot.
struct Cache {
    float* k;
    float* v;
    int64_t block_stride, layer_stride, head_stride;
    int32_t block;
};

void mm(const Dims& D, int fmt, const float* x, int M, int K, const void* P, int N, float* y,
        int acc) {
    switch (fmt) {
        case 1: llamanb_cpu_matmul_bf16(x, M, K, static_cast<const uint16_t*>(P), N, y, acc, D.rnd); break;
        case 2: llamanb_cpu_matmul_q4_1(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 3: llamanb_cpu_matmul_q8_0(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 4: llamanb_cpu_matmul_q4_1_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 5: llamanb_cpu_matmul_q8_0_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 6: llamanb_cpu_matmul_q4_0(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 7: llamanb_cpu_matmul_q4_0_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 8: llamanb_cpu_matmul_q4_k(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 9: llamanb_cpu_matmul_q4_k_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 10: llamanb_cpu_matmul_q6_k(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 11: llamanb_cpu_matmul_q6_k_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 12: llamanb_cpu_matmul_q5_0(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        case 13: llamanb_cpu_matmul_q5_0_q8(x, M, K, static_cast<const uint8_t*>(P), N, y, acc, D.rnd); break;
        default: llamanb_cpu_matmul_f32(x, M, K, static_cast<const float*>(P), N, y, acc, D.rnd);
    }
}

}  // namespace

extern "C" void llamanb_cpu_forward(const Dims* dims, const void* const* W, float* x, int R,
                                    const float* cos, const float* sin, const Seg* segs,
                                    int n_seg, const Cache* cache) {
    const Dims& D = *dims;
    const int H = D.H, Nh = D.n_heads, Nkv = D.n_kv, d = D.d, F = D.F;
    const int Q = (Nh + 2 * Nkv) * d;
    std::vector<float> h((size_t)R * H), qkv((size_t)R * Q), att((size_t)R * Nh * d, 0.0f),
        gu((size_t)R * 2 * F), a((size_t)R * F);
    std::vector<llamanb_cpu::AttnSeg> as(n_seg);
    for (int l = 0; l < D.L; ++l) {
        const void* const* w = W + 6 * l;
        const int32_t* f = D.fmt + 6 * l;
        llamanb_cpu_rmsnorm(x, static_cast<const float*>(w[0]), h.data(), R, H, D.eps, D.rnd);
        mm(D, f[1], h.data(), R, H, w[1], Q, qkv.data(), 0);
        llamanb_cpu_rope(qkv.data(), R, Q, Nh + Nkv, d, cos, sin, D.rnd);
        float* kl = cache->k + l * cache->layer_stride;
        float* vl = cache->v + l * cache->layer_stride;
        const int B = cache->block;
        for (int s = 0; s < n_seg; ++s) {
            const Seg& g = segs[s];
            for (int i = 0; i < g.n; ++i) {                     // position p: row p % B of its block
                const int p = g.start + i;
                const long at = g.table[p / B] * cache->block_stride + (long)(p % B) * d;
                const float* r = qkv.data() + (size_t)(g.row + i) * Q;
                for (int j = 0; j < Nkv; ++j) {
                    std::memcpy(kl + at + j * cache->head_stride, r + (Nh + j) * d, d * sizeof(float));
                    std::memcpy(vl + at + j * cache->head_stride, r + (Nh + Nkv + j) * d,
                                d * sizeof(float));
                }
            }
            as[s] = {kl, vl, cache->block_stride, cache->head_stride, B, g.table, g.row, g.n, g.start};
        }
        llamanb_cpu::attention(qkv.data(), Q, as.data(), n_seg, Nh, Nkv, d, att.data(), D.scale,
                               D.rnd);
        mm(D, f[2], att.data(), R, Nh * d, w[2], H, x, 1);
        llamanb_cpu_rmsnorm(x, static_cast<const float*>(w[3]), h.data(), R, H, D.eps, D.rnd);
        mm(D, f[4], h.data(), R, H, w[4], 2 * F, gu.data(), 0);
        llamanb_cpu_silu_mul(gu.data(), a.data(), R, F, D.rnd);
        mm(D, f[5], a.data(), R, F, w[5], H, x, 1);
    }
}
