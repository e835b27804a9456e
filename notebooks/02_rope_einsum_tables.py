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
#     builds: RoPE from its frequencies to one rotation-table einsum, and GGUF's Q/K
#       order
#     modules:
#     - llamanb.model.rope
#     - llamanb.model.rope_tables
#     - llamanb.io.gguf
#     part: I
# ---

# %% [markdown]
# # 02 · RoPE as einsum tables
#
# **What you will build.** Rotary position embedding (RoPE), the only place a Llama learns where a
# token sits: its frequencies (and Llama 3's rescaled ones), the two ways of pairing a head's
# dimensions (HF's half-split, llama.cpp's interleaved), and a table of 2×2 rotations
# `[s_max, d/2, 2, 2]` that applies RoPE with one einsum, the form a tensor-contraction accelerator
# such as Furiosa's TCP wants. You will prove the table equals the engine's RoPE up to a permutation
# of the head dimension, that scores after RoPE depend only on the distance between positions, and
# that GGUF files store the rows of `W_q` and `W_k` in that permuted order. Every result is asserted
# against transformers' own RoPE code, closed-form trigonometry, or the weights it reads from GGUF.

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb.model import rope
from llamanb.model.config import LLAMA32_1B, SMOLLM2_135M, RopeScaling
from llamanb.platform.progress import stages

with stages(prefix="transformers") as say:              # a line while it runs, gone after
    say("importing torch and transformers' Llama rotary embedding")
    import torch
    from transformers import LlamaConfig as HFLlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

torch.manual_seed(0)
np.set_printoptions(precision=4, suppress=True, linewidth=110)


def roundup(err: float) -> float:
    """An error rounded up to a power of ten (1e-6, 1e-5, ...): its order of magnitude, coarse
    enough to print the same from run to run."""
    return 0.0 if err == 0 else float(10.0 ** np.ceil(np.log10(err)))


def at_most(err: float) -> str:
    """'<= 1e-06' (the error rounded up to a power of ten), or '= 0 (bit for bit)'."""
    return "= 0 (bit for bit)" if err == 0 else f"<= {roundup(err):.0e}"

# %% [markdown]
# ## 1. Inverse frequencies
#
# A head vector of size `d` is cut into `d/2` pairs; pair `i` is turned, at position `p`, by the
# angle `p * w_i` with
#
# $$w_i = \theta^{-2i/d}, \qquad i = 0, \dots, d/2 - 1 .$$
#
# Pair 0 turns by one radian per token; the last pair turns almost `theta` times slower. The embedded
# SmolLM2-135M uses `d = 64`, `theta = 1e5`. Derive the frequencies in float64 first.

# %%
d, theta = SMOLLM2_135M.head_dim, SMOLLM2_135M.rope_theta          # 64, 100000.0
i = np.arange(d // 2)                                               # [d/2] pair index
w_ours = theta ** (-2.0 * i / d)                                    # [d/2] float64
print("d =", d, " theta =", theta, " pairs:", w_ours.shape[0])
print("w_0 =", w_ours[0], "  w_1 = theta^(-1/32) =", round(w_ours[1], 6), "  w_31 =", f"{w_ours[-1]:.4e}")

# %% [markdown]
# transformers computes the same numbers in float32 inside `LlamaRotaryEmbedding` (for the plain
# "default" RoPE it calls `compute_default_rope_parameters`; the scaled variants live in
# `transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS`). Build a tiny transformers config with the
# published SmolLM2 numbers and compare, then compare with the engine's `llamanb.model.rope.inv_freq`.

# %%
def hf_config(head_dim, theta, heads, kv_heads, scaling=None, max_pos=8192):
    """A transformers LlamaConfig written from the published numbers."""
    kw = {"rope_scaling": {"rope_type": "llama3", **scaling}} if scaling else {}
    return HFLlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, rope_theta=theta, max_position_embeddings=max_pos, **kw)


hf_smol = hf_config(64, 1e5, heads=9, kv_heads=3)
w_hf = LlamaRotaryEmbedding(hf_smol).inv_freq.numpy()              # [d/2] float32
w_llamanb = rope.inv_freq(d, theta)                                  # [d/2] float32

np.testing.assert_allclose(w_hf, w_ours, rtol=1e-6, atol=0)         # the formula
np.testing.assert_array_equal(w_llamanb, w_hf)                       # bit for bit, as float32
print("dtype:", w_llamanb.dtype, "| llamanb's frequencies are transformers', bit for bit (asserted)")

# %% [markdown]
# The **wavelength** of pair `i` is `2*pi / w_i` tokens: how far apart two positions must be before
# that pair has turned all the way round. Fast pairs repeat every few tokens and can only tell near
# neighbours apart; slow pairs change so little over the context that they act almost like no
# rotation at all. Llama 3 raises `theta` to 5e5, which stretches the slow end further.

# %%
w_llama = rope.inv_freq(64, 5e5)                                     # Llama-3.2-1B before scaling
fig, ax = plt.subplots(figsize=(7, 3.4))
ax.semilogy(i, 2 * np.pi / w_llamanb, "o-", ms=3, label="SmolLM2-135M (theta 1e5)")
ax.semilogy(i, 2 * np.pi / w_llama, "s-", ms=3, label="Llama 3.2 1B, unscaled (theta 5e5)")
ax.axhline(8192, color="gray", ls="--", lw=1)
ax.text(0.5, 8192 * 1.3, "8192 tokens (SmolLM2 context, Llama 3 original)", fontsize=8, color="gray")
ax.set_xlabel("pair index i")
ax.set_ylabel("wavelength 2π / w_i  [tokens]")
ax.set_title("RoPE wavelength per dimension pair (d = 64)")
ax.legend(fontsize=8, loc="lower right")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Llama 3's frequency scaling
#
# Llama 3.1 / 3.2 extend the context from 8192 to 131072 tokens by slowing only the slow pairs.
# With `L = original_max_position_embeddings` and wavelength `lam = 2*pi / w`:
#
# * `lam < L / high_freq_factor` (short waves): kept as they are;
# * `lam > L / low_freq_factor` (long waves): divided by `factor`;
# * in between: a blend `(1 - s) * w / factor + s * w` with `s = (L / lam - low) / (high - low)`,
#   which runs from 0 at the long edge to 1 at the short edge.
#
# Llama-3.2-1B's published values: `factor 32, low_freq_factor 1, high_freq_factor 4, L = 8192,
# theta 5e5`, so the edges are wavelengths 2048 and 8192 tokens.

# %%
SC = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
w0 = 5e5 ** (-2.0 * i / 64)                                          # [32] float64, unscaled
lam = 2 * np.pi / w0
L = SC["original_max_position_embeddings"]
short_edge, long_edge = L / SC["high_freq_factor"], L / SC["low_freq_factor"]   # 2048, 8192 tokens
s = (L / lam - SC["low_freq_factor"]) / (SC["high_freq_factor"] - SC["low_freq_factor"])
w_scaled = np.where(lam < short_edge, w0,
                    np.where(lam > long_edge, w0 / SC["factor"], (1 - s) * w0 / SC["factor"] + s * w0))
kept, blended, divided = lam < short_edge, (lam >= short_edge) & (lam <= long_edge), lam > long_edge
print("pairs kept:", int(kept.sum()), " blended:", int(blended.sum()), " divided by 32:", int(divided.sum()))
print("blended pair indices:", i[blended].tolist(), " ratio w/w':", np.round(w0 / w_scaled, 3)[blended])

# %% [markdown]
# Compare with the engine (`llamanb.model.rope.inv_freq` with a `RopeScaling`, which is what
# `llamanb.model.config.LLAMA32_1B` uses) and with transformers' `ROPE_INIT_FUNCTIONS["llama3"]` on a
# config written from the published numbers.

# %%
w_hf3, attention_factor = ROPE_INIT_FUNCTIONS["llama3"](hf_config(64, 5e5, 32, 8, SC, max_pos=131072), None)
w_hf3 = w_hf3.numpy()                                                # [32] float32
w_llamanb3 = rope.inv_freq(64, 5e5, RopeScaling(**SC))               # [32] float32

np.testing.assert_allclose(w_hf3, w_scaled, rtol=1e-6, atol=0)      # our float64 derivation
np.testing.assert_array_equal(w_llamanb3, w_hf3)                     # the engine, bit for bit
np.testing.assert_array_equal(rope.rope_for(LLAMA32_1B), w_hf3)      # ... through the preset config
assert attention_factor == 1.0
print("attention factor (cos/sin multiplier):", attention_factor)

# %%
fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.4))
regions = [(kept, "kept", "tab:green"), (blended, "blended", "tab:orange"), (divided, "divided by 32", "tab:red")]
for ax in (a1, a2):
    for mask, name, color in regions:
        ax.axvspan(i[mask].min() - 0.5, i[mask].max() + 0.5, color=color, alpha=0.15, label=name)
a1.semilogy(i, w0, "o-", ms=3, color="k", label="original w_i")
a1.semilogy(i, w_llamanb3, "s--", ms=3, color="tab:blue", label="scaled w'_i")
a1.set(xlabel="pair index i", ylabel="frequency [rad / token]")
a1.set_title("Llama-3.2-1B: original vs scaled")
a1.legend(fontsize=7)
a2.plot(i, w0 / w_llamanb3, "o-", ms=3, color="tab:blue")
a2.set(xlabel="pair index i", ylabel="w_i / w'_i")
a2.set_title("slow-down per pair (1 ... 32)")
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 3. Two ways to pair the dimensions
#
# RoPE turns pairs of dimensions, but which two dimensions form pair `i` is a convention:
#
# * **half-split** (HF transformers, GPT-NeoX): dimension `i` pairs with `i + d/2`. HF writes it as
#   `x * cos + rotate_half(x) * sin`. This is `llamanb.model.rope.apply_rope`.
# * **interleaved** (GPT-J, Meta's original Llama code, llama.cpp for the LLAMA architecture):
#   dimension `2i` pairs with `2i + 1`.
#
# Both give pair `i` the same frequency `w_i`. For `d = 8`:

# %%
d8 = 8
half_pair, inter_pair = np.arange(d8) % (d8 // 2), np.arange(d8) // 2   # dim j -> its pair index
print("half-split pairs:  ", [(k, k + d8 // 2) for k in range(d8 // 2)])
print("interleaved pairs: ", [(2 * k, 2 * k + 1) for k in range(d8 // 2)])
fig, axes = plt.subplots(2, 1, figsize=(6, 1.9))
rows = [(axes[0], half_pair, "half-split (HF)"), (axes[1], inter_pair, "interleaved (llama.cpp / GGUF)")]
for ax, pairs, title in rows:
    ax.imshow(pairs[None, :], cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for j, p in enumerate(pairs):
        ax.text(j, 0, f"x{j}\npair {p}", ha="center", va="center", fontsize=7)
    ax.set(xticks=[], yticks=[])
    ax.set_title(title, fontsize=9)
plt.tight_layout()
plt.show()

# %% [markdown]
# ## 4. One rotation table, one einsum
#
# Furiosa's TCP programming book (furiosa-opt, the "Transformer Architecture" page, Llama 3 70B)
# precomputes RoPE as a table `w_rope: shape![s_max, d_k_prime, 2, 2]`, a "pre-computed table of
# cos/sin values based on sequence position and head position", with `d_k' = d_k / 2`: one 2×2
# matrix per position and per frequency. At run time it gathers the rows
# of the current positions and does a single contraction: the head dimension is viewed as
# `[d_k', 2]` (interleaved pairs), and the pair axis is contracted with the first of the two 2×2 axes.
#
# That fixes the table's orientation: the contracted axis is the **input** component `f`, the kept one
# the **output** component `o`, so `table[s, i, f, o]` must hold the *transpose* of the textbook
# rotation matrix:
#
# $$\begin{pmatrix} y_{2i} & y_{2i+1} \end{pmatrix} = \begin{pmatrix} x_{2i} & x_{2i+1} \end{pmatrix}
# \begin{pmatrix} \cos a & \sin a \\ -\sin a & \cos a \end{pmatrix}, \qquad a = p\,w_i .$$
#
# Build it for SmolLM2's frequencies and a few positions.

# %%
S, H = 12, 9                                                         # positions, heads
pos = np.arange(S)                                                   # [S]
ang = pos[:, None].astype(np.float32) * w_llamanb[None, :]          # [S, d/2] float32, as HF forms it
c, sn = np.cos(ang.astype(np.float64)), np.sin(ang.astype(np.float64))
table = np.stack([np.stack([c, sn], -1), np.stack([-sn, c], -1)], -2).astype(np.float32)   # [S, d/2, f, o]
assert np.allclose(table[1, 0], [[np.cos(1), np.sin(1)], [-np.sin(1), np.cos(1)]])   # p = 1, w_0 = 1
print("table:", table.shape, table.dtype, "| position 1, pair 0 (a = 1 rad):\n", table[1, 0])

# %% [markdown]
# Apply it to a random head tensor `x [S, H, d]` whose pairs are interleaved: view the last axis as
# `[d/2, 2]`, contract `f`, and view the result back.

# %%
rng = np.random.default_rng(0)
x_inter = rng.standard_normal((S, H, d)).astype(np.float32)         # [S, H, d] interleaved order
y_inter = np.einsum("shif,sifo->shio", x_inter.reshape(S, H, d // 2, 2), table).reshape(S, H, d)   # [S, H, d]

# closed form per pair, float64
a = (pos[:, None] * w_llamanb.astype(np.float64))[:, None, :]       # [S, 1, d/2]
xe, xo = x_inter[..., 0::2].astype(np.float64), x_inter[..., 1::2].astype(np.float64)
np.testing.assert_allclose(y_inter[..., 0::2], xe * np.cos(a) - xo * np.sin(a), rtol=0, atol=1e-5)
np.testing.assert_allclose(y_inter[..., 1::2], xe * np.sin(a) + xo * np.cos(a), rtol=0, atol=1e-5)
np.testing.assert_array_equal(y_inter[0], x_inter[0])               # position 0: nothing turns
closed = np.empty(y_inter.shape)
closed[..., 0::2], closed[..., 1::2] = xe * np.cos(a) - xo * np.sin(a), xe * np.sin(a) + xo * np.cos(a)
print("y:", y_inter.shape, " einsum vs the closed form in float64: within 1e-5 (asserted)")

# %% [markdown]
# The table is a valid rotation everywhere: every 2×2 is orthogonal with determinant +1, position 0
# is exactly the identity, and turning by `m` then by `n` is turning by `m + n`
# (row vectors, so the matrices multiply left to right).

# %%
t64 = table.astype(np.float64)
eye = np.broadcast_to(np.eye(2), t64.shape)
np.testing.assert_allclose(t64 @ np.swapaxes(t64, -1, -2), eye, rtol=0, atol=2e-7)
np.testing.assert_allclose(np.linalg.det(t64), 1.0, rtol=0, atol=5e-7)
np.testing.assert_array_equal(table[0], eye[0])
np.testing.assert_allclose(t64[4] @ t64[7], t64[11], rtol=0, atol=1e-6)

# %%
# NBVAL_IGNORE_OUTPUT
# (cos and sin come from numpy's vectorised float32 routines, which differ between CPUs: the
# distances below move with the machine, the assertions above hold on every one)
print("max |einsum - closed form (float64)| <=", f"{roundup(float(np.max(np.abs(y_inter - closed)))):.0e}")
print("max |T T^T - I|       <=", f"{roundup(float(np.max(np.abs(t64 @ np.swapaxes(t64, -1, -2) - eye)))):.0e}")
print("max |det T - 1|       <=", f"{roundup(float(np.max(np.abs(np.linalg.det(t64) - 1)))):.0e}")
print("max |T(4) T(7) - T(11)| <=", f"{roundup(float(np.max(np.abs(t64[4] @ t64[7] - t64[11])))):.0e}")

# %% [markdown]
# ### The permutation between the two pairings
#
# The engine rotates half-split pairs. To feed a half-split vector to the interleaved einsum, put
# dimension `t*d/2 + i` into slot `2i + t`, i.e. `x_inter = x_half[..., Q]` with
# `Q = [0, d/2, 1, d/2+1, ...]`; to come back, `x_half = x_inter[..., P]` with
# `P = [0, 2, 4, ..., 1, 3, 5, ...]`. For `d = 8`:

# %%
Q8 = np.arange(d8).reshape(2, d8 // 2).T.reshape(-1)                # half-split -> interleaved
P8 = np.concatenate([np.arange(0, d8, 2), np.arange(1, d8, 2)])     # interleaved -> half-split
print("Q (x_inter = x_half[..., Q]):", Q8.tolist())
print("P (x_half = x_inter[..., P]):", P8.tolist())
assert np.array_equal(P8[Q8], np.arange(d8)) and np.array_equal(Q8[P8], np.arange(d8))

# %% [markdown]
# Now prove both directions against the engine's half-split `llamanb.model.rope.apply_rope`
# (itself tested against transformers):
#
# 1. half-split in: `apply_rope(x_half) == einsum(x_half[..., Q])[..., P]`
# 2. interleaved in: `einsum(x_inter) == apply_rope(x_inter[..., P])[..., Q]`

# %%
Q, P = np.arange(d).reshape(2, d // 2).T.reshape(-1), np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
cos, sin = rope.cos_sin(pos, w_llamanb)                              # [S, d/2] each


def einsum_rope(x):                                                  # x [S, H, d] interleaved
    return np.einsum("shif,sifo->shio", x.reshape(S, H, d // 2, 2), table).reshape(x.shape)


x_half = rng.standard_normal((S, H, d)).astype(np.float32)         # [S, H, d] half-split order
np.testing.assert_allclose(einsum_rope(x_half[..., Q])[..., P], rope.apply_rope(x_half, cos, sin), rtol=0, atol=2e-6)
np.testing.assert_allclose(einsum_rope(x_inter), rope.apply_rope(x_inter[..., P], cos, sin)[..., Q], rtol=0, atol=2e-6)
# without the permutation the two are different functions
err_no_perm = np.abs(einsum_rope(x_half) - rope.apply_rope(x_half, cos, sin)).max()
err_dirs = max(np.abs(einsum_rope(x_half[..., Q])[..., P] - rope.apply_rope(x_half, cos, sin)).max(),
               np.abs(einsum_rope(x_inter) - rope.apply_rope(x_inter[..., P], cos, sin)[..., Q]).max())
assert err_no_perm > 1
print(f"with the permutations, both directions: max |difference| {at_most(float(err_dirs))}")
print(f"no permutation: max |einsum - apply_rope| = {err_no_perm:.1f}")

# %% [markdown]
# Against transformers directly: its `apply_rotary_pos_emb` with cos/sin from its own
# `LlamaRotaryEmbedding` (layout `[batch, heads, seq, d]`).

# %%
xt = torch.from_numpy(x_half).permute(1, 0, 2)[None]                # [1, H, S, d]
cos_hf, sin_hf = LlamaRotaryEmbedding(hf_smol)(xt, torch.from_numpy(pos)[None])   # [1, S, d]
q_hf, _ = apply_rotary_pos_emb(xt, xt, cos_hf, sin_hf)
q_hf = q_hf[0].permute(1, 0, 2).numpy()                              # [S, H, d] half-split
np.testing.assert_allclose(einsum_rope(x_half[..., Q])[..., P], q_hf, rtol=0, atol=2e-6)
print("table einsum (permuted) vs transformers' apply_rotary_pos_emb: within 2e-6 (asserted)")

# %% [markdown]
# The finished functions live in `llamanb.model.rope_tables`: `rotation_table(positions, freqs)`
# `[S, d/2, 2, 2]`, `apply_rotation_table(x, table)` for interleaved `x [..., S, H, d]`, and the two
# permutations `interleaved_to_half_split(d)` (= `P`) and `half_split_to_interleaved(d)` (= `Q`).

# %%
from llamanb.model.rope_tables import (apply_rotation_table, half_split_to_interleaved, interleaved_to_half_split, rotation_table)

np.testing.assert_array_equal(rotation_table(pos, w_llamanb), table)
np.testing.assert_array_equal(interleaved_to_half_split(d), P)
np.testing.assert_array_equal(half_split_to_interleaved(d), Q)
np.testing.assert_allclose(apply_rotation_table(x_inter, table), y_inter, rtol=0, atol=1e-6)
print("llamanb.model.rope_tables: same table and permutations bit for bit; applied, max |difference|",
      at_most(float(np.abs(apply_rotation_table(x_inter, table) - y_inter).max())))

# %% [markdown]
# > **Going deeper: the table's orientation, measured.** The TCP book leaves the orientation open
# > ("Store the 2 × 2 matrix representing the cos/sin rotation transformation"). Put the textbook matrix `[[cos, -sin], [sin, cos]]` (an `[out, in]` matrix) into
# > the `[in, out]` slot and every pair turns the wrong way: the result is RoPE at *negative*
# > positions, which for attention transposes the score matrix (query `m` against key `n` scores what
# > `n` against `m` should). The book's other loose statements are in `docs/corrections.md`.

# %%
textbook = np.swapaxes(table, -1, -2)                                # [[c, -s], [s, c]] per entry
wrong = np.einsum("shif,sifo->shio", x_half[..., Q].reshape(S, H, d // 2, 2), textbook).reshape(S, H, d)[..., P]
np.testing.assert_allclose(wrong, rope.apply_rope(x_half, *rope.cos_sin(-pos, w_llamanb)), rtol=0, atol=2e-6)
err_sign = np.abs(wrong - q_hf).max()
assert err_sign > 1
print("x = (1, 0), p = 1, w_0 = 1:  correct table ->", table[1, 0, 0], "  textbook matrix ->", textbook[1, 0, 0])
print(f"textbook matrix in the [in, out] slot: RoPE at -p (within 2e-6, asserted); max |result - HF| = {err_sign:.1f}")
q1, k1 = rng.standard_normal((2, d)).astype(np.float32)            # one head's content, for section 5

# %% [markdown]
# ## 5. Scores depend only on the distance
#
# Rotating `q` to position `m` and `k` to position `n` gives
# `(R_m q) . (R_n k) = q . R_(n-m) k`: only `m - n` survives. Check it numerically: the same `q`, `k`
# placed at `(m, n)` and shifted together by `t` give the same score.

# %%
def score(qv, kv, m, n, freqs=w_llamanb):
    """q at position m, k at position n (interleaved order), dot product in float64."""
    qm = apply_rotation_table(qv[None, None], rotation_table([m], freqs))[0, 0]
    kn = apply_rotation_table(kv[None, None], rotation_table([n], freqs))[0, 0]
    return float(qm.astype(np.float64) @ kn.astype(np.float64))


pairs_drift = {}
for m, n in [(7, 3), (2, 11), (5, 5)]:
    base = score(q1, k1, m, n)
    pairs_drift[m, n] = max(abs(score(q1, k1, m + t, n + t) - base) for t in (1, 10, 100, 1000))
    assert pairs_drift[m, n] < 1e-3
    print(f"(m, n) = ({m:2d}, {n:2d})  m-n = {m - n:3d}  shifts t = 1, 10, 100, 1000: score moves < 1e-3 (asserted)")

# %% [markdown]
# The score over all `(m, n)` for one `(q, k)` is therefore constant along every diagonal
# `m - n = const` (below: a causal view would keep only the lower triangle).

# %%
Sh = 48
ph = np.arange(Sh)
th = rotation_table(ph, w_llamanb)                                   # [Sh, d/2, 2, 2]
qh = apply_rotation_table(np.broadcast_to(q1, (Sh, 1, d)).copy(), th)[:, 0].astype(np.float64)   # [Sh, d]
kh = apply_rotation_table(np.broadcast_to(k1, (Sh, 1, d)).copy(), th)[:, 0].astype(np.float64)
heat = qh @ kh.T                                                     # [Sh, Sh]: query m (rows), key n (cols)
for off in range(-Sh + 1, Sh):
    diag = np.diagonal(heat, offset=off)
    assert np.ptp(diag) < 1e-4, off
spread = max(float(np.ptp(np.diagonal(heat, offset=o))) for o in range(-Sh + 1, Sh))
print("every diagonal of the", heat.shape, "score matrix is constant within 1e-4 (asserted)",
      f"(scores up to {np.abs(heat).max():.1f})")

fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
im = a1.imshow(heat, cmap="RdBu_r")
a1.set(xlabel="key position n", ylabel="query position m")
a1.set_title("q_m . k_n after RoPE")
fig.colorbar(im, ax=a1, fraction=0.046)
dist = np.arange(-Sh + 1, Sh)
a2.plot(dist, [np.diagonal(heat, offset=-o).mean() for o in dist], ".-")
a2.set(xlabel="m - n", ylabel="score")
a2.set_title("the same numbers as a function of m - n")
plt.tight_layout()
plt.show()

# %% [markdown]
# > **Going deeper: how far float32 keeps it.** In float32 the property holds only approximately,
# > and less well far out. The angle `p * w_i` is rounded to float32 before its cosine is taken, so
# > it is off by up to `p * w_i * 2^-24` radians, and the score moves by at most about
# > `sum_i |q_i| |k_i| * 2^-24 * (2 w_i (m + n + t) + 8)` (`|q_i|` the length of pair `i`; the angles
# > of both scores count, and the `+ 8` covers the rounding of cos/sin and of the products). The
# > drift grows about linearly with the shift (the second cell below prints it per shift).

# %%
def drift_bound(qv, kv, m, n, t, freqs=w_llamanb):
    qp = np.hypot(qv[0::2], qv[1::2]).astype(np.float64)             # [d/2] pair lengths
    kp = np.hypot(kv[0::2], kv[1::2]).astype(np.float64)
    return float(np.sum(qp * kp * 2.0**-24 * (freqs * 2 * (m + n + t) + 8)))


base = score(q1, k1, 7, 3)
shifts = (10, 10**3, 10**5, 10**6)
drifts = {t: abs(score(q1, k1, 7 + t, 3 + t) - base) for t in shifts}
for t in shifts:
    assert drifts[t] <= drift_bound(q1, k1, 7, 3, t)
print("drift <= bound at every shift:", [f"{t:,d}" for t in shifts])

# %%
# NBVAL_IGNORE_OUTPUT
# (the drift itself depends on the CPU's float32 sin and cos, so it is shown, not compared)
for (m, n), drift in pairs_drift.items():
    print(f"(m, n) = ({m:2d}, {n:2d}), shifts up to 1000: max drift {at_most(drift)}")
for t in shifts:
    print(f"shift t = {t:>9,d}:  bound {drift_bound(q1, k1, 7, 3, t):.0e}   drift {at_most(drifts[t])}")

# %% [markdown]
# ## 6. Why GGUF stores `W_q` and `W_k` permuted
#
# llama.cpp rotates **interleaved** pairs (as Meta's code did); HF checkpoints hold `W_q`, `W_k` for
# **half-split** pairs. The HF→GGUF converter shuffles their *rows* once: within each head, GGUF row
# `2i + t` holds HF row `t*d/2 + i` (section 4's `Q`), so `x @ W_gguf.T = (x @ W_hf.T)[..., Q]` per
# head, and interleaved RoPE on it is HF's RoPE in interleaved order.
#
# Check it on the embedded model's real layer-0 weights: the raw Q4_1 tensors straight from the GGUF
# file, dequantised by the `gguf` package, and as reference for HF's row order transformers' own GGUF
# loader, whose tensor processor for `llama` un-permutes `attn_q` / `attn_k`
# (`transformers.modeling_gguf_pytorch_utils.TENSOR_PROCESSORS`; `tests/io/test_gguf.py` checks every
# tensor of a full load), with the head counts read from the file.

# %%
import gguf

from llamanb import load_model
from llamanb.io.gguf import GGUFSource, permute_qk, unpermute_qk

with stages() as say:                                   # a line while it runs, gone after
    say("importing transformers' GGUF loader; opening the model's GGUF with gguf's reader")
    from transformers.modeling_gguf_pytorch_utils import TENSOR_PROCESSORS
    model = load_model()
    cfg = model.config
    src = GGUFSource(model.source)                                   # the GGUF, opened with gguf's reader
raw = {n: src.tensors[f"blk.0.attn_{n}.weight"] for n in ("q", "k")}
w_gguf = {n: gguf.quants.dequantize(t.data, t.tensor_type) for n, t in raw.items()}   # [rows, hidden]
hf_cfg = {"num_attention_heads": int(src.meta["llama.attention.head_count"]),          # 9
          "num_key_value_heads": int(src.meta["llama.attention.head_count_kv"])}       # 3
processor = TENSOR_PROCESSORS[src.meta["general.architecture"]](config=hf_cfg)
w_hf = {n: processor.process(weights=w_gguf[n], name=f"blk.0.attn_{n}.weight").weights for n in ("q", "k")}
print({f"attn_{n}": (t.tensor_type.name, w_gguf[n].shape) for n, t in raw.items()}, hf_cfg)

# %% [markdown]
# **(a) The un-permutation, derived.** View the rows of one head as `[d/2, 2]` (pair `i`, member `t`
# — the GGUF order `2i + t`), swap the two axes to `[2, d/2]` (the HF order `t*d/2 + i`), flatten back.
# Do it for all heads at once with `[n_heads, d/2, 2, hidden]`:

# %%
def unpermute_rows(w, n_heads):
    rows, hidden = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, hidden).swapaxes(1, 2).reshape(rows, hidden)


heads = {"q": cfg.n_heads, "k": cfg.n_kv_heads}                      # 9 and 3
for n in ("q", "k"):
    mine = unpermute_rows(w_gguf[n], heads[n])                       # [rows, hidden] HF order
    assert np.array_equal(mine, unpermute_qk(w_gguf[n], heads[n]))   # llamanb.io.gguf
    assert np.array_equal(mine, w_hf[n])                             # transformers' loader
    assert np.array_equal(permute_qk(w_hf[n], heads[n]), w_gguf[n])  # and back
    # the same thing, head by head, as the index array Q
    per_head = w_hf[n].reshape(heads[n], d, -1)[:, Q].reshape(w_hf[n].shape)
    assert np.array_equal(per_head, w_gguf[n])
    moved = int((w_gguf[n] != w_hf[n]).any(axis=1).sum())
    print(f"W_{n}: un-permuted GGUF == llamanb.unpermute_qk == transformers' weights, bit for bit;"
          f" rows that moved: {moved} of {w_hf[n].shape[0]}")

# %% [markdown]
# Bit-identical: both libraries dequantise Q4_1 to the same float32 numbers, and a row permutation
# moves numbers without touching them (only rows `0` and `d - 1` of each head stay put). Since `q`
# and `k` are permuted alike, llama.cpp's interleaved RoPE on these rows gives HF's attention scores
# (section 4's proof, permutation inside a dot product). The permutation is per head, so un-permuting
# needs the right head count: 9 for `W_q`, only 3 for `W_k` (GQA); 9 for `W_k` cannot even split its
# 192 rows, and 3 for `W_q` silently produces a different matrix:

# %%
bad_q = unpermute_rows(w_gguf["q"], cfg.n_kv_heads)                  # the K head count used for Q
assert not np.array_equal(bad_q, w_hf["q"])
print(f"W_q un-permuted with {cfg.n_kv_heads} heads instead of {cfg.n_heads}: "
      f"{int((bad_q != w_hf['q']).any(axis=1).sum())} of {w_hf['q'].shape[0]} rows differ from transformers")

# %% [markdown]
# ## Summary
#
# * RoPE turns `d/2` pairs of each head by `p * w_i`, `w_i = theta^(-2i/d)`; Llama 3 keeps the fast
#   pairs, divides the slow ones by `factor` and blends the band between (`llamanb.model.rope.inv_freq`,
#   bit-identical to transformers, with and without `llama3` scaling).
# * HF pairs `i` with `i + d/2`; llama.cpp, GGUF and Meta's code pair `2i` with `2i + 1`: the same
#   rotation up to a fixed permutation of the head dimension, which GGUF files bake into the rows of
#   `W_q`/`W_k` (`llamanb.io.gguf.unpermute_qk` undoes it, with 9 heads for Q and 3 for K).
# * RoPE as a `[S, d/2, 2, 2]` table of rotation matrices is one einsum. New in
#   **`llamanb.model.rope_tables`**: `rotation_table(positions, freqs)`, `apply_rotation_table(x, table)`,
#   `interleaved_to_half_split(d)` and `half_split_to_interleaved(d)`, tested against transformers'
#   `apply_rotary_pos_emb` in `tests/test_rope_tables.py`.
# * The table holds `[[cos, sin], [-sin, cos]]`, the transpose of the textbook matrix (which, in
#   that slot, turns backwards and transposes the score matrix).
# * After RoPE, `q_m . k_n` depends only on `m - n` (to float32 rounding, which grows with the position).
#
# **Next:** notebook 03 puts the rotated `q` and `k` into grouped-query attention with the causal mask.

# %% [markdown]
# ## Exercises
#
# Three functions to write, each checked against `llamanb`: replace `raise NotImplementedError`, run
# the cell and the check below it (one line: `passed`, the first differing case with a hint, or `not
# attempted yet`). Solutions: `solutions/02_rope_einsum_tables.py`.

# %%
from llamanb.course.exercises import ch02

# %% [markdown]
# ### 02.1 Inverse frequencies
#
# Write `inv_freq(d, theta)`: the `[d/2]` float32 frequencies of RoPE without scaling, checked
# against `llamanb.model.rope.inv_freq` to a relative 1e-6. *Hint:* section 1; how many frequencies
# does a head of `d` dimensions have?

# %%
def inv_freq(d: int, theta: float) -> np.ndarray:       # -> [d/2] float32
    raise NotImplementedError  # your code here


# %%
ch02.inv_freq(inv_freq)

# %% [markdown]
# ### 02.2 The rotation table
#
# Write `rotation_table(positions, freqs)`: `positions [S]`, `freqs [d/2]` -> `[S, d/2, 2, 2]`
# float32, one 2×2 rotation per position and frequency, stored `[in, out]` so that section 4's
# einsum contracts its first axis. Checked against `llamanb.model.rope_tables.rotation_table`.
# *Hint:* which of the two 2×2 matrices turns the pair forwards when the *first* axis is summed?

# %%
def rotation_table(positions: np.ndarray, freqs: np.ndarray) -> np.ndarray:   # -> [S, d/2, 2, 2]
    raise NotImplementedError  # your code here


# %%
ch02.rotation_table(rotation_table)

# %% [markdown]
# ### 02.3 Applying it with one einsum
#
# Write `apply_table(x, table)`: `x [S, H, d]` with *interleaved* pairs `(x_2i, x_2i+1)`, `table
# [S, d/2, 2, 2]` from 02.2 -> the rotated `[S, H, d]`, with one `np.einsum`. Checked against
# `llamanb.model.rope_tables.apply_rotation_table`. *Hint:* a reshape puts each pair on an axis of its
# own; which reshape pairs neighbours rather than halves?

# %%
def apply_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:   # [S, H, d], [S, d/2, 2, 2] -> [S, H, d]
    raise NotImplementedError  # your code here


# %%
ch02.apply_table(apply_table)
