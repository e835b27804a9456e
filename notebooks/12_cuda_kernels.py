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
#     builds: min_llm_inference's CUDA kernels, simulated and compiled
#     modules:
#     - llamanb.cuda
#     part: II
# ---

# %% [markdown]
# # 12 · CUDA kernels: a small inferencer's design, generalised to a Llama
#
# **What you will build.** The nine CUDA kernels that run a Llama decode step on an NVIDIA GPU --
# RMSNorm, the projections, RoPE, the KV-cache fill, attention in three launches, SwiGLU and an
# on-device argmax -- with continuous batching, several sequences of different lengths in one step.
# A GPU runs thousands of threads at once, and a kernel's speed is decided by how those threads
# are grouped and how they touch memory: *why* the K cache is stored transposed, why one warp owns
# a softmax row. You will size each kernel's grid, count the memory sectors a warp reads, derive
# the warp's softmax in numpy, and run the kernels on a tiny Llama against the numpy engine. The
# design is that of xyg-coder/min_llm_inference, a small CUDA inferencer (chapter 10 mapped its
# batching onto the engine), generalised to a Llama.
#
# The kernels are the course's own: `llamanb/cuda/kernels.py` in numba-cuda (Python that compiles
# to GPU code) and `kernels/cuda/llama_kernels.cu` in CUDA C++, the same nine entry points in
# both. They run behind the engine seam as two backends: `cuda` on an NVIDIA GPU and
# `cuda-simulated` in numba-cuda's CUDA simulator, which executes every CUDA thread as a Python
# thread on the CPU. **This notebook runs the kernels in the simulator** and compiles the C++ form
# to PTX; no number below is a GPU measurement (section 8).

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb.model.config import PRESETS, LlamaConfig
from llamanb.cuda import launch, runtime

cuda = runtime.load(simulated=True)        # NUMBA_ENABLE_CUDASIM=1 before numba's first import
from llamanb.cuda import kernels  # noqa: E402

assert kernels.SIMULATED                   # every launch below runs in the simulator, on the CPU

# %% [markdown]
# ## 1. Threads, blocks, grids
#
# A CUDA kernel is one function run by many threads. Threads come in **blocks** (up to 1024
# threads that share fast on-chip *shared memory* and can wait for each other at `__syncthreads()`);
# blocks form a **grid**. A thread knows where it is from `blockIdx`, `threadIdx` (each up to
# three-dimensional) and computes which element is its own. Thirty-two consecutive threads of a
# block form a **warp**, the unit the hardware issues instructions to.
#
# min_llm_inference picks one of two shapes per kernel: 2-D blocks of `TILE_SIZE x TILE_SIZE` =
# 16 x 16 threads for the matrix-shaped work (`fill_new_kt_v_cache`), 1-D blocks of 256 threads
# for the rest. The grid is what the data needs: `qkt` gets `(ceil(n_sequence / 256), n_batch)`
# blocks -- x over key positions, y over batch rows -- and each thread computes one score.
#
# The port keeps those shapes. `llamanb.cuda.launch` holds every kernel's (grid, block), and the
# backend launches exactly those. For one decode step of SmolLM2-135M with 8 sequences, each 512
# positions long:

# %%
c = PRESETS["smollm2-135m"]
R, L, T = 8, 512, kernels.GPU_TILE
Nh, Nkv, d = c.n_heads, c.n_kv_heads, c.head_dim
width = (Nh + 2 * Nkv) * d
rows = [("gemm_nt (qkv)", launch.gemm_nt(R, width, T)),
        ("rmsnorm", launch.row_warps(R, T)),
        ("rope", launch.elementwise(R * (Nh + Nkv) * d // 2, T)),
        ("fill_kv", launch.fill_kv([1] * R, Nkv, d, T)),
        ("qkt", launch.qkt(R, Nh, L, T)),
        ("softmax_rows", launch.row_warps(R * Nh, T)),
        ("softmax_v", launch.softmax_v(R, Nh, d, T)),
        ("silu_mul", launch.elementwise(R * c.ffn, T)),
        ("argmax_decode", launch.argmax_decode(R, T))]
print(f"{'kernel':<15} {'grid':<14} {'block':<9} threads")
for name, (grid, block) in rows:
    g, b = tuple(int(v) for v in np.atleast_1d(grid)), tuple(int(v) for v in np.atleast_1d(block))
    print(f"{name:<15} {str(g):<14} {str(b):<9} {int(np.prod(g) * np.prod(b)):>7,}")

# %% [markdown]
# `qkt` here has `2 x 72` blocks: x covers 512 key positions in blocks of 256, y one block per
# (row, query head) -- the generalisation from min_llm_inference's single head. **Per-row lengths**
# make blocks idle: a block whose first key lies past its row's length returns at once (there:
# `if (blockIdx.x * TILE_SIZE_SQUARE >= cur_batch_length) return;`). With sequences of different
# lengths in one step, the grid is sized for the longest and the others' extra blocks cost only
# their launch:

# %%
lengths = np.array([512, 40, 300, 0, 129, 257, 1, 480])          # 0: an empty slot
gx = launch.qkt(len(lengths), 1, int(lengths.max()), 4)[0][0]      # a tile of 4: 16-key blocks
B = 16
work = (np.arange(gx)[None, :] * B < lengths[:, None])              # [rows, blocks]
fig, ax = plt.subplots(figsize=(8, 2.6))
from matplotlib.colors import ListedColormap  # noqa: E402

ax.imshow(work, aspect="auto", cmap=ListedColormap(["#f4f4f4", "#2e7d32"]), vmin=0, vmax=1,
          interpolation="nearest")
ax.set_xlabel("blockIdx.x (16 keys each)")
ax.set_ylabel("blockIdx.y (row)")
ax.set_yticks(range(len(lengths)), [f"len {n}" for n in lengths])
ax.set_title("qkt's grid: green blocks compute, grey blocks return at once")
fig.tight_layout()
plt.show()
print(f"{int(work.sum())} of {work.size} blocks compute ({work.mean():.0%})")

# %% [markdown]
# > **Going deeper: the code this chapter reads.** min_llm_inference at its latest commit
# (`84281b7`): `src/kernels/self_attention_inference_optimized.cu` (the five attention kernels),
# `src/kernels/decoder.cu` (the argmax decoder), `include/constants.h` (`TILE_SIZE = 16`,
# `WARP_SIZE = 32`, `BLOCK_DIM = 256`). Section 7 lists where the port departs from it.

# %% [markdown]
# ## 2. The transposed K cache, and why
#
# min_llm_inference stores K transposed, `kt_cache [n_batch, dim, n_sequence]`, and V as it comes,
# `v_cache [n_batch, n_sequence, dim]`; the port adds the K/V head: `kt [slots, N_kv, d, S]`,
# `v [slots, N_kv, S, d]`. The reason is how a warp reads memory. In `qkt` consecutive threads
# own consecutive key positions `j, j+1, ..., j+31`; in each step of the dot product they all
# read dimension `c` of their key. The memory system serves a warp in 32-byte **sectors**: 32
# threads reading 32 neighbouring floats need 4 sectors; reading 32 floats `d` apart needs 32.
# Counting the sectors from the addresses, for one warp's load of dimension `c = 5`:

# %%
def sectors(offsets):
    """32-byte sectors a warp touches, reading float32 elements at these flat offsets."""
    return len(set((np.asarray(offsets) * 4) // 32))


S_cap, j = 2048, np.arange(32) + 96                     # the warp's 32 key positions
kt_offsets = ((0 * Nkv + 0) * d + 5) * S_cap + j        # kt [slot, head, c, j]: j moves by 1
k_offsets = ((0 * Nkv + 0) * S_cap + j) * d + 5         # K as written, [slot, head, j, c]: by d
assert (sectors(kt_offsets), sectors(k_offsets)) == (4, 32)
print(f"qkt, one warp, one dimension: transposed K {sectors(kt_offsets)} sectors, "
      f"untransposed {sectors(k_offsets)} sectors")
c_cols = np.arange(32)                                  # softmax_v: threads own columns c
v_offsets = ((0 * Nkv + 0) * S_cap + 7) * d + c_cols    # v [slot, head, j=7, c]
assert sectors(v_offsets) == 4
print(f"softmax_v, one warp, one key: V as written {sectors(v_offsets)} sectors")

# %% [markdown]
# The price is paid when a key is written: a new position is one *column* of `kt`, `d` floats
# `S` apart. min_llm_inference's `fill_new_kt_v_cache` computes K and V of a new prompt inside a tiled
# matrix product and stores each K element straight into its transposed place. The port's
# `fill_kv` moves the new rows through a shared-memory tile instead: a 16 x 16 block reads a
# tile of 16 rows x 16 dimensions of the projected K (consecutive threads, consecutive
# dimensions: coalesced), waits at the barrier, and writes the tile transposed (consecutive
# threads, consecutive positions: coalesced again). The tile is declared `[T][T + 1]`: shared
# memory has 32 banks, `tile[i][c]` sits in bank `(17 i + c) mod 32`, and a warp of a 16 x 16
# block (two rows of threads) reads two columns of it at once. With the padding column a bank
# serves at most two of those 32 floats (a 2-way conflict); without it, `16 i mod 32` is 0 or 16
# and eight floats queue for each bank (8-way). `kernels.py` derives both.
#
# ## 3. One warp per softmax row
#
# `softmax_in_place_with_lengths` gives each row of scores one warp, and each lane keeps a
# running maximum `m` and a sum `s` rescaled whenever the maximum grows
# (`s = s e^{m - m'} + e^{x - m'}`), so the row is read once for both. The port's lanes walk
# single keys `lane, lane + 32, ...` below the row's length (min_llm_inference's walk `float4`
# groups of four keys, which numba does not have: section 7). Then the warp combines its 32
# pairs: the maximum `g` of the `m`s, each `s` rescaled by
# `e^{m - g}`, the sum of those. The same algorithm in numpy, lane by lane, against the textbook
# softmax:

# %%
rng = np.random.default_rng(0)
x = rng.standard_normal(300) * 3
length = 237
m, s = np.full(32, -np.inf), np.zeros(32)
for lane in range(32):
    for v in x[lane:length:32]:
        m_new = max(m[lane], v)
        s[lane] = s[lane] * np.exp(m[lane] - m_new) + np.exp(v - m_new)
        m[lane] = m_new
g = m.max()
total = (s * np.exp(m - g)).sum()
p_warp = np.exp(x[:length] - g) / total
p_ref = np.exp(x[:length] - x[:length].max()) / np.exp(x[:length] - x[:length].max()).sum()
np.testing.assert_allclose(p_warp, p_ref, rtol=1e-12, atol=0)
print(f"warp-style and textbook softmax over {length} keys agree to 1e-12")

# %% [markdown]
# On a GPU the 32 values combine through **warp shuffles**: `__shfl_xor_sync` hands a register to
# another lane without memory, and five butterfly exchanges leave the result in every lane
# (min_llm_inference uses cooperative groups' `cg::reduce`, which does the same). numba-cuda's simulator
# implements no shuffles, so under the simulator the reduction goes through shared memory: every
# lane writes its value, a barrier, every lane folds the warp's 32 values in lane order, a
# barrier. The choice is made in one place, `kernels._warp_reductions`, and every warp-reducing
# kernel (`rmsnorm`, `softmax_rows`) calls what it returns. Two more things the simulator taught:
# it has no warp-level barrier (`syncwarp`), so its reduction needs a block-wide one that *every*
# thread must reach -- no kernel that reduces may let a thread return early; and two
# `cuda.shared.array` calls on one source line are given the same buffer, so each allocation
# sits on its own line. A third cost a failed build: the simulator hands out that buffer to
# whichever thread asks first, by a look-up and a store with no lock between them, so two threads
# of a block can each get a buffer of their own and read the other's slots as leftover bytes --
# rarely, when Python switches threads between the two. `llamanb.cuda.sim_shared` puts a lock
# there; on a GPU a block's `__shared__` memory exists before any of its threads runs.
#
# ## 4. The CUDA simulator runs a tiny Llama through the engine
#
# The backend `cuda-simulated` runs the block as launches of these kernels: `rmsnorm`, the
# q/k/v projection, `rope`, `fill_kv`, `qkt`, `softmax_rows`, `softmax_v`, the output
# projection added into `x`, `rmsnorm`, gate|up, `silu_mul`, down added into `x`. The hidden
# state stays in device arrays across all layers of a step. Under the simulator the projections
# run on the host by default: `gemm_nt` (a 16 x 16 shared-memory tiled product, tested on its
# own) would cost seconds per projection there; `gemm="kernel"` runs them through it anyway.
# A random Llama (two layers, GQA with two query heads per K/V head), against the numpy engine.
#
# How close to float64 must the simulator be? Not "within a few times numpy's error": that is a
# guess, and noise can cross it. A bound on the logits themselves would have to carry every
# rounding through two layers; in the worst case it grows by orders of magnitude per layer and
# says nothing. One *launch*, given the float32 values it read, has a tight bound: its own
# roundings, the standard forward error bound on the actual values (a sum of n products in
# float32, in any order, is within $\gamma_n \sum |a_i b_i|$ of the exact sum,
# $\gamma_n = nu/(1-nu)$, $u = 2^{-24}$). `llamanb.cuda.error_bound` records every launch of
# the step (its arguments before and after) and checks each output against float64 of the
# launch's inputs: `qkt` within $\gamma_{d+1}$ scale $\sum|q k|$, `softmax_v` within
# $\gamma_L \sum |p v|$, `fill_kv` exact, and so on (its docstring derives each). A wrong key, a
# stale shared slot, a neighbour's row misses by orders of magnitude; rounding never does.

# %%
from llamanb import Engine  # noqa: E402
from llamanb.cuda.error_bound import launch_error_ratio, recorded  # noqa: E402
from llamanb.cuda.random_model import random_model  # noqa: E402
from llamanb.engine.step import Step  # noqa: E402
from llamanb.platform.progress import stages  # noqa: E402

tiny = LlamaConfig(name="tiny-random", n_layers=2, hidden=32, n_heads=2, n_kv_heads=1,
                   head_dim=16, ffn=64, vocab=64, rope_theta=10000.0, max_seq=32,
                   tie_embeddings=True, eos_ids=(1,))
model = random_model(tiny, seed=0, std=0.3)
sim, ref = Engine(model, "cuda-simulated"), Engine(model)
print(sim.backend.description)

# %%
prompt = [5, 17, 33, 9]
cs, cr = sim.new_cache(16), ref.new_cache(16)
toks_sim, toks_ref = [], []
with stages() as say, recorded(sim.backend) as log:   # every launch: its arguments before and after
    say("the prefill, simulated and on numpy")
    ls, lr = sim.prefill(prompt, cs), ref.prefill(prompt, cr)
    for i in range(3):
        say(f"decode step {i + 1} of 3, simulated and on numpy")
        toks_sim.append(int(np.argmax(ls)))
        toks_ref.append(int(np.argmax(lr)))
        ls, lr = sim.decode(toks_sim[-1], cs), ref.decode(toks_ref[-1], cr)
print("CUDA simulator, greedy tokens:", toks_sim)
print("numpy engine,   greedy tokens:", toks_ref)
assert toks_sim == toks_ref
ratios = {}                                         # kernel -> error / bound of each launch
with stages() as say:
    for n, (name, before, after) in enumerate(log):
        say(f"launch {n + 1} of {len(log)} ({name}) against float64 on its inputs")
        ratios.setdefault(name, []).append(launch_error_ratio(name, before, after))
assert all(r <= 1.0 for rs in ratios.values() for r in rs), ratios
print(f"{len(log)} launches, each within its derived float32 bound of float64 on its inputs:")
print({name: len(rs) for name, rs in ratios.items()})

# %% [markdown]
# ## 5. Continuous batching on a device
#
# min_llm_inference keeps the batch on the GPU as `lengths[b]` (0 = an empty slot) and `new_batch_idx`
# (the slots that received a prompt this round); the host only refills slots that the decoder
# freed. The port takes the engine's `Step` -- rows of several sequences, each segment a run of
# one slot's positions -- and turns it into the same kind of device arrays, uploaded once per
# step: per row its slot and its key count (`row_len`, the original's `lengths`, but per query row:
# a prefilled prompt's row `i` sees `i + 1` keys), per segment its slot, first row, start and
# length (what `new_batch_idx` names). One mixed step: slot 0 prefills two tokens, slot 2
# decodes its third, slot 1 prefills one:

# %%
cache = sim.new_cache(16, slots=3)
sim.prefill([40, 41], cache, slot=2)
step = Step.build([(0, 0, [7, 8]), (2, 2, [44]), (1, 0, [60])])
real = step.slots >= 0
print("row_slot ", np.where(real, step.slots, 0).tolist())
print("row_len  ", np.where(real, step.positions + 1, 0).tolist())
print("segments ", [(s.slot, s.row, s.start, s.n) for s in step.segments], "(slot, row, start, n)")
got = sim.step(step, cache)
alone = [ref.step(Step.build(p), ref.new_cache(16))[0]
         for p in ([(0, 0, [7, 8])], [(0, 0, [40, 41, 44])], [(0, 0, [60])])]
assert [int(np.argmax(g)) for g in got] == [int(np.argmax(a)) for a in alone]
print("CUDA simulator, one mixed step: each row's next token as the numpy engine's alone; "
      "lengths after:", cache.lengths.tolist())

# %% [markdown]
# min_llm_inference's decoder closes the loop on the device: one block per slot takes the argmax of the
# logits (a shared-memory tree over 256 threads), writes the token, advances `lengths` -- or sets
# it to 0 when the token is EOS or the slot is full -- and writes the next input row. The port's
# `argmax_decode` does the same with a Llama's input (the token's embedding row; RoPE replaces
# the original's position table), and breaks ties towards the lowest id, as `np.argmax` does. Four
# slots: empty, decoding, choosing EOS (id 1), and at its last position:

# %%
logits = ref.backend.head(ref.backend.embed(np.array([3, 4, 5, 6])))          # [4, V]
logits[2, 1] = logits[2].max() + 1.0                                # slot 2 picks EOS
lengths = np.array([0, 6, 9, 15], np.int32)
tokens, x_next = np.zeros(4, np.int32), np.zeros((4, tiny.hidden), np.float32)
k4 = kernels.build(kernels.SIM_TILE)
k4.argmax_decode[launch.argmax_decode(4, kernels.SIM_TILE)](
    logits, lengths, tokens, 1, 16, model.weights.embed, x_next)
assert tokens.tolist()[1:] == [int(np.argmax(r)) for r in logits[1:]]      # slot 0 is empty
assert lengths.tolist() == [0, 7, 0, 0]               # advanced; EOS and full slots freed
print("CUDA simulator: tokens", tokens.tolist(), "| lengths", lengths.tolist(),
      "| numpy argmax", [-1] + [int(np.argmax(r)) for r in logits[1:]])

# %% [markdown]
# Which id is "the largest" when there is no finite maximum? `np.argmax` counts a NaN as larger
# than every number (the first NaN wins) and picks the first of equal values, so an all-NaN and
# an all `-inf` row both give 0. A kernel whose threads start from `(-inf, V)` and compare with
# `x > best` never moves on such a row and returns `V`: one past the vocabulary, and then it reads
# `emb[V]`. Both forms of `argmax_decode` compare as `np.argmax` does:

# %%
odd = np.stack([np.full(tiny.vocab, np.nan), np.full(tiny.vocab, -np.inf)]).astype(np.float32)
odd_tokens, odd_lengths = np.full(2, -2, np.int32), np.full(2, 3, np.int32)
k4.argmax_decode[launch.argmax_decode(2, kernels.SIM_TILE)](
    odd, odd_lengths, odd_tokens, 1, 16, model.weights.embed, np.zeros((2, tiny.hidden), np.float32))
assert odd_tokens.tolist() == [int(np.argmax(r)) for r in odd] == [0, 0]
print("all-NaN and all -inf rows: tokens", odd_tokens.tolist(), "as np.argmax")

# %% [markdown]
# Slot 1 advanced to 7 with its token's embedding in `x_next`; slot 2 chose EOS and slot 3 hit
# the length limit (16): both are 0 now, free for the host to refill. Through the engine, the
# same loop is `llamanb.serve`'s scheduler driving `Engine.step` on this backend (tested in
# `tests/cuda/test_cuda_backend.py`: a two-slot batch gives every request the tokens it gets alone).
#
# ## 6. The CUDA C++ form, compiled: PTX of one kernel
#
# `kernels/cuda/llama_kernels.cu` is the same design in CUDA C++ (min_llm_inference's language), self-
# contained so that NVRTC -- CUDA's compiler as a library, a pip wheel -- compiles it as well as
# nvcc. Neither needs a GPU. **PTX** is NVIDIA's virtual instruction set (what a driver can
# still compile for a newer GPU); **SASS** is one architecture's machine code, in a cubin.
# `tests/cuda/test_cuda_compile.py` builds both for sm_80 (A100) and sm_90 (H100) and checks every
# entry point in each. Here, the PTX of `softmax_rows` for sm_90:

# %%
from llamanb.cuda import compile as cuda_compile  # noqa: E402

using = cuda_compile.compiler("nvrtc") or cuda_compile.compiler()
ptx = cuda_compile.compile_cuda("sm_90", "ptx", using).decode()
entries = cuda_compile.ptx_entries(ptx)
assert sorted(entries) == sorted(cuda_compile.ENTRY_POINTS)
print("entry points:", ", ".join(sorted(entries)))
body = ptx[ptx.index(".entry softmax_rows"):]
body = body[:body.index("\n}\n")]
assert body.count("shfl.sync.bfly.b32") == 10        # five exchanges for the max, five for the sum
print("softmax_rows: 10 butterfly shuffles (shfl.sync.bfly.b32)")

# %%
# NBVAL_IGNORE_OUTPUT
lines = body.splitlines()
print(f"compiled by {using}; {len(lines)} lines of PTX. The head and the first shuffles:")
print("\n".join(lines[:6]))
print("   ...")
print("\n".join(line for line in lines if "shfl" in line))

# %% [markdown]
# The butterfly is there (asserted above): ten `shfl.sync.bfly` instructions, the loop unrolled into five
# exchanges (offsets 16, 8, 4, 2, 1) for the maximum and five for the sum. The numba-cuda kernels compile to PTX too, without a GPU, by NVVM
# (`tests/cuda/test_cuda_compile.py` checks that their GPU branch uses the same shuffles and that
# `ptxas` assembles it for both architectures) -- what the simulator, which interprets Python,
# never checks.
#
# ## 7. Where the port departs from the original
#
# Every departure has one reason: min_llm_inference runs a one-head model with a learned position
# table; a Llama has grouped K/V heads, RoPE between projection and cache, and checkpoints that
# store weights `[out, in]`; and the port must also run in a simulator without shuffles or
# `float4`.
#
# > **Going deeper: the departures, one by one.**
#
# | min_llm_inference | the port | why |
# |---|---|---|
# | one attention head, `dim` wide | `N_h` query heads over `N_kv` K/V heads (GQA): `kt [slots, N_kv, d, S]`, a grid row per (row, head) | a Llama |
# | `fill_new_kt_v_cache` projects K/V inside its tiled product and stores them | projections first (`gemm_nt`), `rope`, then `fill_kv` moves rows through a transposing tile | RoPE sits between projection and cache |
# | `get_latest_kt_q_v` for each slot's newest row | a decode row is a segment of one; the same launches | one code path for prefill, decode and mixed steps |
# | attention only for each slot's last row | every row of the step attends, causally (`row_len = position + 1`) | several layers: every position's output feeds the next layer's K/V |
# | weights `[input_dim, output_dim]` | weights `[out, in]` as checkpoints store them: `gemm_nt` computes `a wᵀ`, both tiles read along K | no transposed copy |
# | `float4` loads in softmax; `n_sequence % 4 == 0` asserted | scalar loads, any length | numba has no `float4`; lengths free |
# | softmax zeroes scores past the length | reads and writes only keys below the length | `softmax_v` reads no further |
# | `qkt` divides by `sqrtf(dim)` | multiplies by `d^-1/2`, as the numpy engine does | the same rounding as the reference |
# | `cg::reduce` in a warp | `_warp_reductions`: shuffles on a GPU, shared memory in the simulator | the simulator has no shuffles |
# | decoder: ties go to whichever partial wins the tree | ties go to the lowest id | the same token as `np.argmax` |
# | decoder writes `emb + wpe` as the next input | writes the embedding row only | RoPE instead of a position table |
# | one cache, per slot, `n_sequence` positions | a device mirror of the engine's KV store, written back to the store each step | the engine's store (paged or contiguous) stays the record |
#
# ## 8. What a GPU run measured: nothing yet
#
# **No GPU numbers have been recorded yet.** Everything above ran in numba-cuda's simulator or
# was compiled without a GPU; the `cuda` backend has not run on a GPU. `scripts/gpu_check.sh` is
# prepared for one, and says how it checks itself:
#
# - **agreement** with transformers, teacher-forced (fp32, TF32 off, the same GPU, the same
#   random weights drawn on the device at SmolLM2-135M and Llama-3.2-1B shapes): a 384-token
#   prompt, then 32 decode steps, each fed the next token of a fixed sequence; at every step
#   the largest logit error relative to the largest logit and whether the argmax agrees --
#   once with cuBLAS projections, once with the course's `gemm_nt`;
# - a **mixed continuous-batching step** (four prompts of different lengths prefilled in one
#   step, then eight decode steps of all four together) against each sequence alone;
# - `gemm_nt` **against cuBLAS** at the models' projection shapes, both held to `gamma_K`;
#   the C++ kernels against the numba ones (the NaN rows above included);
# - **speed**: decode at batch 1 beside transformers' eager decode on the same card, and batch
#   8 and 32 decode throughput beside the card's memory roofline -- the bytes a decode step
#   must read (the weights once, each sequence's keys and values) over a measured
#   device-to-device copy bandwidth. No launch-reducing lever (fused launches, graph replay)
#   is in the backend yet, so none is claimed to help.
#
# A reader with an NVIDIA GPU (numba-cuda, CuPy, torch and transformers installed) runs, from
# the repository root, first the probe -- the versions and one kernel launch, under a minute --
# then the whole check, under five minutes, each under one timeout:
#
#     PYTHON=/path/to/venv/bin/python3 sh scripts/gpu_check.sh --probe
#     PYTHON=/path/to/venv/bin/python3 OUT=results sh scripts/gpu_check.sh
#
# Name the interpreter by its real path (a symlink to a venv's interpreter loses the venv).
# The results land in `$OUT/gpu_check.json`; `--dry-run` runs the same code here in the
# simulator (the tests do), its timings labelled meaningless. A run's JSON, stored as
# `data/gpu_check/gpu_check_<date>.json` with the card named in it, is what the cell below
# shows; until one is stored it says so.

# %%
# NBVAL_IGNORE_OUTPUT
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import llamanb  # noqa: E402

stored = sorted((Path(llamanb.__file__).resolve().parents[1] / "data" / "gpu_check")
                .glob("gpu_check_*.json"))
if not stored:
    print("No GPU run recorded yet (data/gpu_check/ holds no gpu_check_<date>.json).")
else:
    run = json.loads(stored[-1].read_text())
    print(f"{stored[-1].name}: {run[0].get('device')}, torch {run[0].get('torch')}")
    for r in run[1:]:
        print(" ", r["check"], "|", {k: v for k, v in r.items() if k != "check"})

# %% [markdown]
# ## Exercises
#
# Three functions to write; each is checked against the package or closed-form math. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it; it
# prints one line (`passed`, the first case that differs with a hint, or `not attempted yet`).
# Solutions: `solutions/12_cuda_kernels.py`.

# %%
from llamanb.course.exercises import ch12  # noqa: E402

# %% [markdown]
# ### 12.1 Where a key lives
#
# Write `kt_offset(slot, head, c, j, n_kv, d, S)`: the flat index of dimension `c` of key `j`
# (K/V head `head`, slot `slot`) in `kt [slots, N_kv, d, S]`, row-major. *Hint:* section 2.

# %%
def kt_offset(slot: int, head: int, c: int, j: int, n_kv: int, d: int, S: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch12.kt_offset(kt_offset)

# %% [markdown]
# ### 12.2 A grid for the cache fill
#
# Write `fill_grid(seg_lengths, n_kv, d, tile)`: the `((gx, gy, gz), (bx, by))` launch of
# `fill_kv` for a step whose segments have `seg_lengths` rows. Checked against
# `llamanb.cuda.launch.fill_kv`. *Hint:* sections 1 and 2.

# %%
def fill_grid(seg_lengths: list[int], n_kv: int, d: int, tile: int):
    raise NotImplementedError  # your code here


# %%
ch12.fill_grid(fill_grid)

# %% [markdown]
# ### 12.3 A masked softmax row
#
# Write `masked_softmax_row(scores, length)`: the softmax of `scores[:length]` in float64, zeros
# after it (what one warp of `softmax_rows` leaves for `softmax_v`). *Hint:* section 3.

# %%
def masked_softmax_row(scores: np.ndarray, length: int) -> np.ndarray:
    raise NotImplementedError  # your code here


# %%
ch12.masked_softmax_row(masked_softmax_row)
