// Attention over a step's segments (kernels/cpu/attention.cc), shared by the per-op entry point
// and the whole-step forward (forward.cc).
#pragma once

namespace llamanb_cpu {

struct AttnSeg {
    const float* k;     // [n_kv, T, d] this sequence's keys, head stride ldk floats
    const float* v;     // the same layout for values
    long ldk;
    int row, n, start;  // rows row .. row+n-1 of the step, at positions start .. start+n-1
};

void attention(const float* q, long ldq, const AttnSeg* segs, int n_seg, int n_heads, int n_kv,
               int d, float* out, float scale, int rnd);

}  // namespace llamanb_cpu
