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
#     builds: each kernel's tiles and L1 budget, here and at Llama-3.2-1B's shapes
#     modules:
#     - llamanb.npu.compiler.plan
#     - llamanb.npu.compiler.array
#     part: II
# ---

# %% [markdown]
# # 05b · Tiles and the L1 budget: what fits a compute tile
#
# **What you will build.** A tile budget for every kernel of notebook 05: how many of the NPU2's 32
# compute tiles each one lights, and how many bytes each of those tiles must hold in its 64 KiB of
# L1. On a GPU or CPU a kernel that needs more memory than is close by spills to a cache; on the
# NPU there is no cache, so a kernel whose buffers do not fit a tile does not compile. That is *why*
# the tile sizes of notebook 05 are what they are, and why two of the kernels at Llama-3.2-1B's
# shapes must give up double buffering. You will read each module's launch plan back from its
# text, see the tiles it uses (widget and static figure), then build the kernels at the shapes of
# the model the MLIR-AIR guide runs and check each against a tile's memory.

# %% [markdown]
# ## 0. Setup
#
# The seven builders of notebook 05 at the embedded model's shapes (SmolLM2-135M), 64 prefill rows
# as there. Building a kernel only writes its MLIR text; nothing runs in this notebook.

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt

from llamanb import load_model
from llamanb.npu.compiler.array import NPU2, l1_need, omit_pingpong_of
from llamanb.npu.compiler.builders import add, flash_attn, gemm, gemv, rmsnorm, rope, silu_and_mul
from llamanb.npu.compiler.plan import read_plan
from llamanb.npu.compiler.verify import verify

cfg = load_model().config
H, Nh, Nkv, d, F, V = cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn, cfg.vocab
S = 64                                        # prefill rows, as in notebook 05
kernels = {"rmsnorm": rmsnorm(S, H, cfg.rms_eps), "gemm (q)": gemm(S, H, Nh * d),
           "rope (q)": rope(S, Nh, d), "flash_attn": flash_attn(S, Nh, Nkv, d, num_q_tiles=2),
           "add (2D->1D)": add(S, H, flat=(False, False, True)), "silu_and_mul": silu_and_mul(S, F),
           "gemv (lm head / 8)": gemv(V // 8, H)}
for spec in kernels.values():
    verify(spec.text)                         # each module sound, as in notebook 05
print(f"{NPU2.name}: {NPU2.compute_tiles} compute tiles, L1 {NPU2.l1_bytes // 1024} KiB per tile "
      f"({NPU2.stack_bytes // 1024} KiB of it the core's stack)")

# %% [markdown]
# ## 1. Tiles used per kernel
#
# The launch plan is read back from each module's text (`llamanb.npu.compiler.plan`): launch order,
# which function argument each launch touches, the herds with their sizes and unrolled segment
# copies, the kernel each herd runs and the L1/L2 buffers it holds. Per kernel: the herd, the tiles
# it lights, the L1 its buffers take on each tile (once, and *as compiled*, see below), the L2 its
# segment holds, and the C++ kernel it calls, if any.

# %%
print(f"{'kernel':19s} {'herd':8s} {'tiles':>5s} {'L1 KiB':>7s} {'as compiled':>11s} {'L2 KiB':>7s}"
      f"  C++ kernel -> object")
for name, spec in kernels.items():
    (lp,) = read_plan(spec.text).launches
    (h,) = lp.herds
    herd = f"{h.size[0]}x{h.size[1]}" + (f" x{h.instances}" if h.instances > 1 else "")
    ext = ", ".join(f"@{s} -> {o}" for s, o in h.externs) or "none (codegen)"
    compiled = l1_need(h, omit_pingpong_of(spec))
    assert h.l1_bytes <= compiled <= NPU2.l1_for_buffers          # every kernel fits, as compiled
    print(f"{name:19s} {herd:8s} {h.tiles:2d}/{NPU2.compute_tiles} {h.l1_bytes / 1024:7.1f} "
          f"{compiled / 1024:11.1f} {lp.l2_bytes / 1024:7.1f}  {ext}")
assert [n for n, s in kernels.items() if read_plan(s.text).launches[0].herds[0].tiles
        == NPU2.compute_tiles] == ["gemm (q)"]                   # only the GEMM fills the array

# %% [markdown]
# "As compiled" counts what the real compiler allocates with *ping-pong*, its default: a second
# copy of every buffer a DMA fills, so one copy is filled while the core works on the other;
# FlashAttention is compiled with `omit_pingpong="all"`. Only the GEMM fills the array. The widget
# lights each launch's tiles on the 8 × 6 grid; the static figure shows all.

# %%
# NBVAL_IGNORE_OUTPUT
from ipywidgets import VBox

from llamanb.course.widgets import kernel_notice
from llamanb.npu.compiler import tileview

VBox([kernel_notice(), tileview.widget(kernels)])    # the notice shows only once the kernel is gone

# %%
fig = tileview.overview(kernels, ncols=3)            # 3 across, 7.8 in: Lab draws it full size
plt.show()

# %% [markdown]
# ## 2. The same builders at Llama-3.2-1B's shapes
#
# The builders are the same for the model the MLIR-AIR guide runs (hidden 2048, 32 / 8 heads, FFN
# 8192, sequence 2048). Emitted and verified only (running 1B numerics on an emulator is not the
# point); per tile, L1 single- and double-buffered against the 64 KiB a tile has:

# %%
from llamanb import LLAMA32_1B as L1B

big = {"rmsnorm": rmsnorm(2048, L1B.hidden, L1B.rms_eps), "gemm q": gemm(2048, L1B.hidden, L1B.hidden),
       "gemm down": gemm(2048, L1B.ffn, L1B.hidden), "gemv q": gemv(L1B.hidden, L1B.hidden),
       "gemv down": gemv(L1B.hidden, L1B.ffn, symbol="matvec_bf16_k8192", link_with="mv_k8192.o",
                         omit_pingpong="all"),
       "rope q": rope(2048, L1B.n_heads, L1B.head_dim), "silu_and_mul": silu_and_mul(2048, L1B.ffn),
       "flash_attn": flash_attn(2048, L1B.n_heads, L1B.n_kv_heads, L1B.head_dim),
       "add": add(2048, L1B.hidden)}
print(f"{'kernel':13s} {'herd':9s} tiles  L1 KiB/tile: single / double / as compiled (of "
      f"{NPU2.l1_bytes // 1024}, {NPU2.l1_for_buffers // 1024} beside the stack; * too big)")
for name, spec in big.items():
    verify(spec.text)
    h = read_plan(spec.text).launches[0].herds[0]
    herd = f"{h.size[0]}x{h.size[1]}" + (f" x{h.instances}" if h.instances > 1 else "")
    need = l1_need(h, omit_pingpong_of(spec))
    assert need <= NPU2.l1_for_buffers, name                 # as compiled, every kernel fits
    star = lambda b: f"{b / 1024:5.1f}" + ("*" if b > NPU2.l1_for_buffers else " ")   # noqa: E731
    print(f"{name:13s} {herd:9s} {h.tiles:4d}   {star(h.l1_bytes)} / {star(l1_need(h, ''))} / "
          f"{star(need)}"
          + ("   (omit_pingpong='all')" if omit_pingpong_of(spec) else ""))
too_big = [n for n, s in big.items() if l1_need(read_plan(s.text).launches[0].herds[0], "")
           > NPU2.l1_for_buffers]
assert too_big == ["gemv down", "flash_attn"]                # double-buffered, only these two overflow
assert all(omit_pingpong_of(big[n]) for n in too_big)

# %% [markdown]
# Double-buffered, the K = 2048 GEMV fits; the down GEMV (K = 8192) and FlashAttention do not, so
# both are built with `omit_pingpong="all"`.
#
# > **Going deeper: where the guide differs.** The guide compiles its `o_gemv_ffn` and `flash_attn`
# with `omit_pingpong="all"` too (`shared/infra/backend_presets.py`), and aircc's ping-pong is
# `air-ping-pong-transform` (`tools/aircc/aircc.cpp`). Its GEMV's data path is two-level, on
# purpose different here: weight panel DDR → L2 per launch iteration, `m_input`-row windows L2 → L1,
# the vector DDR → L1 every trip (`matrix_vector_multiplication/bf16/matvec.py`). This builder
# streams weight blocks DDR → L1 and stages `x` in L2 once: one loop level less to read, with the
# same L1 blocks, which decide what fits. More: `docs/corrections.md`, "NPU2 (chapters 05–07)".

# %% [markdown]
# ## Summary
#
# * A kernel's launch plan -- herds, tiles, L1 and L2 buffers -- is read back from its MLIR text;
#   at the embedded model's shapes only the GEMM lights all 32 tiles.
# * What fits a tile decides the tile sizes: a compute tile has 64 KiB of L1, 1 KiB of it the
#   core's stack, and ping-pong doubles every buffer a DMA fills.
# * At Llama-3.2-1B's shapes every kernel fits as compiled, the down GEMV and FlashAttention only
#   without ping-pong (`omit_pingpong="all"`), as the MLIR-AIR guide compiles them too.
#
# **Next — 06:** stitching the kernels into multi-launch modules, one ELF and one dispatch each.

# %% [markdown]
# ## Exercises
#
# Three functions to write about the GEMV's tile plan (notebook 05, §3.7); each is checked against
# the builder and the array model. Replace `raise NotImplementedError` with your code and run the
# cell, then run the check below it; it prints one line (`passed`, the first case that differs
# with a hint, or `not attempted yet`). Solutions: `solutions/05b_npu_tiles.py`.

# %%
from llamanb.course.exercises import ch05b

# %% [markdown]
# ### 05b.1 The builder's tile
#
# A GEMV `y [m] = a [m, k] @ x [k]` on a herd of `tiles` tiles gives each tile `m / tiles` output
# rows, which it streams `tile_m` rows at a time. Write `gemv_tile_m(m, k, tiles)`: the `tile_m`
# the builder picks by default -- the largest that divides a tile's rows and keeps the bf16 weight
# block within 16 KiB. Checked against `gemv(m, k, herd_xy=(tiles, 1)).tiles["tile_m"]`.

# %%
def gemv_tile_m(m: int, k: int, tiles: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch05b.gemv_tile_m(gemv_tile_m)

# %% [markdown]
# ### 05b.2 What one tile holds
#
# Write `gemv_l1_bytes(tile_m, k)`: the bytes of L1 buffers one tile of the GEMV herd allocates.
# Checked against the buffers `read_plan` finds in the built module's text. *Hint:* print
# `gemv(64, 64).text` and find the `memref.alloc`s in memory space 2 (L1).

# %%
def gemv_l1_bytes(tile_m: int, k: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch05b.gemv_l1_bytes(gemv_l1_bytes)

# %% [markdown]
# ### 05b.3 The largest tile that fits
#
# Write `largest_tile_m(m, k, tiles)`: the largest `tile_m` dividing a tile's rows for which the
# emulated NPU2 accepts the module compiled as XRTBackend compiles by default -- with ping-pong,
# so every buffer a DMA fills is held twice -- i.e. whose buffers fit a compute tile's L1.
# Checked by building `gemv(..., tile_m=t)` for every divisor. *Hint:* section 0: how much of a
# tile's 64 KiB is there for buffers, and which of the three are DMA-fed?

# %%
def largest_tile_m(m: int, k: int, tiles: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch05b.largest_tile_m(largest_tile_m)
