# ---
# jupyter:
#   jupytext:
#     notebook_metadata_filter: llamanb
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
#   llamanb:
#     builds: 'this CPU''s kernels: the roofline, packed panels, register tiles, bf16,
#       threads'
#     modules:
#     - llamanb.cpu
#     part: I
# ---

# %% [markdown]
# # 11 · The CPU you have: streaming the weights
#
# **What you will build.** Every reader owns one accelerator: the CPU this notebook runs on. The
# `cpu` backend (`llamanb/cpu/backend.py`, C++ in `kernels/cpu/`) runs the same Llama block as the
# numpy engine, in a few hundred lines of C++ compiled for this machine at first use. This chapter
# takes its matrix products apart around one idea: **a decode step reads every weight once, so its
# speed is the speed at which memory delivers the weights.** You will count the bytes a token
# reads and measure the bandwidth (the roofline); pack the weights into *panels* that one pass
# streams; see how *register tiles* keep the arithmetic out of the way, how bfloat16 weights halve
# the bytes, and how threads share a step without changing a bit. Chapter 11b goes on to fewer
# bytes still: the GGUF's own 4-bit blocks, decoded in registers, then met in integers -- one
# block's integer dot product worked by hand, `vpmaddubsw` by `vpmaddubsw`.
#
# Each step is derived in numpy, then asserted against the kernels; this machine's timings sit in
# cells of their own.

# %% [markdown]
# ## 0. Setup
#
# `cpu_kernels.load()` builds `kernels/cpu/*.cc` once with `g++ -O3 -march=native`, cached by a
# hash of the sources, flags and compiler (other targets: `LLAMANB_CPU_MARCH`, see
# docs/hardware/cpu.md).

# %%
import warnings

warnings.filterwarnings("ignore")

import hashlib, os, re, subprocess, sys, time
from math import factorial
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, load_model
from llamanb.cpu import kernels as cpu_kernels
from llamanb.bench.runners import DECODE_STEPS, decode_kv_positions

model = load_model()
cfg, W = model.config, model.weights
k = cpu_kernels.load()
print(f"{cfg.name}: {cfg.n_layers} layers, hidden {cfg.hidden}, FFN {cfg.ffn}, vocab {cfg.vocab}")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"this build: flavour {k.flavour}, instruction sets {', '.join(k.isa)};\n"
      f"{k.vector_width} float32 lanes a vector, panels of {k.panel_width} columns, "
      f"{k.threads} threads")

# %% [markdown]
# ## 1. Decode is a memory-bandwidth problem
#
# A decode step multiplies one activation row by every weight matrix: each weight is read once
# and used for one multiply-add, 2 FLOPs. So the step's *arithmetic intensity* is 2 FLOPs per
# weight, 0.5 FLOP per byte in float32 -- while a CPU core does tens of FLOPs in the time memory
# delivers a byte. The step's time is the time to read its bytes, and the format the weights are
# stored in is the speed limit:
#
# $$ \text{tokens/s} \;\le\; \frac{\text{memory bandwidth (bytes/s)}}{\text{bytes read per token}} $$
#
# The bytes per token, counted from the model's matrices (the LM head is the tied embedding, read
# whole; the embedding lookup reads one row), beside the same count in closed form from the config:

# %%
mats = [m for lw in W.layers for m in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down)] + [W.lm_head]
n_weights = sum(m.size for m in mats)
per_layer = cfg.hidden * (cfg.q_dim + 2 * cfg.kv_dim) + cfg.q_dim * cfg.hidden + 3 * cfg.hidden * cfg.ffn
assert n_weights == cfg.n_layers * per_layer + cfg.vocab * cfg.hidden
per_weight = {"float32": 4, "bf16": 2}
per_token = {f: n_weights * b for f, b in per_weight.items()}
print(f"matrix weights read per decode step: {n_weights / 1e6:.2f} M")
for f, b in per_token.items():
    print(f"  {f:<8} {per_weight[f]} bytes a weight -> {b / 1e6:6.1f} MB a token")
kv_pos, bench_ctx = cfg.kv_bytes_per_token("fp32"), decode_kv_positions(DECODE_STEPS)  # 2 L N_kv d floats
assert kv_pos == 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4
print(f"plus the float32 KV cache: {kv_pos / 1e3:.2f} KB a position; at the bench's mean context "
      f"({bench_ctx} positions) {kv_pos * bench_ctx / 1e6:.2f} MB a token")

# %% [markdown]
# The bandwidth is measured, not looked up: `read_sum` streams an array much larger than the
# caches through every thread of the kernels' pool (four independent sums a thread, so the reads,
# not the additions, set the pace). The best of a few passes over 256 MB, and the roofline it sets:

# %%
# NBVAL_IGNORE_OUTPUT
def read_bandwidth(passes=4):                # bytes a second: the best pass of read_sum
    probe, rates = np.ones(64 << 20, np.float32), []         # 256 MB, every page written
    for _ in range(passes):
        t0 = time.perf_counter()
        k.read_sum(probe)
        rates.append(probe.nbytes / (time.perf_counter() - t0))
    return max(rates)


best = read_bandwidth()
print(f"streaming read bandwidth here: {best / 1e9:.1f} GB/s")
for f, b in per_token.items():
    print(f"  roofline for {f:<8}: {best / b:7.1f} tokens/s")

# %% [markdown]
# ## 2. Panels: one pass over the weights
#
# `x @ W.T` with `W [N, K]` stored row by row would have each output's dot product run along a
# row and end in a horizontal sum across vector lanes. The kernels instead pack `W` once, at load,
# into **panels** of `NP = 2 x (vector width)` output columns, stored *k-major*:
#
# $$ P[p, k, j] = W[p\,NP + j,\; k] \qquad (\text{zeros past } N) $$
#
# Row `k` of a panel is two vector loads; the activation `x[i, k]` is broadcast to every lane and
# multiplied into one accumulator lane per output column. Each output is then one chain of
# fused multiply-adds over `k = 0, 1, ..., K-1` in one lane -- an order fixed by `K` alone, so a
# row's result never depends on how many rows share the step (the batching chapter relies on
# that). In numpy the packing is a pad, a reshape and a transpose:

# %%
def panels(w: np.ndarray, NP: int) -> np.ndarray:
    N, K = w.shape
    P = -(-N // NP)
    padded = np.zeros((P * NP, K), w.dtype)
    padded[:N] = w
    return padded.reshape(P, NP, K).transpose(0, 2, 1)          # [P, K, NP]


w_small = np.random.default_rng(0).standard_normal((45, 24)).astype(np.float32)
assert np.array_equal(panels(w_small, k.panel_width), k.pack(w_small).data)   # bit for bit
print("numpy's panels are the kernels' packing of a 45 x 24 matrix, bit for bit")

# %% [markdown]
# The order the kernel reads one matrix's weights, drawn for panels of 4 columns (the real ones
# are 16 or 32 wide): memory addresses run down each panel, `k` by `k`, one short row at a time.

# %%
N_demo, K_demo, NP_demo = 10, 6, 4
order = np.zeros((N_demo, K_demo), int)
for p in range(-(-N_demo // NP_demo)):
    for kk in range(K_demo):
        for j in range(NP_demo):
            if p * NP_demo + j < N_demo:
                order[p * NP_demo + j, kk] = p * K_demo * NP_demo + kk * NP_demo + j
fig, ax = plt.subplots(figsize=(5.2, 3.6), dpi=110)
ax.imshow(order, cmap="viridis")
for (r, c), v in np.ndenumerate(order):
    ax.text(c, r, v, ha="center", va="center", fontsize=9, color="w" if v < 45 else "k")
for b in range(1, -(-N_demo // NP_demo)):
    ax.axhline(b * NP_demo - 0.5, color="w", lw=2)
ax.set_xlabel("k (input)")
ax.set_ylabel("output column n")
ax.set_title("address of W[n, k] in the packed panels (NP = 4)", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# The panels of all the matrices are carved from one arena of 2 MiB pages (`cpu_kernels.Arena`,
# `MADV_HUGEPAGE`), so the stream does not stop for a TLB miss every 4 KiB (what that bought,
# measured: docs/hardware/cpu.md).
#
# ## 3. Register tiles, and what the compiler does with them
#
# The micro-kernel computes a tile of `MR` rows x `NPAN` panels: `2 MR NPAN` accumulator vectors
# live in registers for the whole of `K`, and each `k` step loads the panels' `k`-th rows (two
# vectors a panel) and broadcasts one `x[i, k]` per row. The source is portable C++ with GCC's
# vector types; here is one `k` step of it (`micro_float` runs it for every `k`):

# %%
src = Path(cpu_kernels.KERNELS_DIR / "matmul.cc").read_text().splitlines()
start = next(i for i, s in enumerate(src) if "inline void fma_k(" in s) - 1   # its template line
end = next(i for i in range(start, len(src)) if src[i] == "}")             # the function's brace
print("\n".join(src[start:end + 1]))

# %% [markdown]
# Two register files decide the tile shapes. AVX2 has 16 vector registers and two FMA units with
# a latency of about 4 cycles, so about 8 independent FMA chains keep both busy; AVX-512 has 32.
# The count a tile needs during one `k` step (accumulators, one row of weights per panel, the
# broadcast) is exercise 11.2; the tiles the kernels use:

# %%
def regs(mr, npan):
    return 2 * mr * npan + 2 * npan + 1


TILES = (((1, 4), "decode, 1 row"), ((1, 2), "decode, 1 row, chunk of 2 panels"),
         ((2, 2), "decode, 2 rows"), ((4, 1), "decode, 4 rows"), ((6, 1), "prefill (blocks of 48 rows)"))
print(f"{'tile':<14}{'accumulators':>13}{'registers':>11}   use")
for (mr, npan), use in TILES:
    print(f"{mr} x {npan} panels  {2 * mr * npan:>10}{regs(mr, npan):>11}   {use}")
AVX2_REGISTERS = 16
over = [t for t, _ in TILES if regs(*t) > AVX2_REGISTERS]
assert over == [(1, 4)] and regs(1, 4) == AVX2_REGISTERS + 1

# %% [markdown]
# Only the one-row tile counts more than AVX2's 16 -- one more -- if the compiler kept a whole `k`
# step of weights live; with one row each weight vector feeds one FMA and is dead, so it need not.
# (The one-row tile also issues no software prefetch, as the comment in the loop says.) What the
# compiler made of the source is in the library itself; `objdump` shows it (the instruction names
# depend on the target: `ymm` registers are AVX2's 256-bit ones, `zmm` AVX-512's):

# %%
# NBVAL_IGNORE_OUTPUT
try:
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(k.built.path)],
                         capture_output=True, text=True, timeout=60).stdout
    ops = [ln.split("\t")[-1].split()[0] for ln in dis.splitlines() if ln.count("\t") >= 1
           and ln.strip() and ":" in ln.split("\t")[0]]
    fma = sum(o.startswith("vfmadd") for o in ops)
    print(f"{len(ops)} instructions; {fma} fused multiply-adds; ymm in "
          f"{sum('ymm' in ln for ln in dis.splitlines())} lines, zmm in "
          f"{sum('zmm' in ln for ln in dis.splitlines())}")
except (OSError, subprocess.SubprocessError) as e:
    print("objdump not available:", e)

# %% [markdown]
# ## 4. bfloat16: half the bytes, widened in registers
#
# A bfloat16 is the top half of a float32. Widening it is exact: put the 16 bits in the high half
# and zeros below (`vec.h` does it with one unpack against a zero register). The packed bf16
# panels therefore read half the bytes and multiply *exactly the rounded weights* in float32:

# %%
import ml_dtypes

w32 = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
bits = w32.astype(ml_dtypes.bfloat16).view(np.uint16)            # round to nearest even
widened = (bits.astype(np.uint32) << 16).view(np.float32)
assert np.array_equal(widened, bits.view(ml_dtypes.bfloat16).astype(np.float32))
print("a shift by 16 bits widens 1000 bfloat16s exactly as ml_dtypes converts them")

# %% [markdown]
# CPUs with AVX512-BF16 have `vdpbf16ps`: each float32 lane adds the products of a *pair* of
# bfloat16s, `acc + a[2i+1] b[2i+1] + a[2i] b[2i]`, without widening. It sums in pairs, odd `k`
# first -- a different order from one FMA chain in `k` order, but both obey the same float32 bound
# ($\gamma_K \sum |x_k w_k|$, $\gamma_K = K u / (1 - K u)$), on float64-exact products. So the
# kernels sum a bf16 product in the pairs order on *every* build (the panels store their rows
# swapped in pairs), and an AVX2 build and an AVX512-BF16 build give the same bits:

# %%
rng = np.random.default_rng(2)
K_ = 576
x_bf = rng.standard_normal(K_).astype(ml_dtypes.bfloat16).astype(np.float32)
w_bf = rng.standard_normal(K_).astype(ml_dtypes.bfloat16).astype(np.float32)
exact = float(np.dot(x_bf.astype(np.float64), w_bf.astype(np.float64)))
chain = np.float32(0)
for i in range(K_):                                    # widened: one FMA chain in k order
    chain = np.float32(float(chain) + float(x_bf[i]) * float(w_bf[i]))
pairs = np.float32(0)
for i in range(0, K_, 2):                              # vdpbf16ps: odd product, then even
    pairs = np.float32(float(pairs) + float(x_bf[i + 1]) * float(w_bf[i + 1]))
    pairs = np.float32(float(pairs) + float(x_bf[i]) * float(w_bf[i]))
u = 2.0 ** -24
bound = K_ * u / (1 - K_ * u) * float(np.abs(x_bf.astype(np.float64) * w_bf).sum())
assert abs(chain - exact) <= bound and abs(pairs - exact) <= bound
mine = k.matmul(x_bf[None], k.pack(w_bf[None], bf16=True), np.zeros((1, 1), np.float32))[0, 0]
assert mine == pairs                                   # the kernels' bf16 product, bit for bit
print(f"k order and pairs both within the float32 bound {bound:.2e} of the exact product;\n"
      f"the kernels' bf16 product is the pairs order's bits")

# %% [markdown]
# Which of the two this CPU runs natively (for `bench` to weigh; the bits are the same):

# %%
# NBVAL_IGNORE_OUTPUT
flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
print({f: f in flags.split() for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16")})

# %% [markdown]
# ## 5. Threads and their hand-offs
#
# `kernels/cpu/pool.h` keeps one thread per core. A parallel loop publishes a count of chunks;
# every thread, the caller included, claims the next chunk from a shared counter until none is
# left, and the caller waits only for chunks already claimed. A helper the OS has not scheduled
# yet simply finds no work: on a busy machine the step slows down instead of stalling at a
# barrier. A decode matmul gives each thread a run of adjacent panels, so that each reads one
# ascending stream of memory and what the prefetchers fetch ahead is its own next chunk. A run is
# cut into chunks of 4, 2 or 1 panels, so that each thread gets at least 8, the last two single
# panels; a thread whose run is done takes chunks from the back of another's, so the threads
# finish together (the rule in `matmul.cc`'s `decode_chunks`, for this model's matrices):

# %%
def chunking(panels, T):
    per = 4 if panels >= 32 * T else 2 if panels >= 16 * T else 1
    R = min(T, panels)                                       # one run of panels per thread
    chunks = 0
    for h in range(R):
        n = (h + 1) * panels // R - h * panels // R
        tail = 0 if per == 1 else min(2, n)                  # single panels at the run's end
        chunks += -(-(n - tail) // per) + tail
    return per, chunks


shapes = {"wqkv": W.layers[0].wqkv.shape[0], "wo": W.layers[0].wo.shape[0],
          "gate_up": W.layers[0].w_gate_up.shape[0], "down": W.layers[0].w_down.shape[0],
          "lm_head": W.lm_head.shape[0]}
print("panels of 16 columns (AVX2's width):")
print(f"{'matrix':<9}{'panels':>13}" + "".join(f"{f'T={T}':>15}" for T in (2, 8, 16)))
for n, N in shapes.items():
    P = -(-N // 16)
    print(f"{n:<9}{P:>13}" + "".join(f"{'%d x %d' % chunking(P, T)[::-1]:>15}" for T in (2, 8, 16)))
print("(chunks x panels per chunk)")

# %% [markdown]
# Each output element belongs to exactly one chunk and is one FMA chain in one lane, so the thread
# count can never change a result. Checked: the same product in a process with one thread
# (`LLAMANB_THREADS=1`) and in this one.

# %%
code = ("import hashlib, numpy as np; from llamanb.cpu import kernels as c; "
        "k = c.load(); r = np.random.default_rng(3); "
        "w = r.standard_normal((1000, 576)).astype(np.float32); "
        "x = r.standard_normal((3, 576)).astype(np.float32); "
        "print(hashlib.sha256(k.matmul(x, k.pack(w), np.empty((3, 1000), np.float32))"
        ".tobytes()).hexdigest())")
here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
one = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                     env={**os.environ, "LLAMANB_THREADS": "1"})
assert here.stdout.strip() == one.stdout.strip() != "", (here.stderr, one.stderr)
print("one thread and all threads: the same sha256 of a 3 x 1000 product")

# %% [markdown]
# ## 6. Measured: decode against its roofline
#
# The float32 and bf16 engines of the `cpu` backend give the numpy engine's first token on a chat
# prompt (float32: its logits' argmax; bf16 rounds activations too, and must still agree here):

# %%
ids = model.tokenizer.encode_prompt("What is the capital of France?", chat=True)
engines = {dt: Engine(model, "cpu", dtype=dt) for dt in ("float32", "bf16")}
logits = {dt: e.prefill(ids, e.new_cache(len(ids) + 16)) for dt, e in engines.items()}
numpy_engine = Engine(model)
ref = numpy_engine.prefill(ids, numpy_engine.new_cache(len(ids) + 16))
for dt, e in engines.items():
    assert int(np.argmax(logits[dt])) == int(np.argmax(ref)), dt
    print(f"  {dt:<8} weights in memory {e.backend.weight_bytes / 1e6:6.1f} MB, next token "
          f"{model.tokenizer.decode([int(np.argmax(logits[dt]))])!r}, as numpy's")

# %% [markdown]
# Sixteen greedy decode steps of each, beside the roofline of section 1 (measured bandwidth / the
# bytes each engine reads a token). This machine's numbers, in a cell of their own; on a shared
# machine they only show a direction.

# %%
# NBVAL_IGNORE_OUTPUT
best = max(best, read_bandwidth())               # probed again: a VM's bandwidth drifts
rates, ctx = {}, len(ids) + 8.5                  # the 16 steps attend over len(ids) + 1 .. + 16
for dt, e in engines.items():
    cache = e.new_cache(len(ids) + 20)
    tok = int(np.argmax(e.prefill(ids, cache)))
    t0 = time.perf_counter()
    for _ in range(16):
        tok = int(np.argmax(e.decode(tok, cache)))
    rates[dt] = 16 / (time.perf_counter() - t0)
    roof = best / (e.backend.weight_bytes + kv_pos * ctx)
    print(f"{dt:<8} {rates[dt]:6.1f} tokens/s, roofline {roof:6.1f}: {rates[dt] / roof:4.0%}")
fig, ax = plt.subplots(figsize=(6, 2.8), dpi=110)
xs = np.arange(len(rates))
ax.bar(xs - 0.2, [best / (engines[d].backend.weight_bytes + kv_pos * ctx) for d in rates], 0.4,
       label="roofline", color="#cccccc")
ax.bar(xs + 0.2, list(rates.values()), 0.4, label="measured", color="#4477aa")
ax.set_xticks(xs, list(rates), fontsize=9)
ax.set_ylabel("decode tokens/s", fontsize=9)
ax.legend(fontsize=9)
ax.set_title("decode on this machine vs bandwidth / bytes a token", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# > **Going deeper: llama.cpp beside it.** The comparison with llama.cpp is the benchmark's job:
# > `python -m llamanb bench --backend cpu` runs the numpy engine, the `cpu` backend and llama.cpp
# > (llama-cpp-python built for this CPU in its own venv: `--peer-python`) on GGUFs of the same
# > weights at each precision, and prints prefill and decode rates, peak memory and each ratio.
# > Run it on a quiet machine; its table is the measurement (docs/hardware/cpu.md, docs/performance.md).
#
# > **Going deeper: the exponential, a polynomial in registers.** Decode streams weights; prefill
# > also spends time outside the matrix products, in softmax's `e^x` of every causal score and in
# > SiLU's `e^-x` of every gate value. How many, in a 512-token prefill of this model:

# %%
S = 512
softmax_exps = cfg.n_layers * cfg.n_heads * S * (S + 1) // 2      # one per causal score
silu_exps = cfg.n_layers * S * cfg.ffn                             # one per gate value
print(f"softmax {softmax_exps / 1e6:.1f} M + SiLU {silu_exps / 1e6:.1f} M = "
      f"{(softmax_exps + silu_exps) / 1e6:.1f} M exponentials")
assert round(softmax_exps / 1e6) == 35 and round((softmax_exps + silu_exps) / 1e6) == 59

# %% [markdown]
# > A libm call for each was a fifth of that prefill's attention time (measured with `perf`), so
# > the kernels compute `e^x` a vector at a time (`exp_vf` in `kernels/cpu/vec.h`): write
# > `x = n ln2 + r` with `n` the nearest integer to `x / ln2`, so `|r| <= ln2 / 2`; take `e^r` from
# > a polynomial (Cephes' `expf` coefficients: a degree-5 Horner `p`, then `e^r = p r^2 + r + 1`);
# > and put `2^n` into the exponent bits. The coefficients read from the source, the polynomial's
# > degree, and the same steps in numpy float32:

# %%
vec_h = (cpu_kernels.KERNELS_DIR / "vec.h").read_text()
body = vec_h[vec_h.index("static inline vf exp_vf("):]
body = body[:body.index("\n}\n")]
horner = [float(c) for c in re.findall(r"p = (?:bcast\(|p \* r \+ )([0-9.e+-]+)f", body)]
assert len(horner) == 6 and "p = p * (r * r) + r + 1.0f;" in body
poly = np.polynomial.Polynomial([1.0, 1.0] + horner[::-1])          # 1 + r + r^2 p(r)
assert poly.degree() == 7
taylor = [1 / factorial(n) for n in range(8)]
assert np.allclose(poly.coef, taylor, rtol=1e-2)                    # close to e^r's own series
print(f"exp_vf's e^r: degree {poly.degree()}; coefficient / (1/n!) from "
      f"{(poly.coef / taylor).min():.4f} to {(poly.coef / taylor).max():.4f}")


def exp_numpy(x):
    x = np.asarray(x, np.float32)
    n = np.rint(x * np.float32(1 / np.log(2)))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)   # ln2 in two parts
    p = np.float32(horner[0])
    for c in horner[1:]:
        p = p * r + np.float32(c)
    # 2^n exactly: numpy's AVX-512 np.exp2 is not (2.6 ulp here with it, on a Zen 4)
    return np.ldexp(p * (r * r) + r + 1, n.astype(np.int32))


xs = np.linspace(-87, 88, 200_001, dtype=np.float32)
truth = np.exp(xs.astype(np.float64))
ulps = lambda y: np.abs(y - truth) / np.spacing(truth.astype(np.float32))   # noqa: E731
assert ulps(exp_numpy(xs)).max() <= 2 and ulps(k.exp(xs)).max() <= 2
print("numpy's steps and the kernels' exp_vf: within 2 ulp of e^x over [-87, 88] "
      "(the bound the tests hold exp_vf to)")

# %% [markdown]
# ## Exercises
#
# Two functions to write, each checked against the package: replace `raise NotImplementedError`,
# run the cell, then the check below it (one line: `passed`, the first case that differs with a
# hint, or `not attempted yet`). Solutions: `solutions/11_*.py`.

# %%
from llamanb.course.exercises import ch11

# %% [markdown]
# ### 11.1 Bytes a token
#
# Write `weight_bytes(cfg, fmt)`: the bytes of matrix weights one decode step reads, for `fmt` in
# `"float32"`, `"bf16"`, `"q8_0"`, `"q4_1"`, for any `LlamaConfig` (checked on every preset).
# *Hint:* section 1 -- which matrices; and a GGUF block of 32 weights carries 2-byte scales
# (Q8_0: one, `d`; Q4_1: two, `d` and `m`; chapter 11b).

# %%
def weight_bytes(cfg, fmt: str) -> float:
    raise NotImplementedError  # your code here


# %%
ch11.weight_bytes(weight_bytes)

# %% [markdown]
# ### 11.2 A tile's registers
#
# Write `tile_registers(mr, npan)`: the vector registers a tile of `mr` rows x `npan` panels holds
# during one `k` step of the micro-kernel of section 3. *Hint:* a panel is two vectors wide.

# %%
def tile_registers(mr: int, npan: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch11.tile_registers(tile_registers)
