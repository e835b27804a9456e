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
#     builds: the KV cache's bytes per token, sequence and batch; when it outweighs
#       the weights
#     modules:
#     - llamanb.model.config
#     part: I
# ---

# %% [markdown]
# # 04c · What the KV cache costs
#
# **What you will build.** The memory bill of the KV cache, as a formula you derive and check in
# integers. Notebook 04 showed that the cache makes decoding cheap in arithmetic: each new token is
# one row through the model. The price is memory, and it grows with every token of every sequence
# a server holds -- for a large model serving a batch, it outweighs the weights themselves. That
# is *why* grouped-query attention, paged caches (chapter 10) and 8-bit caches exist. You will count
# the cache's bytes for the course's three models, see where it overtakes the weights, and check
# the formula against what this machine's allocator hands out for a real cache.

# %% [markdown]
# ## 0. Setup
#
# Three configs: the embedded SmolLM2-135M, Llama-3.2-1B (the model the MLIR-AIR guide runs) and
# Llama 3 70B (a server's model). Only their shapes are needed; the embedded model's weights load
# for section 4.

# %%
import tracemalloc
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import LLAMA3_70B, LLAMA32_1B, SMOLLM2_135M, Engine, load_model

model = load_model()
engine = Engine(model)                      # the numpy reference backend, float32
cfg = model.config
L, N_kv, d_h = cfg.n_layers, cfg.n_kv_heads, cfg.head_dim
print(f"{cfg.name}: L = {L}, N_h = {cfg.n_heads}, N_kv = {N_kv}, d_h = {d_h}")

# %% [markdown]
# ## 1. Bytes per token, per sequence, per batch
#
# Count what is stored (notebook 04, section 1: two arrays `[L, N_kv, capacity, d_h]`). For each
# of the `L` layers, each of the `N_kv` KV heads and each position, the cache holds one key vector
# and one value vector of `d_h` numbers each: `2 · L · N_kv · d_h` numbers per token. A batch of
# `batch` sequences of `seq` tokens each, stored with `bytes_per_element` bytes per number,
# therefore needs
#
# $$\text{bytes} = 2 \cdot L \cdot N_{kv} \cdot d_h \cdot \text{seq} \cdot \text{batch} \cdot \text{bytes\_per\_element}.$$
#
# The query heads do not appear (grouped-query attention shrinks the cache by `N_h / N_kv`). By hand,
# in integers, for the course's three models, against `LlamaConfig.kv_bytes(seq, fmt, batch)`:

# %%
BYTES = {"bf16": 2, "fp32": 4}


def kv_bytes_by_hand(c, seq: int, fmt: str, batch: int = 1) -> int:
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * seq * batch * BYTES[fmt]


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:,.0f} GiB"


cases = [(SMOLLM2_135M, 8192, 1), (LLAMA32_1B, 2048, 1), (LLAMA3_70B, 8192, 32)]
print(f"{'model':22s} {'L':>3s} {'N_kv':>4s} {'d_h':>4s} {'seq':>5s} {'batch':>5s}"
      f" {'per token (bf16)':>17s} {'bf16':>8s} {'fp32':>8s}")
for c, seq, batch in cases:
    row = {}
    for fmt in BYTES:
        n = kv_bytes_by_hand(c, seq, fmt, batch)
        assert n == c.kv_bytes(seq, fmt, batch)
        row[fmt] = n
    per_tok = kv_bytes_by_hand(c, 1, "bf16")
    assert per_tok == c.kv_bytes_per_token("bf16")
    print(f"{c.name:22s} {c.n_layers:3d} {c.n_kv_heads:4d} {c.head_dim:4d} {seq:5d} {batch:5d}"
          f" {per_tok / 1024:13.1f} KiB {mib(row['bf16']):>8s} {mib(row['fp32']):>8s}")

# %% [markdown]
# ## 2. One row in detail
#
# Llama-3.2-1B at 2048 tokens in bf16: K alone, K and V, and what the cache would be without
# grouped-query attention (one KV head per query head).

# %%
k_half = LLAMA32_1B.n_layers * LLAMA32_1B.n_kv_heads * 2048 * LLAMA32_1B.head_dim * 2
both = LLAMA32_1B.kv_bytes(2048, "bf16")
no_gqa = LLAMA32_1B.replace(n_kv_heads=LLAMA32_1B.n_heads).kv_bytes(2048, "bf16")
assert k_half == 2**25 and both == 2 * k_half == 67_108_864
assert no_gqa == LLAMA32_1B.n_heads // LLAMA32_1B.n_kv_heads * both      # GQA saves N_h / N_kv = 4x
assert LLAMA32_1B.n_params() == 1_235_814_400                             # the published count
print(f"Llama-3.2-1B, 2048 tokens, bf16: K alone {k_half:,} B = {mib(k_half)}")
print(f"  K + V {int(both):,} B = {mib(both)}; without GQA {mib(no_gqa)}")

# %% [markdown]
# > **Going deeper.** The MLIR-AIR Llama-3.2-1B guide's "~32 MB" KV cache at 2048 tokens is the
# K half alone, the first number above (`docs/corrections.md`, chapter 04).

# %% [markdown]
# ## 3. When the cache outweighs the weights
#
# Is that a lot? Compare with the weights, which are read once per decode step whatever the batch.
# The cache grows with every token of every sequence in the batch; the point where it outweighs the
# weights is `weight_bytes / kv_bytes_per_token` tokens in flight: printed below. The star marks
# Llama 3 70B with 32 sequences of 8192 tokens (the last row of section 1's table): tens of
# gigabytes, yet still under the 70B's weights -- GQA's eight KV heads at work.

# %%
tokens = np.logspace(2, 6.3, 200)                                   # seq * batch
fig, ax = plt.subplots(figsize=(7, 4))
for c, color in zip([SMOLLM2_135M, LLAMA32_1B, LLAMA3_70B], ["#4c72b0", "#55a868", "#c44e52"]):
    ax.loglog(tokens, c.kv_bytes_per_token("bf16") * tokens / 2**30, color=color,
              label=f"{c.name}: KV cache")
    ax.axhline(c.weight_bytes("bf16") / 2**30, color=color, ls="--", lw=1)
    cross = c.weight_bytes("bf16") / c.kv_bytes_per_token("bf16")
    ax.plot([cross], [c.weight_bytes("bf16") / 2**30], "o", color=color)
    print(f"{c.name:22s} weights {c.weight_bytes('bf16') / 2**30:6.2f} GiB;"
          f" the cache matches them at {round(cross, -2):>9,.0f} tokens in flight")
star = LLAMA3_70B.kv_bytes(8192, "bf16", 32)
assert star < LLAMA3_70B.weight_bytes("bf16")                      # the star lies below its line
ax.plot([8192 * 32], [star / 2**30], "*", color="#c44e52", ms=12, label="70B, 8192 tokens x batch 32")
ax.set_xlabel("tokens in flight (seq x batch)", fontsize=10)
ax.set_ylabel("GiB (bf16)", fontsize=10)
ax.tick_params(labelsize=9)
ax.set_title("KV cache (solid) vs weights (dashed)", fontsize=10)
ax.legend(fontsize=9)
plt.show()

# %% [markdown]
# ## 4. Our own cache, counted by the allocator
#
# `engine.new_cache(64)` allocates `capacity` positions of float32, the capacity rounded up to the
# multiple of positions the backend asks for (notebook 04, section 1): its size is the formula with
# `seq = capacity`, not 64 and not the rows in use. An independent count of the same bytes:
# Python's `tracemalloc`, which numpy reports every array allocation to, measures what the
# allocator hands out while the cache is made. (The arrays come from `np.zeros`, which the operating
# system maps lazily: untouched pages cost no physical memory until they are written; the
# allocation is still this size.)

# %%
tracemalloc.start()
before = tracemalloc.get_traced_memory()[0]
cache = engine.new_cache(64)
allocated = tracemalloc.get_traced_memory()[0] - before
tracemalloc.stop()
ours = cache.k.nbytes + cache.v.nbytes
assert ours == cache.nbytes == kv_bytes_by_hand(cfg, cache.capacity, "fp32") == cfg.kv_bytes(
    cache.capacity, "fp32")
assert ours <= allocated < ours + 64 * 1024          # the two arrays, plus a few small objects
print(f"capacity {cache.capacity} for max_seq {cache.max_seq}: 2 * {L} * {N_kv} * {d_h} * "
      f"{cache.capacity} * 4 B = {ours:,} B ({ours / 2**20:.2f} MiB)")
print(f"allocated while it was made: the arrays' {ours:,} B plus under 64 KiB of bookkeeping")

# %% [markdown]
# Capacity rounding costs memory that a cache which grows by exactly one row per token does not:
# HF transformers' `DynamicCache` concatenates each new row (notebook 04 compared its content with
# ours), and a paged cache (chapter 10) allocates fixed-size blocks as sequences grow.

# %% [markdown]
# ## Summary
#
# * Size: `2 · L · N_kv · d_h · seq · batch · bytes_per_element` (`LlamaConfig.kv_bytes`,
#   `kv_bytes_per_token`); section 1's table gives it for three models, from megabytes for the
#   embedded model to tens of gigabytes for Llama 3 70B serving a batch. Grouped-query attention
#   divides it by `N_h / N_kv`.
# * The cache overtakes the weights at `weight_bytes / kv_bytes_per_token` tokens in flight
#   (section 3): a long context or a large batch.
# * A real cache holds its capacity, not its length; the allocator's count agrees with the formula
#   to the byte, beside a few small objects.
#
# **Next — 05 · NPU kernels:** the block's matrix products as MLIR-AIR kernels for AMD's NPU2.
# Decode there is the one-row (GEMV) path of notebook 04; in the published Llama-3.2-1B example
# the attention over the cache stays on the CPU.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against the finished code in `llamanb`. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it; it
# prints one line (`passed`, the first case that differs with a hint, or `not attempted yet`).
# Solutions: `solutions/04c_kv_cache_cost.py`.

# %%
from llamanb.course.exercises import ch04c

# %% [markdown]
# ### 04c.1 Bytes per token
#
# Write `kv_bytes_per_token(c, bytes_per_element)`: the cache bytes one more position costs for
# the config `c`, at 2 (bf16) or 4 (float32) bytes per number. Checked against
# `LlamaConfig.kv_bytes_per_token`. *Hint:* section 1; which head count is it?

# %%
def kv_bytes_per_token(c, bytes_per_element: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch04c.kv_bytes_per_token(kv_bytes_per_token)

# %% [markdown]
# ### 04c.2 How many sequences fit
#
# Write `max_batch(c, seq, memory_bytes)`: how many sequences of `seq` tokens an accelerator with
# `memory_bytes` of memory can serve at once, holding the model's weights and every sequence's KV
# cache in bf16 (nothing else). Checked against `LlamaConfig.weight_bytes` and `kv_bytes`.
# *Hint:* sections 1 and 3; what if the weights alone do not fit?

# %%
def max_batch(c, seq: int, memory_bytes: int) -> int:
    raise NotImplementedError  # your code here


# %%
ch04c.max_batch(max_batch)
