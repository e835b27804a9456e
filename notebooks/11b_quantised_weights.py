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
#     builds: the GGUF's 4-bit blocks decoded in registers, 8-bit activations and integer
#       dot products
#     modules:
#     - llamanb.cpu
#     part: I
# ---

# %% [markdown]
# # 11b · Fewer bytes a weight: 4-bit blocks decoded in registers
#
# **What you will build.** Chapter 11 showed that a decode step is as fast as memory delivers the
# weights. The shipped GGUF stores them in 4-bit blocks (Q4_1): a sixth of float32's bytes. This
# chapter runs them *as stored*: you will decode one block by hand, watch the kernels decode whole
# matrices inside the matrix product (never expanded in memory) and give the float32 engine's
# logits bit for bit; then meet the weights in integers -- 8-bit activations and integer dot
# products -- bound exactly what that costs in accuracy, and work one block's integer dot product
# by hand, instruction by instruction (`vpmaddubsw`, `vpmaddwd`, and VNNI's `vpdpbusd`). Each step
# is derived in numpy and asserted against the kernels and against the `gguf` package.

# %%
import warnings

warnings.filterwarnings("ignore")

import time

import gguf
import numpy as np

from llamanb import Engine, load_model
from llamanb.cpu import kernels as cpu_kernels
from llamanb.io.gguf import raw_rows, tensor_index
from llamanb.io.store import default_model_path

model = load_model()
cfg, W = model.config, model.weights
k = cpu_kernels.load()
index = tensor_index(default_model_path())

# %% [markdown]
# ## 1. The file's own formats
#
# A GGUF block holds 32 weights and its scales: Q4_1 is a float16 scale `d`, a float16 minimum `m`
# and 16 bytes of 4-bit quants (20 bytes); Q8_0 a float16 `d` and 32 int8 quants (34 bytes). The
# shipped file is Q4_1 for every layer matrix and Q8_0 for the embedding (which is also the LM
# head); llama.cpp runs it as it is. Counted from the file's own header:

# %%
stored = {n: (q, nbytes) for n, (q, dims, off, nbytes) in index.items() if len(dims) == 2}
kinds = sorted({q for q, _ in stored.values()})
print("matrix formats in the GGUF:", ", ".join(f"{sum(q == t for q, _ in stored.values())} x {t}"
                                               for t in kinds))
BLOCK_BYTES = {"Q4_1": 2 + 2 + 16, "Q8_0": 2 + 32}
for n, (q, nbytes) in stored.items():                  # every matrix: its blocks, nothing else
    assert nbytes == int(np.prod(index[n][1])) // 32 * BLOCK_BYTES[q], n
float32_bytes = 4 * sum(int(np.prod(index[n][1])) for n in stored)
gguf_bytes = sum(b for _, b in stored.values())
q4_1_ratio = 4 / (BLOCK_BYTES["Q4_1"] / 32)
assert round(q4_1_ratio) == 6                          # "a sixth of the bytes"
print(f"Q4_1: {BLOCK_BYTES['Q4_1'] / 32} bytes a weight, {q4_1_ratio:.1f}x fewer than float32; "
      f"the whole file {gguf_bytes / 1e6:.1f} MB a token, {float32_bytes / gguf_bytes:.2f}x fewer")

# %% [markdown]
# ## 2. One Q4_1 block, by hand
#
# In a Q4_1 block, byte `j` of the quants holds weight `j` in its low nibble and weight `j + 16`
# in its high one; `w = d q + m`. The first block of the shipped file's first query matrix:

# %%
qtype, dims, offset, _ = index["blk.0.attn_q.weight"]
with open(default_model_path(), "rb") as f:
    f.seek(offset)
    block = np.frombuffer(f.read(20), np.uint8)
d, m = block[:4].view(np.float16).astype(np.float32)
q = np.concatenate([block[4:] & 0x0F, block[4:] >> 4]).astype(np.float32)
mine = d * q + m
theirs = gguf.quants.dequantize(block.reshape(1, 20), gguf.GGMLQuantizationType.Q4_1).reshape(32)
assert qtype == "Q4_1"
assert np.array_equal(mine.view(np.uint32), np.asarray(theirs, np.float32).view(np.uint32))
print(f"{qtype}: d = {float(d):.6g}, m = {float(m):.6g}, first quants {q[:6].astype(int).tolist()}; "
      "by hand == the gguf package, bit for bit")

# %% [markdown]
# ## 3. Decoded in registers, exactly
#
# Why decoding can be *exact*: `d` has 11 significant bits and `q < 16` needs 4, so `d q` fits
# in float32's 24 bits with no rounding; `d q + m` then rounds once, whether or not the compiler
# fuses it into an FMA. The kernels regroup the blocks so that a panel's `NP` columns share each
# block of 32 `k`, in 8 groups of 4 consecutive `k` (`cpu_kernels.pack_quant`,
# `kernels/cpu/quant.h`): in a group, 32-bit lane `j` holds column `j`'s four quants (and column
# `j + NP/2`'s in the high nibbles), so one vector load brings `NP` columns x 4 `k`. A shift and
# a mask per `k` then rebuild the two weight vectors the float32 kernel would have loaded. Every
# weight of a whole matrix, decoded by the kernels' own code:

# %%
name = "blk.5.ffn_down.weight"
qt, rows = raw_rows(default_model_path(), index, name, cfg.n_heads, cfg.n_kv_heads)
packed = k.pack_quant(rows, qt, rows.shape[1] // 20 * 32)
ref = np.asarray(gguf.quants.dequantize(np.asarray(rows), gguf.GGMLQuantizationType[qt]),
                 np.float32).reshape(packed.n, packed.k)
assert np.array_equal(k.unpack(packed), ref)
assert packed.nbytes == packed.n * packed.k // 32 * BLOCK_BYTES[qt]      # still 20 bytes a block
print(f"{name} [{packed.n}, {packed.k}] {qt}: {packed.nbytes / packed.n / packed.k:.3f} bytes a "
      f"weight in the panels; every decoded weight equals gguf's")

# %% [markdown]
# Same weights, same order of multiply-adds: so the engine that decodes each weight to float32
# (`activations="float32"`) gives the float32 engine's logits *bit for bit*, from the bytes
# counted in section 1:

# %%
ids = model.tokenizer.encode_prompt("What is the capital of France?", chat=True)
engines = {dt: Engine(model, "cpu", dtype=dt, **kw) for dt, kw in
           (("float32", {}), ("q4_1", {"activations": "float32"}))}
logits = {dt: e.prefill(ids, e.new_cache(len(ids) + 16)) for dt, e in engines.items()}
assert np.array_equal(logits["q4_1"], logits["float32"])
ratio = engines["float32"].backend.weight_bytes / engines["q4_1"].backend.weight_bytes
print(f"q4_1 logits == float32 logits, bit for bit, from {ratio:.2f}x fewer bytes of weights "
      f"({engines['q4_1'].backend.weight_bytes / 1e6:.1f} MB); next token "
      f"{model.tokenizer.decode([int(np.argmax(logits['q4_1']))])!r}")

# %% [markdown]
# ## 4. 8-bit activations and integer dot products
#
# Decoding costs instructions: per weight and row, a shift, a mask, a conversion and an FMA to
# rebuild it, then the FMA that uses it -- about twice float32's work per weight, so the Q4_1
# engine is bound by arithmetic, not by its sixth of the bytes. The way out is to meet the weights
# in *integers* (llama.cpp's idea for Q4_1 x Q8_1; its exact bits differ, see the sidebar below):
# quantise each activation row once per product into blocks of 32, `da = max|x| / 127`,
# `qa = round(x / da)`, and keep each block's sum `sa = da * sum(qa)`. Then a block's dot product is
#
# $$\sum_k (d\,q_k + m)\,da\,qa_k \;=\; d\,da \sum_k q_k\,qa_k \;+\; m\,sa ,$$
#
# an exact integer sum, two scales and the minimum's term folded through the block sum. The
# activation blocks in numpy (exercise 11b.2), against the kernels' own (`Kernels.quantize_q8`):

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal((3, packed.k)).astype(np.float32)
xb = x.reshape(3, -1, 32)
da = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)      # float32 division, as in C++
qa = np.clip(np.rint(xb / da[..., None]), -127, 127).astype(np.int8)  # round half to even
sa = (da * qa.astype(np.int32).sum(-1).astype(np.float32)).astype(np.float32)
kq, kd, ks = k.quantize_q8(x)
assert np.array_equal(qa.reshape(3, -1), kq) and np.array_equal(da, kd) and np.array_equal(sa, ks)
print(f"numpy's blocks == the kernels' (q, d, s), bit for bit: {qa.size // 32} blocks of 32")

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
assert err.max() <= 1
print("the kernel's act8 product: within the float32 rounding bound of the integer derivation")

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
assert (np.abs(y8 - exact) <= bound).all()                          # within the derived bound
assert (np.abs(y8 - exact) > g_k * np.abs(x) @ aw.T).any()          # beyond float32's own
print("act8 vs the exact product: within the derived bound everywhere, beyond float32's "
      "summation bound somewhere")

# %% [markdown]
# This is the engine's default for `--dtype q4_1` (how the kernel forms each block's integer sum is
# section 5); `activations="float32"` (or `LLAMANB_CPU_ACTIVATIONS=float32`) keeps the bit-exact
# path of section 3. It still passes the reference gate of chapter 3
# (`verify --backend cpu --dtype q4_1`), at the price of 8-bit activations: larger logit
# differences than the float path's, measured here against the float32 engine.

# %%
engines["q4_1 int8"] = Engine(model, "cpu", dtype="q4_1")
logits["q4_1 int8"] = engines["q4_1 int8"].prefill(ids, engines["q4_1 int8"].new_cache(len(ids) + 16))
top5 = set(np.argsort(logits["q4_1"].reshape(-1))[-5:])
assert int(np.argmax(logits["q4_1 int8"])) in top5
gap = {n: float(np.abs(logits[n] - logits["float32"]).max()) for n in ("q4_1", "q4_1 int8")}
assert gap["q4_1"] == 0 < gap["q4_1 int8"]
print("the int8 engine's first choice is in the float path's top 5")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"largest logit difference from the float32 engine: q4_1 (float activations) {gap['q4_1']:g}, "
      f"q4_1 int8 {gap['q4_1 int8']:.3g}")

# %% [markdown]
# ## 5. One block, as the instructions form it
#
# Section 4's integer sum is exact whoever computes it; *how* the kernel computes it decides what
# it costs, and where it could go wrong. One block -- the first 32 `k` of the first 16 columns of
# section 3's matrix, times row 0's first activation block -- step by step in numpy, each step
# held bit for bit to the compiled code: `Kernels.q4_1_block_isum` runs `quant.h`'s `IDot<q4_1_t>`
# (the decode, the 8 steps and the sums that the matmul runs) on one panel block,
# `Kernels.dot_u8s8` one `vpmaddubsw`, and `Kernels.matmul(..., act8=True)` with `K = 32` the
# whole product of one block (the two probes: `kernels/cpu/quant_probe.cc`).
#
# **Unpack.** In a panel block (section 3), group `g` is `4 VW` bytes: lane `j`'s 4 bytes hold
# `k = 4g .. 4g+3` of column `j` in their low nibbles and of column `j + VW` in their high ones.
# x86 has no shift of bytes, so the kernel shifts 16-bit lanes right by 4 (`vpsrlw`) and masks
# with 15, which drops the bits that crossed over from the neighbouring byte:

# %%
VW, NP = k.vector_width, k.panel_width
g16 = np.asarray(rows)[:16, :20]                                     # 16 columns' first blocks
one = k.pack_quant(g16, "Q4_1", 32)                                  # one panel block (K = 32)
pb = one.data.reshape(-1)
groups = pb[8 * VW:].reshape(8, VW, 4)                               # [g, lane j, byte t]
lo = groups & 15
hi = (groups.view("<u2") >> 4).view(np.uint8).reshape(8, VW, 4) & 15  # vpsrlw 4, then & 15
assert np.array_equal(hi, groups >> 4)                               # = a shift of each byte
q_w = np.concatenate([lo, hi], axis=1)                               # [g, column, t] 0..15
q_gguf = np.concatenate([g16[:, 4:] & 15, g16[:, 4:] >> 4], axis=1)  # [16, 32]: section 2's
assert np.array_equal(q_w.transpose(1, 0, 2).reshape(NP, 32)[:16], q_gguf)
qa0 = qa[0, 0]                                                       # row 0's first block
print("group g, lane j: column j's 4 quants (low nibbles), column j + VW's (high): "
      "the GGUF's quants, regrouped")

# %% [markdown]
# **Multiply and pair.** `vpmaddubsw` multiplies each *unsigned* byte of its first operand by the
# *signed* byte beside it in the second, and adds adjacent products into a 16-bit lane, with
# signed saturation to [-32768, 32767] (Intel's Intrinsics Guide, `_mm256_maddubs_epi16`). The
# kernel's second operand is the activation block's 4 bytes of group `g`, broadcast to every 32-bit
# lane, so lane `j`'s two 16-bit halves get `q[4g] qa[4g] + q[4g+1] qa[4g+1]` and the next pair.
# In numpy (exercise 11b.3), against the instruction on all 16 vectors of this block; the 8 groups
# then add up in 16 bits (`vpaddw`):

# %%
def maddubs(u, s):                  # vpmaddubsw: u8 x s8, adjacent pairs, saturated to int16
    p = u.astype(np.int32) * s.astype(np.int32)
    return np.clip(p[0::2] + p[1::2], -32768, 32767).astype(np.int16)


acc16 = np.zeros((2, 2 * VW), np.int16)                              # lo, hi: 2 VW int16 each
for g in range(8):
    xg = np.tile(qa0[4 * g:4 * g + 4], VW)                           # broadcast to every lane
    for h, part in enumerate((lo, hi)):
        ours = maddubs(part[g].reshape(-1), xg)
        hw = k.dot_u8s8(part[g].reshape(-1), xg)                     # None: no byte dot product
        assert hw is None or np.array_equal(hw, ours)
        acc16[h] += ours                                             # vpaddw (wraps; never here)
print("numpy's vpmaddubsw == the instruction on each of the block's 16 vectors")

# %% [markdown]
# **Widen.** After the 8 groups each 16-bit lane holds 8 pairs' sum; one `vpmaddwd` against a
# vector of ones adds each 32-bit lane's two halves into a 32-bit total: column `j`'s integer sum.
# It is what the kernel's `IDot` returns (whichever instructions this build uses), and what `q @ qa`
# gives in plain integers:

# %%
isum = acc16.reshape(2, VW, 2).astype(np.int32).sum(-1).reshape(NP)  # vpmaddwd against ones
assert np.array_equal(isum, k.q4_1_block_isum(pb, qa0))              # the kernel's IDot
assert np.array_equal(isum[:16], q_gguf.astype(np.int64) @ qa0.astype(np.int64))
print(f"column 0..3 integer sums {isum[:4].tolist()}: numpy == the kernel's IDot == q @ qa")

# %% [markdown]
# **VNNI: one instruction.** `vpdpbusd` (AVX512-VNNI; AVX-VNNI's VEX form on newer client cores)
# multiplies the same unsigned and signed bytes and adds all four products of a 32-bit lane to that
# lane's 32-bit accumulator: no 16-bit intermediate, no saturation (it wraps at 32 bits; the
# `vpdpbusds` form saturates there instead; Intel's Intrinsics Guide, `_mm256_dpbusd_epi32`). A
# block is then 16 instructions a row where it was 16 `vpmaddubsw` with their 16-bit adds and 2
# `vpmaddwd`; the same sums:

# %%
def dpbusd(acc, u, s):              # vpdpbusd: acc (int32) + 4 u8 x s8 products a lane
    p = u.astype(np.int64) * s.astype(np.int64)
    return (acc + p.reshape(-1, 4).sum(-1)).astype(np.int32)


acc32 = np.zeros((2, VW), np.int32)
for g in range(8):
    xg = np.tile(qa0[4 * g:4 * g + 4], VW)
    for h, part in enumerate((lo, hi)):
        acc32[h] = dpbusd(acc32[h], part[g].reshape(-1), xg)
assert np.array_equal(acc32.reshape(NP), isum)
print("vpdpbusd's int32 lanes == vpmaddubsw + vpaddw + vpmaddwd's, bit for bit")

# %% [markdown]
# **Scale.** Then the float terms, as the matmul folds them: `t = d da` rounded to float32, then
# `acc = isum t` (one rounding), then `y = acc + m sa` -- which GCC fuses (`-ffp-contract=fast`)
# into one FMA where the target has one: a single rounding of the exact `acc + m sa`. Numpy forms
# that sum in float64 (exactly, checked with fractions) and rounds once; against the kernel's
# product of one block, every column bit for bit:

# %%
from fractions import Fraction

dw1 = np.zeros(NP, np.float32)
mw1 = np.zeros(NP, np.float32)
dw1[:16] = g16[:, 0:2].copy().view(np.float16)[:, 0]
mw1[:16] = g16[:, 2:4].copy().view(np.float16)[:, 0]
da0, sa0 = da[0, 0], sa[0, 0]
acc = isum.astype(np.float32) * (dw1 * da0)                          # two float32 roundings
exact1 = acc.astype(np.float64) + mw1.astype(np.float64) * np.float64(sa0)
assert all(Fraction(float(e)) == Fraction(float(a)) + Fraction(float(m_)) * Fraction(float(sa0))
           for e, a, m_ in zip(exact1, acc, mw1))                     # float64 held it exactly
fused, unfused = exact1.astype(np.float32), acc + mw1 * sa0
y1 = k.matmul(np.ascontiguousarray(x[:1, :32]), one, np.zeros((1, 16), np.float32), act8=True)[0]
assert np.array_equal(y1.view(np.uint32),
                      (fused if "FMA" in k.isa else unfused)[:16].view(np.uint32))
print(f"d da isum + m sa, as the kernel rounds it: 16 of 16 columns bit for bit "
      f"({int((fused != unfused)[:16].sum())} would differ without the fused multiply-add)")

# %% [markdown]
# **Where 8 bits could saturate.** Q4_1's quants are 0..15 and the activations -127..127, so a
# pair is at most `2 x 15 x 127 = 3810`, and a block's 8 groups `30480 < 32767`: the kernel adds
# them in 16 bits and widens once a block. The bound is the format's: with 5-bit quants (Q5_0)
# 8 groups would pass 32767, and Q8_0's signed quants (`vpmaddubsw` takes `|q|`, the activation
# gets `q`'s sign) leave room for one pair only, so both widen every group (`quant.h`). Full bytes
# are where the instruction itself saturates -- `255 x 127` twice is 64770 -- while `vpdpbusd`
# holds any four byte products (`4 x 255 x 128 < 2^31`):

# %%
INT16_MAX = int(np.iinfo(np.int16).max)
pair = {"Q4_1": 2 * 15 * 127, "Q5_0": 2 * 31 * 127, "Q8_0": 2 * 128 * 127}
assert pair["Q4_1"] * 8 <= INT16_MAX < pair["Q5_0"] * 8              # a block's 8 groups in int16
assert pair["Q8_0"] <= INT16_MAX < 2 * pair["Q8_0"]                  # one pair fits, two do not
u255, s127 = np.full(4 * VW, 255, np.uint8), np.full(4 * VW, 127, np.int8)
hw = k.dot_u8s8(u255, s127)
assert maddubs(u255, s127)[0] == INT16_MAX and (hw is None or (hw == INT16_MAX).all())
assert dpbusd(np.zeros(VW, np.int32), u255, s127)[0] == 4 * 255 * 127
for f, p in pair.items():
    print(f"{f}: a pair at most {p:5d}; a 16-bit lane holds {INT16_MAX // p} such pairs")
print(f"u8 255 x s8 127, a pair: vpmaddubsw {INT16_MAX} (saturated, not {2 * 255 * 127}); "
      f"vpdpbusd's lane {4 * 255 * 127}")

# %% [markdown]
# > **Going deeper: llama.cpp's Q8_1, bit by bit.** Sections 4 and 5 follow llama.cpp's idea
# > (Q4_1 x Q8_1 in ggml-cpu), not its bits. Its `block_q8_1` stores `d` and `s = d sum(q)` as
# > float16 (ggml-org/llama.cpp, `ggml/src/ggml-common.h:258-269`); its reference
# > `quantize_row_q8_1_ref` rounds `roundf(x * (1/d))`, halves away from zero
# > (`ggml/src/ggml-quants.c:302-335`); its x86 copy multiplies by `127 / max` and rounds half to
# > even (`ggml/src/ggml-cpu/arch/x86/quants.c:400-502`, lines 429 and 439-442). Its
# > `ggml_vec_dot_q4_1_q8_1` (lines 859-916) lays one block of one row across a register --
# > `vpmaddubsw` + `vpmaddwd`, or `vpdpbusd` where AVX512-VNNI or AVX-VNNI is compiled in
# > (`mul_sum_us8_pairs_float`, lines 105-119) -- scales it by `d0 d1` with an FMA and sums the
# > lanes once a row, `m s` in a scalar beside it (lines 886-908); the kernels here put a column in
# > each lane and need no horizontal sum. (Line numbers at llama.cpp 0c1e570, the copy
# > llama-cpp-python 0.3.36 vendors.) The kernels keep float32 `d` and `s` and round `x / d` half
# > to even (`nearbyint`, `kernels/cpu/quant.h`). The reference recipe and the kernels' on the
# > same activations:

# %%
d32 = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
v = (xb * (np.float32(1) / d32)[..., None]).astype(np.float32)      # x * id, as ggml does
q_ggml = (np.sign(v) * np.floor(np.abs(v.astype(np.float64)) + 0.5)).astype(np.int8)  # roundf
d_ggml = d32.astype(np.float16)
s_ggml = (q_ggml.astype(np.int32).sum(-1) * d32).astype(np.float16)
q_diff = int((q_ggml != qa).sum())
d_diff = int((d_ggml.astype(np.float32) != da).sum())
assert d_diff > 0                                      # float16 d: different scales
assert q_diff <= qa.size // 100                        # the quants: nearly always the same
halves = np.float32([127, 0.5, 1.5, 2.5, -0.5, -2.5])  # d = 1: x / d on halves
assert np.rint(halves).tolist() == [127, 0, 2, 2, -0.0, -2]                 # the kernels'
assert (np.sign(halves) * np.floor(np.abs(halves) + 0.5)).tolist() == [127, 1, 2, 3, -1, -3]
print(f"of {qa.size // 32} blocks, {d_diff} have a different d (float16 against float32)")
print(f"of {qa.size} quants, {q_diff} differ; on exact halves the two roundings part")

# %% [markdown]
# ## 6. Measured: what the fewer bytes buy here
#
# Sixteen greedy decode steps of each engine; the roofline is chapter 11's (measured bandwidth /
# the bytes each engine reads a token; the KV cache's share left out). This machine's numbers:

# %%
# NBVAL_IGNORE_OUTPUT
probe = np.ones(64 << 20, np.float32)
best = 0.0
for _ in range(4):
    t0 = time.perf_counter()
    k.read_sum(probe)
    best = max(best, probe.nbytes / (time.perf_counter() - t0))
for dt, e in engines.items():
    cache = e.new_cache(len(ids) + 20)
    tok = int(np.argmax(e.prefill(ids, cache)))
    t0 = time.perf_counter()
    for _ in range(16):
        tok = int(np.argmax(e.decode(tok, cache)))
    rate = 16 / (time.perf_counter() - t0)
    roof = best / e.backend.weight_bytes
    print(f"{dt:<10} {rate:6.1f} tokens/s, roofline {roof:6.1f}: {rate / roof:4.0%}")

# %% [markdown]
# ## Exercises
#
# Three functions to write, each checked against the `gguf` package or a closed form (sections 4, 5):
# replace `raise NotImplementedError`, run the cell, then the check below it. Solutions:
# `solutions/11b_*.py`.

# %%
from llamanb.course.exercises import ch11b

# %% [markdown]
# ### 11b.1 One Q4_1 block
#
# Write `q4_1_decode(block)`: 20 bytes (uint8) -> the 32 float32 weights, bit for bit as the
# `gguf` package dequantises them (checked on the shipped file's blocks and random ones).
# *Hint:* section 2.

# %%
def q4_1_decode(block: np.ndarray) -> np.ndarray:
    raise NotImplementedError  # your code here


# %%
ch11b.q4_1_decode(q4_1_decode)

# %% [markdown]
# ### 11b.2 One row's 8-bit blocks
#
# Write `q8_blocks(x)`: a float32 row whose length is a multiple of 32 -> `(q, d, s)`: the int8
# quants `[K]`, and per block of 32 the float32 scale `d = max|x| / 127` and `s = d * sum(q)`, as
# the kernels make them (a block of zeros has `d = s = 0` and quants 0). *Hint:* section 4; which
# way does a half round?

# %%
def q8_blocks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    raise NotImplementedError  # your code here


# %%
ch11b.q8_blocks(q8_blocks)


# %% [markdown]
# ### 11b.3 One `vpmaddubsw`
#
# Write `maddubs(u, s)`: `u` uint8 and `s` int8, both of length `2n` -> int16 `[n]`, lane `i` the
# sum of products `2i` and `2i + 1`, saturated as the instruction saturates (checked on Q4_1's
# range, on full bytes and where it saturates). *Hint:* section 5; what does `255 x 127` twice
# become in 16 bits?

# %%
def maddubs(u: np.ndarray, s: np.ndarray) -> np.ndarray:
    raise NotImplementedError  # your code here


# %%
ch11b.maddubs(maddubs)
