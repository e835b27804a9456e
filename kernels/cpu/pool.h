// A small thread pool for the cpu kernels: parallel_for(n, fn) runs fn(i) for i in 0..n-1.
//
// The calling thread works too, and it never waits for a thread that has not started: chunks are
// claimed one at a time from a shared counter, and the caller waits only for chunks already
// claimed. A helper the OS has not scheduled yet (a busy, shared machine) just finds no work
// left. A fork-join pool (OpenMP) instead waits at every barrier for every thread: on a 2-core
// machine shared with other jobs, that turned each of a decode step's ~150 parallel loops into a
// wait for the scheduler (10x slower decode, measured).
//
// Which thread runs a chunk never changes what it computes: each output element belongs to one
// chunk, so results do not depend on the thread count or on timing.
//
//   LLAMANB_THREADS   threads in all, the caller included (default: the cores this process may use)
#pragma once
#include <cstdint>

namespace llamanb_cpu {

using ChunkFn = void (*)(void* ctx, int64_t chunk);

void parallel_run(int64_t n, ChunkFn fn, void* ctx);
int pool_threads();

template <typename F>
inline void parallel_for(int64_t n, F&& f) {
    if (n <= 0) return;
    if (n == 1) {
        f(int64_t(0));
        return;
    }
    parallel_run(n, [](void* c, int64_t i) { (*static_cast<F*>(c))(i); }, (void*)&f);
}

}  // namespace llamanb_cpu
