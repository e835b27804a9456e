// The thread pool of pool.h. One job at a time (callers are serialised), published as
// (generation << 32 | chunks left) in one atomic word. A thread claims the chunk `left - 1` by a
// compare-and-swap that also checks the generation, so a helper that read an old job can never
// take a chunk of a newer one; and since the caller starts writing the next job only when every
// chunk of this one is claimed and finished, a successful claim proves the job fields it read
// belong to that generation.
#include "pool.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <sched.h>

namespace llamanb_cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

struct Pool {
    std::atomic<uint64_t> next{0};              // generation << 32 | chunks not yet claimed
    std::atomic<uint32_t> signal{0};            // bumped for every job: idle helpers wait on it
    std::atomic<int64_t> done{0};               // chunks of the current job finished
    std::atomic<ChunkFn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    uint32_t gen = 0;                           // the caller's, under run_lock
    int threads = 1;
    std::mutex run_lock;

    void work(uint32_t g, ChunkFn f, void* c) {
        uint64_t v = next.load(std::memory_order_acquire);
        while (uint32_t(v >> 32) == g && (v & 0xffffffffu) != 0) {
            if (!next.compare_exchange_weak(v, v - 1, std::memory_order_acq_rel,
                                            std::memory_order_acquire))
                continue;
            f(c, int64_t(v & 0xffffffffu) - 1);
            done.fetch_add(1, std::memory_order_acq_rel);
            v = next.load(std::memory_order_acquire);
        }
    }

    void helper() {
        uint32_t seen = signal.load(std::memory_order_acquire);
        for (;;) {
            for (int spin = 0; spin < 2000 && signal.load(std::memory_order_acquire) == seen; ++spin)
                cpu_relax();                    // jobs of a decode step come microseconds apart
            signal.wait(seen, std::memory_order_acquire);
            seen = signal.load(std::memory_order_acquire);
            const uint64_t v = next.load(std::memory_order_acquire);
            work(uint32_t(v >> 32), fn.load(std::memory_order_acquire),
                 ctx.load(std::memory_order_acquire));
        }
    }

    void run(int64_t n, ChunkFn f, void* c) {
        std::lock_guard<std::mutex> lock(run_lock);
        gen += 1;
        fn.store(f, std::memory_order_relaxed);
        ctx.store(c, std::memory_order_relaxed);
        done.store(0, std::memory_order_relaxed);
        next.store((uint64_t(gen) << 32) | uint64_t(n), std::memory_order_release);
        if (threads > 1) {
            signal.fetch_add(1, std::memory_order_release);
            signal.notify_all();
        }
        work(gen, f, c);                                    // the caller works too
        for (int spin = 0; done.load(std::memory_order_acquire) != n; ++spin) {
            if (spin < 20000) cpu_relax();                  // a helper finishing its last chunk
            else std::this_thread::yield();
        }
    }
};

Pool* the_pool() {
    static Pool* pool = [] {
        auto* p = new Pool();                               // never freed: helpers outlive main
        int n = 0;
        if (const char* s = std::getenv("LLAMANB_THREADS")) n = std::atoi(s);
        if (n <= 0) {
            cpu_set_t set;
            n = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set)
                                                            : int(std::thread::hardware_concurrency());
        }
        p->threads = n < 1 ? 1 : n;
        for (int i = 1; i < p->threads; ++i) std::thread([p] { p->helper(); }).detach();
        return p;
    }();
    return pool;
}

}  // namespace

void parallel_run(int64_t n, ChunkFn fn, void* ctx) { the_pool()->run(n, fn, ctx); }
int pool_threads() { return the_pool()->threads; }

}  // namespace llamanb_cpu

extern "C" int llamanb_cpu_threads() { return llamanb_cpu::pool_threads(); }
