// Attention over a step's segments (kernels/cpu/attention.cc), shared by the per-op entry point
// and the whole-step forward (forward.cc).
#pragma once

namespace llamanb_cpu {

// One sequence's rows and where its keys/values lie: position t is row t % block of block
// table[t / block], at k + table[t / block] * block_stride + head * head_stride + (t % block) d.
// A contiguous cache is the case of one block (of the whole capacity) per sequence.
struct AttnSeg {
    const float* k;         // block 0 of the pool, this layer
    const float* v;
    long block_stride, head_stride;
    int block;
    const int* table;       // block ids in position order
    int row, n, start;      // rows row .. row+n-1 of the step, at positions start .. start+n-1
};

void attention(const float* q, long ldq, const AttnSeg* segs, int n_seg, int n_heads, int n_kv,
               int d, float* out, float scale, int rnd);

}  // namespace llamanb_cpu
