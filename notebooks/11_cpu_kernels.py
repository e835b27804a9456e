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
#       Q4_1'
#     modules:
#     - llamanb.cpu
#     part: I
# ---

# %% [markdown]
# # 11 · The CPU you have: kernels for decode and prefill
#
# **What you will build.** Every reader owns one accelerator: the CPU this notebook runs on. The
# `cpu` backend (`llamanb/cpu/backend.py`, C++ in `kernels/cpu/`) runs the same Llama block as
# the numpy engine, in a few hundred lines of C++ that the course compiles for this machine at
# first use. This chapter takes it apart: why a decode step is bound by memory bandwidth, not by
# arithmetic (and how to measure the bound); how weights are packed into *panels* so that one
# pass streams them; what a *register tile* is and what the compiler makes of it; how bfloat16
# weights are widened in registers, and what CPUs with native bf16 dot products do instead; how a
# GGUF's own 4-bit blocks are decoded inside the matrix product, never expanded in memory; and how
# the threads share a step without waiting on each other. Each step is derived in numpy or shown
# in the C++, then checked against the kernels; timings, this machine's, sit in cells of their own.

# %% [markdown]
# ## 0. Setup
#
# `cpu_kernels.load()` builds `kernels/cpu/*.cc` once with `g++ -O3 -march=native`, cached by a
# hash of the sources, flags and compiler. `LLAMANB_CPU_MARCH` picks another target: `portable`
# (the compiler's default), `x86-64-v3` (AVX2 on an AVX-512 machine) or `avx512-simde` (AVX-512's
# code emulated on AVX2 by SIMDe: its results, not its speed; `__AVX512F__` in `kernels/cpu/vec.h`).

# %%
import warnings

warnings.filterwarnings("ignore")

import hashlib, subprocess, sys, time
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
print(f"this build: flavour {k.flavour}, instruction sets {', '.join(k.isa)}; "
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
# The bytes per token, counted from the model (the LM head is the tied embedding, read whole; the
# embedding lookup reads one row), and the cached keys and values every step reads again:

# %%
mats = [m for lw in W.layers for m in (lw.wqkv, lw.wo, lw.w_gate_up, lw.w_down)] + [W.lm_head]
n_weights = sum(m.size for m in mats)
per_weight = {"float32": 4, "bf16": 2, "q8_0": 34 / 32, "q4_1": 20 / 32}
per_token = {f: n_weights * b for f, b in per_weight.items()}
print(f"matrix weights read per decode step: {n_weights / 1e6:.2f} M")
for f, b in per_token.items():
    print(f"  {f:<8} {per_weight[f]:.4f} bytes a weight -> {b / 1e6:6.1f} MB a token")
kv_pos, bench_ctx = cfg.kv_bytes_per_token("fp32"), decode_kv_positions(DECODE_STEPS)  # 2 L N_kv d floats
print(f"plus the float32 KV cache: {kv_pos / 1e3:.2f} KB a position; at the bench's mean context "
      f"({bench_ctx} positions) {kv_pos * bench_ctx / 1e6:.2f} MB a token")

# %% [markdown]
# The shipped file is Q4_1 for every layer matrix and Q8_0 for the embedding: llama.cpp runs it
# as it is, reading what the file holds. Counted from the file's own header:

# %%
from llamanb.io.gguf import hf_name, tensor_index
from llamanb.io.store import default_model_path

index = tensor_index(default_model_path())
stored = {n: (q, nbytes) for n, (q, dims, off, nbytes) in index.items() if len(dims) == 2}
kinds = sorted({q for q, _ in stored.values()})
print("matrix formats in the GGUF:", ", ".join(f"{sum(q == t for q, _ in stored.values())} x {t}"
                                               for t in kinds))
gguf_bytes = sum(b for _, b in stored.values())
print(f"bytes a token in the file's own formats: {gguf_bytes / 1e6:.1f} MB "
      f"({per_token['float32'] / gguf_bytes:.2f}x fewer than float32)")

# %% [markdown]
# The bandwidth is measured, not looked up: `read_sum` streams an array much larger than the
# caches through every thread of the kernels' pool (four independent sums a thread, so the reads,
# not the additions, set the pace). The best of a few passes over 256 MB:

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
ours = panels(w_small, k.panel_width)
print("numpy's panels equal the kernels' packing, bit for bit:",
      np.array_equal(ours, k.pack(w_small).data))

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
    ax.text(c, r, v, ha="center", va="center", fontsize=7, color="w" if v < 45 else "k")
for b in range(1, -(-N_demo // NP_demo)):
    ax.axhline(b * NP_demo - 0.5, color="w", lw=2)
ax.set_xlabel("k (input)")
ax.set_ylabel("output column n")
ax.set_title("address of W[n, k] in the packed panels (NP = 4)", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# The panels of all 121 matrices are carved from one arena of 2 MiB pages (`cpu_kernels.Arena`,
# `MADV_HUGEPAGE`): with 4 KiB pages a float32 token's 538 MB cross 131,000 page boundaries, each
# a TLB miss in the middle of the stream (measured: decode 1.10-1.16x faster on huge pages).
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


print(f"{'tile':<14}{'accumulators':>13}{'registers':>11}   use")
for (mr, npan), use in (((1, 4), "decode, 1 row"), ((1, 2), "decode, 1 row, chunk of 2 panels"),
                        ((2, 2), "decode, 2 rows"),
                        ((4, 1), "decode, 4 rows"), ((6, 1), "prefill (blocks of 48 rows)")):
    print(f"{mr} x {npan} panels  {2 * mr * npan:>10}{regs(mr, npan):>11}   {use}")

# %% [markdown]
# The one-row tile counts 17, one more than AVX2 has, if the compiler kept a whole `k` step of
# weights live; with one row each weight vector feeds one FMA and is dead, so it need not. (The
# one-row tile also issues no software prefetch, as the comment in the loop says: measured, the
# hardware's own stream prefetcher did better without it.) What the
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
# ## 4. bfloat16: widening in registers, or native dot products
#
# A bfloat16 is the top half of a float32. Widening it is exact: put the 16 bits in the high half
# and zeros below (`vec.h` does it with one unpack against a zero register). The packed bf16
# panels therefore read half the bytes and multiply *exactly the rounded weights* in float32:

# %%
import ml_dtypes

w32 = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
bits = w32.astype(ml_dtypes.bfloat16).view(np.uint16)            # round to nearest even
widened = (bits.astype(np.uint32) << 16).view(np.float32)
print("widened bits == ml_dtypes' bfloat16 -> float32:",
      np.array_equal(widened, bits.view(ml_dtypes.bfloat16).astype(np.float32)))

# %% [markdown]
# CPUs with AVX512-BF16 have `vdpbf16ps`: each float32 lane adds the products of a *pair* of
# bfloat16s, `acc + a[2i+1] b[2i+1] + a[2i] b[2i]`, two rounded FMAs per Intel's manual (and
# subnormals flushed), without widening. It needs bfloat16 activations -- the `--dtype bf16`
# engine rounds them anyway -- and it sums in pairs, odd `k` first. Both orders obey the same
# float32 bound ($\gamma_K \sum |x_k w_k|$, $\gamma_K = K u / (1 - K u)$), on float64-exact products:

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
print(f"both within the float32 bound: k order {abs(chain - exact) <= bound}, "
      f"pairs {abs(pairs - exact) <= bound}")
mine = k.matmul(x_bf[None], k.pack(w_bf[None], bf16=True), np.zeros((1, 1), np.float32))[0, 0]
print("the kernels' bf16 product == the pairs order, bit for bit:", mine == pairs)

# %% [markdown]
# So every build sums a bf16 product in that order (panels store their rows swapped in pairs):
# an AVX2 build widens and does the two FMAs itself; a build for AVX512-BF16 hands each pair of
# rows to `vdpbf16ps` -- the same bits; and norms and attention scores sum in 16 lanes at either
# vector width (`dot16` in `vec.h`), so the engines answer alike, bit for bit, on every FMA build
# (only a sum below $2^{-126}$, flushed there, could differ). Whether it pays is for `bench`. This CPU:

# %%
# NBVAL_IGNORE_OUTPUT
flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
print({f: f in flags.split() for f in ("avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_bf16")})

# %% [markdown]
# ## 5. A quantised block, decoded in registers
#
# A Q4_1 block holds 32 weights in 20 bytes: a float16 scale `d`, a float16 minimum `m`, and 16
# bytes of 4-bit quants `q` (byte `j`: weight `j` in the low nibble, weight `j + 16` in the high
# one); `w = d q + m`. One block of the shipped file, decoded by hand:

# %%
import gguf

qtype, dims, offset, _ = index["blk.0.attn_q.weight"]
with open(default_model_path(), "rb") as f:
    f.seek(offset)
    block = np.frombuffer(f.read(20), np.uint8)
d, m = block[:4].view(np.float16).astype(np.float32)
q = np.concatenate([block[4:] & 0x0F, block[4:] >> 4]).astype(np.float32)
mine = d * q + m
theirs = gguf.quants.dequantize(block.reshape(1, 20), gguf.GGMLQuantizationType.Q4_1).reshape(32)
print(f"{qtype}: d = {float(d):.6g}, m = {float(m):.6g}, first quants {q[:6].astype(int).tolist()}")
print("by hand == the gguf package's dequantisation, bit for bit:",
      np.array_equal(mine.view(np.uint32), np.asarray(theirs, np.float32).view(np.uint32)))

# %% [markdown]
# Why decoding can be *exact*: `d` has 11 significant bits and `q < 16` needs 4, so `d q` fits
# in float32's 24 bits with no rounding; `d q + m` then rounds once, whether or not the compiler
# fuses it into an FMA. The kernels regroup the blocks so that a panel's `NP` columns share each
# block of 32 `k`, in 8 groups of 4 consecutive `k` (`cpu_kernels.pack_quant`,
# `kernels/cpu/quant.h`): in a group, 32-bit lane `j` holds column `j`'s four quants (and column
# `j + NP/2`'s in the high nibbles), so one vector load brings `NP` columns x 4 `k`. A shift and
# a mask per `k` then rebuild the two weight vectors the float32 kernel would have loaded. Every
# weight of a whole matrix, decoded by the kernels' own code:

# %%
from llamanb.io.gguf import raw_rows

name = "blk.5.ffn_down.weight"
qt, rows = raw_rows(default_model_path(), index, name, cfg.n_heads, cfg.n_kv_heads)
packed = k.pack_quant(rows, qt, rows.shape[1] // 20 * 32)
ref = np.asarray(gguf.quants.dequantize(np.asarray(rows), gguf.GGMLQuantizationType[qt]),
                 np.float32).reshape(packed.n, packed.k)
print(f"{name} [{packed.n}, {packed.k}] {qt}: {packed.nbytes / packed.n / packed.k:.3f} bytes a "
      f"weight; every decoded weight equals gguf's: {np.array_equal(k.unpack(packed), ref)}")

# %% [markdown]
# Same weights, same order of multiply-adds: so the engine that decodes each weight to float32
# (`activations="float32"`) gives the float32 engine's logits *bit for bit* (a derived bound of
# 0), from about a sixth of the bytes.

# %%
ids = model.tokenizer.encode_prompt("What is the capital of France?", chat=True)
engines = {dt: Engine(model, "cpu", dtype=dt, **kw) for dt, kw in
           (("float32", {}), ("bf16", {}), ("q4_1", {"activations": "float32"}))}
logits = {dt: e.prefill(ids, e.new_cache(len(ids) + 16)) for dt, e in engines.items()}
print("q4_1 logits == float32 logits, bit for bit:",
      np.array_equal(logits["q4_1"], logits["float32"]))
for dt, e in engines.items():
    print(f"  {dt:<8} weights in memory {e.backend.weight_bytes / 1e6:6.1f} MB, next token "
          f"{model.tokenizer.decode([int(np.argmax(logits[dt]))])!r}")

# %% [markdown]
# ## 5b. 8-bit activations and integer dot products
#
# Decoding costs instructions: per weight and row, a shift, a mask, a conversion and an FMA to
# rebuild it, then the FMA that uses it -- about twice float32's work per weight, so the Q4_1
# engine is bound by arithmetic, not by its quarter of the bytes. The way out (llama.cpp's for
# Q4_1 x Q8_1) is to meet the weights in *integers*: quantise each activation row once per
# product into blocks of 32, `da = max|x| / 127`, `qa = round(x / da)`, and keep each block's sum
# `sa = da * sum(qa)`. Then a block's dot product is
#
# $$\sum_k (d\,q_k + m)\,da\,qa_k \;=\; d\,da \sum_k q_k\,qa_k \;+\; m\,sa ,$$
#
# an exact integer sum, two scales and the minimum's term folded through the block sum. The
# activation blocks in numpy, against the kernels' own (`Kernels.quantize_q8`):

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal((3, packed.k)).astype(np.float32)
xb = x.reshape(3, -1, 32)
da = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)      # float32 division, as in C++
qa = np.clip(np.rint(xb / da[..., None]), -127, 127).astype(np.int8)  # round half to even
sa = (da * qa.astype(np.int32).sum(-1).astype(np.float32)).astype(np.float32)
kq, kd, ks = k.quantize_q8(x)
print("numpy's blocks == the kernels' (q, d, s), bit for bit:",
      np.array_equal(qa.reshape(3, -1), kq) and np.array_equal(da, kd) and np.array_equal(sa, ks))

# %% [markdown]
# The integer sums in numpy from the GGUF's own fields, and the product assembled block by block
# in float64, against the kernel (`Kernels.matmul(..., act8=True)`). The kernel's float32 part is
# two roundings per block term and one per addition, so the two agree to within
# `gamma_(2 nb + 2)` times the sum of the terms' sizes (Higham's bound); the quantisation itself
# is identical on both sides.

# %%
gb = np.asarray(rows).reshape(packed.n, -1, 20)                       # [N, nb, 20] GGUF blocks
dw, mw = (gb[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64),
          gb[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64))
qw = np.concatenate([gb[..., 4:] & 15, gb[..., 4:] >> 4], axis=-1).astype(np.int64)  # [N, nb, 32]
isum = np.einsum("nbk,rbk->rnb", qw, qa.astype(np.int64))           # exact integer block dots
t1 = dw[None] * da.astype(np.float64)[:, None] * isum                # d da isum     [rows, N, nb]
t2 = mw[None] * sa.astype(np.float64)[:, None]                       # m sa
y64 = (t1 + t2).sum(-1)
y8 = k.matmul(x, packed, np.zeros((3, packed.n), np.float32), act8=True)
nb = packed.k // 32
gamma = (2 * nb + 2) * 2.0 ** -24 / (1 - (2 * nb + 2) * 2.0 ** -24)
err = np.abs(y8 - y64) / (gamma * (np.abs(t1) + np.abs(t2)).sum(-1))
print(f"kernel vs numpy's integer derivation: within the float32 rounding bound: {err.max() <= 1}")

# %% [markdown]
# What the 8-bit activations cost in accuracy is their rounding, `|x - da qa| <= da / 2 + u |x|`
# per element (`u = 2^-24`, the division's rounding), times `|w|` summed; add the float32 part
# above and the one rounding in gguf's float32 weights (`u |w| |x|`), and the kernel must sit
# within that of the exact product with float32 activations -- and far outside float32's own
# summation bound, or it would not be the 8-bit path.

# %%
u, aw = 2.0 ** -24, np.abs(ref.astype(np.float64)) / (1 - 2.0 ** -24)
exact = x.astype(np.float64) @ ref.astype(np.float64).T
bound = ((np.repeat(da, 32, axis=1) / 2 + 2 * u * np.abs(x)) @ aw.T
         + gamma * (np.abs(t1) + np.abs(t2)).sum(-1))
g_k = packed.k * u / (1 - packed.k * u)
print("within the derived bound:", bool((np.abs(y8 - exact) <= bound).all()),
      "| beyond float32's summation bound somewhere:",
      bool((np.abs(y8 - exact) > g_k * np.abs(x) @ aw.T).any()))

# %% [markdown]
# On AVX2 (and AVX-512BW) a group of 4 `k` is one `vpmaddubsw` -- 32 unsigned quant bytes times
# the row's 4 activation bytes broadcast to every lane, adjacent products summed to 16 bits -- and
# after the 8 groups of a block one `vpmaddwd` against ones sums each lane's pairs into column
# `j`'s 32-bit total. Per 64 weights and row: a broadcast, two `vpmaddubsw` and two 16-bit adds,
# plus four decode instructions shared by every row (load, shift, two masks): against about 40
# for the float path (per 8 weights a shift, a mask, a conversion and an FMA to decode, an FMA to
# use). Q4_1's pairs stay under 16 bits (2 x 15 x 127 x 8 groups = 30480 <
# 32767). This is the engine's default for `--dtype q4_1`; `activations="float32"` (or
# `LLAMANB_CPU_ACTIVATIONS=float32`) keeps the bit-exact path above. It still passes the
# reference gate of chapter 3 (`verify --backend cpu --dtype q4_1`), with logit differences of
# about 1 where the float path had 1e-4: the price of 8-bit activations.

# %%
engines["q4_1 int8"] = Engine(model, "cpu", dtype="q4_1")
logits["q4_1 int8"] = engines["q4_1 int8"].prefill(ids, engines["q4_1 int8"].new_cache(len(ids) + 16))
top5 = set(np.argsort(logits["q4_1"].reshape(-1))[-5:])
print("int8 engine's first choice in the float path's top 5:", int(np.argmax(logits["q4_1 int8"])) in top5)

# %% [markdown]
# ## 6. Threads and their hand-offs
#
# `kernels/cpu/pool.h` keeps one thread per core. A parallel loop publishes a count of chunks;
# every thread, the caller included, claims the next chunk from a shared counter until none is
# left, and the caller waits only for chunks already claimed. A helper the OS has not scheduled
# yet simply finds no work: on a busy machine the step slows down instead of stalling at a
# barrier. A decode matmul's chunks are whole panels -- 4, 2 or 1 at a time so that each thread
# gets at least 8 chunks, the last `2T` single panels so the threads finish together (the rule in
# `matmul.cc`, for this model's matrices):

# %%
def chunking(panels, T):
    per = 4 if panels >= 32 * T else 2 if panels >= 16 * T else 1
    small = 2 * T if per > 1 and panels > 2 * T else 0
    return per, small + -(-(panels - small) // per)


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
code = ("import hashlib, numpy as np; from llamanb.engine.registry import cpu_kernels as c; "
        "k = c.load(); r = np.random.default_rng(3); "
        "w = r.standard_normal((1000, 576)).astype(np.float32); "
        "x = r.standard_normal((3, 576)).astype(np.float32); "
        "print(hashlib.sha256(k.matmul(x, k.pack(w), np.empty((3, 1000), np.float32))"
        ".tobytes()).hexdigest())")
here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
one = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                     env={**__import__("os").environ, "LLAMANB_THREADS": "1"})
print("1 thread and all threads give the same bits:",
      here.stdout.strip() == one.stdout.strip() != "")

# %% [markdown]
# ## 6b. The exponential: a polynomial in registers
#
# Softmax takes `e^x` of every score and SiLU of every gate value: 35 million of them in a
# 512-token prefill of this model. A libm call per element was a fifth of that prefill's
# attention time (measured with `perf`), so the kernels compute `e^x` a vector at a time
# (`exp_vf` in `kernels/cpu/vec.h`): write `x = n ln2 + r` with `n` the nearest integer to
# `x / ln2`, so `|r| <= ln2 / 2`; take `e^r` from a degree-6 polynomial (Cephes' `expf`
# coefficients); and put `2^n` into the exponent bits. The same steps in numpy float32:

# %%
def exp_numpy(x):
    x = np.asarray(x, np.float32)
    n = np.rint(x * np.float32(1 / np.log(2)))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)   # ln2 in two parts
    p = np.float32(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + np.float32(c)
    # 2^n exactly: numpy's AVX-512 np.exp2 is not (2.6 ulp here with it, on a Zen 4)
    return np.ldexp(p * r * r + r + 1, n.astype(np.int32))


xs = np.linspace(-87, 88, 200_001, dtype=np.float32)
truth = np.exp(xs.astype(np.float64))
ulps = lambda y: np.abs(y - truth) / np.spacing(truth.astype(np.float32))   # noqa: E731
print("within 2 ulp of e^x (the bound the tests hold exp_vf to): numpy's steps",
      bool(ulps(exp_numpy(xs)).max() <= 2), "| the kernels' exp_vf", bool(ulps(k.exp(xs)).max() <= 2))

# %% [markdown]
# ## 7. Measured: decode against its roofline, and the bench against llama.cpp
#
# Sixteen greedy decode steps of each engine here, beside the roofline of section 1 (measured
# bandwidth / the bytes each engine reads a token). This machine's numbers, in a cell of their
# own; on a shared machine they only show a direction.

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
ax.set_xticks(xs, list(rates))
ax.set_ylabel("decode tokens/s")
ax.legend(fontsize=8)
ax.set_title("decode on this machine vs bandwidth / bytes a token", fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# The comparison with llama.cpp is the benchmark's job: `python -m llamanb bench --backend cpu`
# runs the numpy engine, the `cpu` backend and llama.cpp (llama-cpp-python built for this CPU in
# its own venv: `--peer-python`, see the README) on GGUFs of the same weights at each precision,
# and prints prefill and decode rates, peak memory and each ratio against its target. Run it on a
# quiet machine (on an AVX-512 CPU it times the AVX2 kernels too). Its table is the measurement.

# %% [markdown]
# ## Exercises
#
# Three functions to write, each checked against the package or the `gguf` package: replace
# `raise NotImplementedError`, run the cell, then the check below it (one line: `passed`, the
# first case that differs with a hint, or `not attempted yet`). Solutions: `solutions/11_*.py`.

# %%
from llamanb.course.exercises import ch11

# %% [markdown]
# ### 11.1 Bytes a token
#
# Write `weight_bytes(cfg, fmt)`: the bytes of matrix weights one decode step reads, for `fmt` in
# `"float32"`, `"bf16"`, `"q8_0"`, `"q4_1"`, for any `LlamaConfig` (checked on every preset).
# *Hint:* section 1 -- which matrices, and what a block's scales cost.

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

# %% [markdown]
# ### 11.3 One Q4_1 block
#
# Write `q4_1_decode(block)`: 20 bytes (uint8) -> the 32 float32 weights, bit for bit as the
# `gguf` package dequantises them (checked on the shipped file's blocks and random ones).
# *Hint:* section 5.

# %%
def q4_1_decode(block: np.ndarray) -> np.ndarray:
    raise NotImplementedError  # your code here


# %%
ch11.q4_1_decode(q4_1_decode)
