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
#     builds: grouped-query attention as einsums, and the causal mask
#     modules:
#     - llamanb.engine.attention
#     - llamanb.engine.numpy_backend
#     part: I
# ---

# %% [markdown]
# # 03 · Attention and its masks
#
# **What you will build.** Grouped-query attention written as two einsums with an explicit group
# axis, so that the shared keys and values are broadcast instead of copied; the causal mask, and
# why it is added as `-inf` before the softmax; a table of which operations of a Llama block mix
# positions, checked by perturbing a later token. Notebook 03b builds on the last result: a prompt
# padded with EOS gives byte-identical results at its real positions.
#
# Every claim below is an assertion: against HF transformers, against a naive loop, against
# closed-form arithmetic, or bit for bit against an unperturbed run.


# %%
import warnings

warnings.filterwarnings("ignore")

import os

os.environ.setdefault("TQDM_DISABLE", "1")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, load_model
from llamanb.model.numerics import U_FLOAT32, gamma


model = load_model()
cfg = model.config
W = model.weights
tok = model.tokenizer
engine = Engine(model)

N_h, N_kv, G, d_h, H = cfg.n_heads, cfg.n_kv_heads, cfg.group, cfg.head_dim, cfg.hidden
print(f"N_h = {N_h} query heads, N_kv = {N_kv} K/V heads, G = N_h / N_kv = {G}, d_h = {d_h}, H = {H}")

# %% [markdown]
# ## 1. GQA attention as einsums with a group axis
#
# In grouped-query attention the `N_h` query heads are split into `N_kv` groups of `G`; every
# query head in a group reads the same key head and the same value head. We start from the real
# layer-0 queries, keys and values of the embedded model for a short prompt: RMSNorm, the three
# projections, then RoPE on `q` and `k` (derived in notebooks 01 and 02; here RoPE comes from
# `llamanb.model.rope`).

# %%
from llamanb.model.rope import apply_rope, cos_sin, rope_for

ids = tok.encode("The capital of France is Paris, and the capital of Italy is")
S = len(ids)
lw = W.layers[0]
wq, wk, wv = W.split_qkv(0)                                   # [N_h d_h, H], [N_kv d_h, H] x 2


def rms_norm(x, w, eps):
    """x [S, H] / sqrt(mean over H of x^2 + eps) * w [H]: one row at a time."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w


def layer0_qkv(token_ids):
    """Layer-0 q [S, N_h, d_h], k [S, N_kv, d_h], v [S, N_kv, d_h] for a list of token ids."""
    n = len(token_ids)
    x = W.embed[token_ids].astype(np.float32)                   # [S, H]
    h = rms_norm(x, lw.attn_norm, cfg.rms_eps)                  # [S, H]
    q = (h @ wq.T).reshape(n, N_h, d_h)                         # [S, N_h, d_h]
    k = (h @ wk.T).reshape(n, N_kv, d_h)                        # [S, N_kv, d_h]
    v = (h @ wv.T).reshape(n, N_kv, d_h)                        # [S, N_kv, d_h]
    cos, sin = cos_sin(np.arange(n), rope_for(cfg))             # [S, d_h/2] each
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


q, k, v = layer0_qkv(ids)
print("prompt:", S, "tokens")
print("q", q.shape, " # [S, N_h, d_h]")
print("k", k.shape, "  # [S, N_kv, d_h]")
print("v", v.shape, "  # [S, N_kv, d_h]")

# %% [markdown]
# **The group axis costs nothing.** Query head `h` belongs to group `h // G` (transformers'
# convention, and llamanb's). Splitting the head axis `N_h` into `(N_kv, G)` is therefore a plain
# reshape of a contiguous array: numpy returns a *view* — same memory, new strides — not a copy.

# %%
qg = q.reshape(S, N_kv, G, d_h)                               # [S, N_kv, G, d_h]
print("q  shape", q.shape, " strides (bytes)", q.strides)
print("qg shape", qg.shape, "strides (bytes)", qg.strides)
print("qg shares q's memory:", np.shares_memory(q, qg))
assert np.shares_memory(q, qg) and qg.base is not None
for h in range(N_h):                                          # head h = group h // G, member h % G
    assert np.array_equal(qg[:, h // G, h % G], q[:, h])

# %% [markdown]
# **K and V are broadcast over `G`, never copied.** Giving `k` a length-1 group axis and
# broadcasting it to `G` makes a view whose stride along `G` is 0: all `G` members read the same
# bytes. The alternative that many implementations use — `repeat_kv`, repeating each K/V head `G`
# times so that K has `N_h` heads like Q — allocates `G` times the memory.

# %%
k_bcast = np.broadcast_to(k[:, :, None, :], (S, N_kv, G, d_h))  # [S, N_kv, G, d_h], a view
k_rep = np.repeat(k, G, axis=1)                                 # [S, N_h, d_h], a copy
print("k        ", k.shape, "bytes", k.nbytes)
print("broadcast", k_bcast.shape, "strides", k_bcast.strides, "shares k's memory:",
      np.shares_memory(k, k_bcast))
print("repeat   ", k_rep.shape, "   bytes", k_rep.nbytes, f"(= {k_rep.nbytes // k.nbytes} x k)",
      "shares k's memory:", np.shares_memory(k, k_rep))
assert k_bcast.strides[2] == 0 and np.shares_memory(k, k_bcast)
assert k_rep.nbytes == G * k.nbytes and not np.shares_memory(k, k_rep)

# %% [markdown]
# Now the attention itself, as two einsums. The letters: `s` query position, `t` key position,
# `n` K/V head, `g` member of the group, `d` head dimension. `k` has no `g`, so the einsum
# broadcasts it over the group — exactly the stride-0 view above. The causal mask (section 2)
# lets query `s` see keys `t <= s` only; the softmax runs over `t`.

# %%
scale = np.float32(d_h ** -0.5)


def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def gqa_attention(q, k, v, causal=True):
    """q [S, N_h, d_h], k/v [T, N_kv, d_h] (T = S) -> [S, N_h d_h]."""
    s_len = q.shape[0]
    qg = q.reshape(s_len, N_kv, G, d_h)                                   # [S, N_kv, G, d_h] view
    scores = np.einsum("sngd,tnd->ngst", qg, k) * scale                   # [N_kv, G, S, T]
    if causal:
        visible = np.tril(np.ones((s_len, k.shape[0]), dtype=bool))       # [S, T]
        scores = np.where(visible, scores, np.float32(-np.inf))
    p = softmax(scores, axis=-1)                                          # [N_kv, G, S, T]
    out = np.einsum("ngst,tnd->sngd", p, v)                               # [S, N_kv, G, d_h]
    return out.reshape(s_len, N_h * d_h)                                  # [S, N_h d_h]


scores = np.einsum("sngd,tnd->ngst", qg, k) * scale
print("scores  ", scores.shape, "  # [N_kv, G, S, T]")
attn = gqa_attention(q, k, v)
print("attn out", attn.shape, "      # [S, N_h * d_h], the input of o_proj")

# %% [markdown]
# **Check 1: a naive loop over heads.** One head at a time, with the K/V head picked by `h // G`,
# in the most literal form: scores, mask, softmax, weighted sum.

# %%
naive = np.zeros((S, N_h, d_h), dtype=np.float32)
for h in range(N_h):
    kv = h // G                                               # the K/V head this query head reads
    s_h = (q[:, h] @ k[:, kv].T) * scale                      # [S, T]
    for i in range(S):
        s_h[i, i + 1:] = -np.inf                              # query i sees keys 0..i
    naive[:, h] = softmax(s_h) @ v[:, kv]                     # [S, d_h]
naive = naive.reshape(S, N_h * d_h)
np.testing.assert_allclose(attn, naive, rtol=0, atol=1e-6)
print("einsum against the naive loop: within 1e-6 (asserted)")

# %% [markdown]
# **Check 2: HF transformers.** transformers' own Llama code computes the same layer with its own
# RMSNorm, RoPE, `repeat_kv` and eager (non-fused) attention. Reading the GGUF file with
# transformers' loader takes about half a minute on a 2-core machine, and the test suite already
# proves that every tensor it produces equals llamanb's bit for bit
# (`tests/io/test_gguf.py::test_every_tensor_matches_transformers_gguf_loader`). So transformers loads
# llamanb's converted cache directory instead (`load_hf(model, via="converted")`, as in notebook 00):
# the same numbers, with all of the arithmetic transformers' own. A forward pre-hook on layer 0's
# `o_proj` captures its input: the attention output, heads concatenated.

# %%
from llamanb.platform.progress import stages

with stages(prefix="transformers") as say:              # a line while it runs, gone after
    say("importing torch and transformers, loading the converted checkpoint")
    import torch
    from transformers.models.llama.modeling_llama import repeat_kv

    from llamanb.check.hf_reference import load_hf

    hf = load_hf(model, via="converted")
    hf.set_attn_implementation("eager")
    say("its forward over the prompt, layer 0's attention output captured")
    captured = {}
    hook = hf.model.layers[0].self_attn.o_proj.register_forward_pre_hook(
        lambda module, args: captured.update(attn=args[0][0].numpy().copy()))
    with torch.inference_mode():
        hf(torch.tensor([ids]))
    hook.remove()
print("transformers attention implementation:", hf.config._attn_implementation)
hf_attn = captured["attn"]                                    # [S, N_h d_h]
print("HF o_proj input", hf_attn.shape)
np.testing.assert_allclose(attn, hf_attn, rtol=0, atol=1e-5)
print("einsum against transformers: within 1e-5 (asserted)")

# %% [markdown]
# transformers gets the same answer by copying: its `repeat_kv` turns K from `[1, N_kv, S, d_h]`
# into `[1, N_h, S, d_h]` in fresh memory before the matmul. For one layer of a short prompt that is
# a few KiB; for the KV cache of a long context it is `G` times the cache, every layer, every step.

# %%
k_torch = torch.from_numpy(k).permute(1, 0, 2)[None]          # [1, N_kv, S, d_h]
k_rep_torch = repeat_kv(k_torch, G)                            # [1, N_h, S, d_h]
print("repeat_kv:", tuple(k_torch.shape), "->", tuple(k_rep_torch.shape))
bytes_before, bytes_after = k_torch.untyped_storage().nbytes(), k_rep_torch.untyped_storage().nbytes()
print("bytes before", bytes_before, "after", bytes_after)
assert bytes_after == G * bytes_before
assert np.array_equal(k_rep_torch[0].permute(1, 0, 2).numpy(), k_rep)    # same layout as np.repeat

# %% [markdown]
# **The finished version.** `llamanb.engine.numpy_backend.NumpyBackend.attention` is the same
# computation with the group axis laid out for BLAS (one GEMM per K/V head for the scores and one
# for the output) and with fixed-shape tiles whose purpose notebook 03b explains. It reads K and V
# from the KV cache, so we write layer 0's `k`, `v` there first.

# %%
cache = engine.new_cache(64)
cache.write(0, 0, 0, k, v)            # layer 0, slot 0, from position 0: cache.k[0, :, :S] = k as [N_kv, S, d_h]
attn_llamanb = engine.backend.attention(np.ascontiguousarray(q), cache, layer=0, slot=0, start=0)
print("llamanb attention", attn_llamanb.shape)
np.testing.assert_allclose(attn_llamanb, attn, rtol=0, atol=1e-6)
print("llamanb against the einsum: within 1e-6 (asserted)")

# %% [markdown]
# ## 2. The causal mask
#
# A decoder predicts token `i + 1` from tokens `0..i`, so query `i` may read keys `0..i` and
# nothing later. The mask is a lower-triangular `[S, T]` pattern. It is applied by **adding**
# `0` (visible) or `-inf` (hidden) to the scores **before** the softmax: `exp(-inf)` is exactly 0,
# so hidden keys get weight exactly 0 and the softmax's denominator sums the visible keys only.
# Each row then sums to 1 over `0..i`. Left: the mask; right: what layer 0's first head does with
# it on our prompt.

# %%
visible = np.tril(np.ones((S, S), dtype=bool))                 # [S, T]
additive = np.where(visible, np.float32(0), np.float32(-np.inf))
p_masked = softmax(scores + additive)                          # [N_kv, G, S, T]
print("additive mask, first 4 x 4:\n", additive[:4, :4])

fig, axes = plt.subplots(1, 2, figsize=(8, 3.6))
axes[0].imshow(visible, cmap="Greys", vmin=0, vmax=1.4)
axes[0].set_title("causal mask (dark = visible)")
im = axes[1].imshow(p_masked[0, 0], cmap="viridis")
axes[1].set_title("layer 0, head 0: softmax weights")
for ax in axes:
    ax.set_xticks(range(0, S, 2))
    ax.set_yticks(range(0, S, 2))
    ax.set_xlabel("key position t")
    ax.set_ylabel("query position s")
fig.colorbar(im, ax=axes[1], fraction=0.046)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Why not multiply by a 0/1 mask after the softmax?** Because then the softmax has already
# divided by a sum that includes the future keys. The rows no longer sum to 1, and — worse — every
# earlier row still *depends* on the future tokens through that denominator. Changing the last
# token's key shows it: the weights of query 0 move when the mask is multiplied afterwards, and stay
# bit for bit the same when `-inf` is added before.

# %%
p_after = softmax(scores) * visible                            # mask multiplied after the softmax
# A proved bound, whatever order the CPU sums in: the denominator is a float32 sum of S terms
# (relative error <= gamma_(S-1)), each division adds one rounding (u), and summing the S weights
# to check them adds gamma_(S-1) again; the exp's own error cancels (every weight is divided by
# the sum of the same rounded exps). So |row sum - 1| <= 2 gamma_(S-1) + u (+ O(u^2)).
row_bound = 2 * gamma(S - 1) + U_FLOAT32 * (1 + 4 * S * U_FLOAT32)
rows_sum_to_one = np.abs(p_masked.sum(-1) - 1) <= row_bound    # [N_kv, G, S]
print(f"masked before softmax: every |row sum - 1| <= 2 gamma_{S - 1} + u = {row_bound:.2e} (proved bound)")
short = (p_after.sum(-1) < 1 - 1e-3).all(axis=(0, 1))          # [S]
print(f"masked after softmax: rows (of {S}) that sum to < 0.999 in every head:", int(short.sum()))
assert rows_sum_to_one.all() and short[:-1].all()              # only the last row sees every key

k_changed = k.copy()
k_changed[-1] += 1.0                                           # a different last token's key
scores_changed = np.einsum("sngd,tnd->ngst", qg, k_changed) * scale
before_same = np.array_equal(softmax(scores_changed + additive)[..., 0, :],
                             p_masked[..., 0, :])
after_same = np.array_equal((softmax(scores_changed) * visible)[..., 0, :], p_after[..., 0, :])
print("query 0's weights unchanged, -inf before softmax:", before_same)
print("query 0's weights unchanged, 0/1 after softmax:  ", after_same)
assert before_same and not after_same

# %% [markdown]
# Renormalizing after the multiplication repairs the sum in exact arithmetic but still
# exponentiates the hidden scores. The softmax subtracts the row maximum for stability; if a
# hidden (future) score is the maximum, the visible ones can underflow to 0 and the row becomes
# `0 / 0`. Three scores, the last one hidden:

# %%
row = np.array([0.0, 1.0, 200.0], dtype=np.float32)           # key 2 is in the future
seen = np.array([True, True, False])
good = softmax(np.where(seen, row, np.float32(-np.inf)))
bad = softmax(row) * seen
bad = bad / bad.sum()
print("-inf before softmax:        ", np.round(good, 4))
print("multiply after, renormalize:", bad)
np.testing.assert_allclose(good, [1 / (1 + np.e), np.e / (1 + np.e), 0.0], rtol=1e-6)
assert np.isnan(bad).all()

# %% [markdown]
# ## 3. Which operations mix positions?
#
# Attention is the only place where one row of the `[S, H]` hidden state reads another. Every
# other operation maps row `i` of its input to row `i` of its output:
#
# | operation | formula for row i | mixes positions? |
# |---|---|---|
# | embedding | `x[i] = E[id[i]]` | no |
# | RMSNorm (both) | mean of `x[i]^2` over `H` | no: the mean is over the hidden axis, not over positions |
# | Q/K/V, O, gate/up, down projections | `x[i] @ W` | no |
# | RoPE | rotate `q[i]`, `k[i]` by angles of position `i` | no: position-*dependent*, but row-local |
# | attention scores `q k^T` | `q[i] . k[t]` for every `t` | **yes** |
# | softmax over keys | normalizes row `i` over `t` | **yes** (over the keys of row `i`) |
# | weighted sum `P V` | `sum_t p[i, t] v[t]` | **yes** |
# | SiLU, `silu(gate) * up` | elementwise | no |
# | residual adds | `x[i] + f(x)[i]` | no |
# | final norm, LM head | per row | no |
#
# The proof by experiment: change the token at a later position `j`, run every operation of layer
# 0 on both inputs, and check that rows `0..j-1` of each output are **bit for bit** unchanged
# (`np.array_equal`). Row `j` must change, or the experiment proved nothing. The causal attention
# passes; the same attention without the mask fails. The last line runs llamanb's finished block
# (`NumpyBackend.block`) on the same two inputs, and its output is then checked against our
# step-by-step layer.

# %%
from llamanb.model.ops import silu_mul
from llamanb.engine.step import Step

j = S - 4                                                     # the perturbed (later) position
ids_b = list(ids)
ids_b[j] = 1000 if ids[j] != 1000 else 1001                   # a different token at position j
wg, wu = W.split_gate_up(0)


def layer0_stages(token_ids):
    """Every intermediate of layer 0 (and the head applied to its output), by name."""
    n = len(token_ids)
    st = {"embedding": W.embed[token_ids].astype(np.float32)}                   # [S, H]
    st["RMSNorm (attention)"] = rms_norm(st["embedding"], lw.attn_norm, cfg.rms_eps)
    st["Q/K/V projections"] = st["RMSNorm (attention)"] @ lw.wqkv.T             # [S, (N_h+2N_kv) d_h]
    q_, k_, v_ = layer0_qkv(token_ids)
    st["RoPE on q, k"] = np.concatenate([q_, k_], axis=1)                       # [S, N_h+N_kv, d_h]
    sc = np.einsum("sngd,tnd->ngst", q_.reshape(n, N_kv, G, d_h), k_) * scale   # [N_kv, G, S, T]
    vis = np.tril(np.ones((n, n), dtype=bool))
    st["scores q k^T (no mask yet)"] = sc
    st["scores + causal mask"] = np.where(vis, sc, np.float32(-np.inf))
    st["softmax (masked)"] = softmax(st["scores + causal mask"])
    st["P V (masked)"] = gqa_attention(q_, k_, v_, causal=True)                 # [S, N_h d_h]
    st["P V without mask"] = gqa_attention(q_, k_, v_, causal=False)
    st["P V, 0/1 mask after softmax"] = np.einsum(
        "ngst,tnd->sngd", softmax(sc) * vis, v_).reshape(n, N_h * d_h)
    st["O projection"] = st["P V (masked)"] @ lw.wo.T                          # [S, H]
    st["residual add 1"] = st["embedding"] + st["O projection"]
    st["RMSNorm (FFN)"] = rms_norm(st["residual add 1"], lw.ffn_norm, cfg.rms_eps)
    gate, up = st["RMSNorm (FFN)"] @ wg.T, st["RMSNorm (FFN)"] @ wu.T            # [S, D_ff] each
    st["gate/up projections"] = np.concatenate([gate, up], axis=1)
    st["SiLU(gate) * up"] = silu_mul(gate, up)
    st["down projection"] = st["SiLU(gate) * up"] @ lw.w_down.T                  # [S, H]
    st["residual add 2"] = st["residual add 1"] + st["down projection"]
    st["final norm + LM head"] = rms_norm(st["residual add 2"], W.final_norm, cfg.rms_eps) @ W.lm_head.T
    # the finished version: llamanb's whole block 0 on the same embeddings (it writes a fresh cache)
    step = Step.build([(0, 0, token_ids)])                                     # n rows, positions 0..n-1
    st["llamanb: block 0"] = engine.backend.block(0, st["embedding"], step, engine.new_cache(64))
    return st


def rows(a, sl):
    """Select query rows: the position axis is 0, except for [N_kv, G, S, T] score blocks."""
    return a[..., sl, :] if a.ndim == 4 else a[sl]


A, B = layer0_stages(ids), layer0_stages(ids_b)
print(f"token at position {j} changed; rows 0..{j - 1} compared\n")
print(f"{'operation':<30} {'rows < j identical':>18} {'row j changed':>14}")
results = {}
for name in A:
    same_before = np.array_equal(rows(A[name], slice(0, j)), rows(B[name], slice(0, j)))
    changed_j = not np.array_equal(rows(A[name], slice(j, j + 1)), rows(B[name], slice(j, j + 1)))
    results[name] = (same_before, changed_j)
    print(f"{name:<30} {'identical' if same_before else 'moved':>18} {'changed' if changed_j else 'same':>14}")

# %%
mixing = {"scores q k^T (no mask yet)", "P V without mask", "P V, 0/1 mask after softmax"}
for name, (same_before, changed_j) in results.items():
    assert changed_j, name                                    # the perturbation reached every op
    assert same_before == (name not in mixing), name
np.testing.assert_allclose(A["llamanb: block 0"], A["residual add 2"], rtol=0, atol=1e-4)
leak = np.abs(rows(A["P V without mask"], slice(0, j)) - rows(B["P V without mask"], slice(0, j))).max()
assert leak > 1e-4
print("our step-by-step layer 0 matches llamanb's block within 1e-4;\n"
      "without the mask, earlier rows move by more than 1e-4 (both asserted)")

# %% [markdown]
# The unmasked scores of earlier rows do change — query `i < j` is multiplied with the new key
# `j` — which is exactly why the mask has to hide that column before anything sums over it.
#
# One detail makes the `np.array_equal` checks above meaningful rather than lucky: in each pair
# the two inputs have the **same shape**, so every matmul ran the same BLAS kernel with the same
# summation order for each row. Notebook 03b is about what happens when the shape changes.

# %% [markdown]
# ## Summary
#
# - **GQA** is two einsums with a group axis: `q [S, N_kv, G, d_h]` is a free view of
#   `q [S, N_h, d_h]`, and K/V `[T, N_kv, d_h]` are broadcast over `G` (stride 0) instead of copied
#   `G` times as `repeat_kv` does. It matches transformers' eager attention and a per-head loop.
#   In `llamanb`: `llamanb.engine.numpy_backend.NumpyBackend.attention` (one GEMM per K/V head for
#   scores and for the output).
# - **The causal mask** is added as `-inf` before the softmax; multiplying by 0/1 afterwards leaves
#   earlier rows dependent on later tokens (and can produce `0/0`).
# - **Only attention mixes positions**; every other op is row-local — shown bit for bit by
#   perturbing a later token.
#
# **Next — 03b · Padded prefill:** a prompt padded with EOS to a fixed length gives byte-identical
# results at its real rows (and what that takes in floating point), why the real length must be
# carried, and why the LM head needs one row.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against a reference computed another way. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it; it
# prints one line (`passed`, the first case that differs with a hint, or `not attempted yet`).
# Solutions: `solutions/03_attention_masks.py`.


# %%
from llamanb.course.exercises import ch03

# %% [markdown]
# ### 03.1 GQA scores with a group axis
#
# Write `gqa_scores(q, k)`: `q [S, N_h, d]`, `k [T, N_kv, d]` -> scores `[N_kv, G, S, T]` scaled by
# `1/sqrt(d)`, without copying K (no `np.repeat`). Checked against transformers' way, `repeat_kv`
# then one product per head. *Hint:* section 1: which query heads share K head `n`?

# %%
def gqa_scores(q: np.ndarray, k: np.ndarray) -> np.ndarray:    # [S, N_h, d], [T, N_kv, d] -> [N_kv, G, S, T]
    raise NotImplementedError  # your code here


# %%
ch03.gqa_scores(gqa_scores)

# %% [markdown]
# ### 03.2 The causal mask of a chunk
#
# Write `causal_mask(S, start)`: the additive `[S, start + S]` float32 mask (0 visible, `-inf`
# hidden) for `S` queries at positions `start .. start + S - 1` over every key so far -- the mask
# of a decode step (`S = 1`) or of a chunk of a long prompt after `start` cached positions.
# Checked against the closed form (and the visible count against `llamanb.model.flops.attention_pairs`).
# *Hint:* at which position does query row `i` sit?

# %%
def causal_mask(S: int, start: int) -> np.ndarray:     # -> [S, start + S] float32
    raise NotImplementedError  # your code here


# %%
ch03.causal_mask(causal_mask)
