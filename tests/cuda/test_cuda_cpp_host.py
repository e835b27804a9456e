"""kernels/cuda/llama_kernels.cu's `argmax_decode`, run on the HOST CPU: the .cu file itself is
compiled by the host C++ compiler with a few definitions that give CUDA's names a CPU meaning
(every CUDA thread a std::thread, `__syncthreads` a std::barrier of the block's threads,
`__shared__` one static array per block run). This is an emulation, not a GPU run: it checks
the kernel's logic as written (the argmax, its tie and NaN rules, the bookkeeping), not NVCC's
code generation nor the GPU's memory model. What compiles the same source for a GPU is
tests/cuda/test_cuda_compile.py (nvcc or NVRTC to PTX and SASS for sm_80 and sm_90); the GPU
itself runs it only in scripts/gpu_check.py (CuPy's RawModule).

Why this kernel: an all-NaN or all -inf logits row left every thread's index at V, so the kernel
returned token V and read emb[V], one row past the table. The simulator cannot run a .cu file;
this harness can."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from conftest import REPO_ROOT

SOURCE = REPO_ROOT / "kernels" / "cuda" / "llama_kernels.cu"

# CUDA's names, given a CPU meaning. Only what argmax_decode uses runs; the warp shuffle (used by
# rmsnorm and softmax_rows, which this harness does not launch) aborts if anything calls it.
HARNESS = r"""
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

struct Dim3 { unsigned x = 0, y = 0, z = 0; };
static thread_local Dim3 threadIdx, blockIdx;
static Dim3 blockDim, gridDim;
static std::barrier<>* block_barrier;
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
static void __syncthreads() { block_barrier->arrive_and_wait(); }
static float __int_as_float(int i) { float f; std::memcpy(&f, &i, sizeof f); return f; }
static float host_expf(float x) { return std::exp(x); }
#define __expf host_expf                 // glibc declares its own __expf
static float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
static float __shfl_xor_sync(unsigned, float, int) {
    std::fprintf(stderr, "warp shuffles are not emulated here\n");
    std::abort();
}

#include "llama_kernels.cu"

template <class T> static std::vector<T> take(std::FILE* f, size_t n) {
    std::vector<T> v(n);
    if (std::fread(v.data(), sizeof(T), n, f) != n) { std::fprintf(stderr, "short input\n"); std::exit(3); }
    return v;
}

int main(int argc, char** argv) {
    std::FILE* in = std::fopen(argv[1], "rb");
    auto hdr = take<int>(in, 5);                     // n_seq, V, H, eos, max_len
    int n = hdr[0], V = hdr[1], H = hdr[2], eos = hdr[3], max_len = hdr[4];
    auto logits = take<float>(in, (size_t)n * V);
    auto lengths = take<int>(in, n);
    auto emb = take<float>(in, (size_t)V * H);
    std::fclose(in);
    std::vector<int> tokens(n, -2);
    std::vector<float> x_next((size_t)n * H, 0.0f);
    blockDim.x = BLOCK;
    gridDim.x = n;
    for (int b = 0; b < n; ++b) {                    // blocks one after another
        std::barrier<> bar(BLOCK);
        block_barrier = &bar;
        std::vector<std::thread> threads;
        for (int t = 0; t < BLOCK; ++t)
            threads.emplace_back([&, t, b] {
                threadIdx.x = t;
                blockIdx.x = b;
                argmax_decode(logits.data(), lengths.data(), tokens.data(), V, eos, max_len,
                              emb.data(), x_next.data(), H);
            });
        for (auto& th : threads) th.join();
    }
    std::FILE* out = std::fopen(argv[2], "wb");
    std::fwrite(tokens.data(), sizeof(int), n, out);
    std::fwrite(lengths.data(), sizeof(int), n, out);
    std::fwrite(x_next.data(), sizeof(float), x_next.size(), out);
    std::fclose(out);
    return 0;
}
"""


@pytest.fixture(scope="module")
def host_argmax(tmp_path_factory):
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler (g++ or clang++) to build the emulation harness")
    d = tmp_path_factory.mktemp("cu_host")
    (d / "harness.cpp").write_text(HARNESS)
    exe = d / "harness"
    # no -ffast-math: the kernel's NaN tests (v != v) must keep their IEEE meaning, as nvcc
    # keeps them without --use_fast_math (llamanb.cuda.compile passes only -O3)
    r = subprocess.run([cxx, "-std=c++20", "-O1", "-pthread", "-I", str(SOURCE.parent),
                        str(d / "harness.cpp"), "-o", str(exe)], capture_output=True, text=True)
    if r.returncode != 0 and "barrier" in r.stderr:
        pytest.skip(f"{cxx} lacks C++20 <barrier>: {r.stderr.strip().splitlines()[0]}")
    assert r.returncode == 0, r.stderr[-3000:]

    def run(logits, lengths, emb, eos, max_len):
        n, V = logits.shape
        H = emb.shape[1]
        inp, out = d / "in.bin", d / "out.bin"
        with open(inp, "wb") as f:
            np.array([n, V, H, eos, max_len], np.int32).tofile(f)
            np.ascontiguousarray(logits, np.float32).tofile(f)
            np.ascontiguousarray(lengths, np.int32).tofile(f)
            np.ascontiguousarray(emb, np.float32).tofile(f)
        r = subprocess.run([str(exe), str(inp), str(out)], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        raw = np.fromfile(out, dtype=np.uint8)
        tokens = raw[:4 * n].view(np.int32)
        new_len = raw[4 * n:8 * n].view(np.int32)
        x_next = raw[8 * n:].view(np.float32).reshape(n, H)
        return tokens, new_len, x_next
    return run


def test_cu_argmax_decode_rows_without_a_finite_maximum(host_argmax):
    """The same rows as the numba kernel's test (tests/cuda/test_cuda_kernels.py): all NaN, all
    -inf, a NaN among finite values, -inf but one, +inf twice -> np.argmax's choice each time.
    V = 300 > 256 threads, so some threads see two entries and some rows' maxima sit in the
    second stride."""
    from test_cuda_kernels import argmax_edge_logits

    V, H = 300, 6
    logits = argmax_edge_logits(V)
    logits[3, 17] = -np.inf
    logits[3, 280] = 0.5                              # found by thread 24 on its second entry
    emb = np.random.default_rng(8).standard_normal((V, H)).astype(np.float32)
    tokens, lengths, x_next = host_argmax(logits, np.full(5, 3, np.int32), emb, eos=2,
                                          max_len=64)
    want = [int(np.argmax(row)) for row in logits]
    assert want == [0, 0, 29, 280, 4]
    assert tokens.tolist() == want
    assert lengths.tolist() == [4] * 5
    assert np.array_equal(x_next, emb[want])


def test_cu_argmax_decode_bookkeeping(host_argmax):
    """As the numba kernel's bookkeeping test: empty row, ordinary, EOS chosen, max_len reached,
    a three-way tie across threads (lowest id)."""
    V, H, eos, max_len = 37, 5, 7, 10
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((5, V)).astype(np.float32)
    logits[2, eos] = 9.0
    logits[4, [3, 20, 35]] = 9.0
    emb = rng.standard_normal((V, H)).astype(np.float32)
    tokens, lengths, x_next = host_argmax(logits, np.array([0, 4, 5, 9, 2], np.int32), emb,
                                          eos, max_len)
    want = [-1] + [int(np.argmax(logits[r])) for r in range(1, 5)]
    assert tokens.tolist() == want and want[4] == 3
    assert lengths.tolist() == [0, 5, 0, 0, 3]
    assert np.array_equal(x_next[[1, 4]], emb[[want[1], want[4]]])
    assert not x_next[[0, 2, 3]].any()
