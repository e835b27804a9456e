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
#     builds: the plainest forward pass, then one block op by op against transformers
#     modules:
#     - llamanb.model.reference
#     - llamanb.model.config
#     - llamanb.model.ops
#     - llamanb.engine.numpy_backend
#     part: I
# ---

# %% [markdown]
# # 01 · The Llama math, in numpy
#
# **What you will build.** The plainest Llama forward pass, and then the same arithmetic one
# operation at a time. A Llama is ten integers and a few hundred matrices: you name the integers,
# read the whole forward pass as one short float64 function (`llamanb.model.reference`, written like
# llama2.c's `run.c`), run it on the SmolLM2-135M that ships with the course and check its logits
# against HF transformers. Then you take one transformer block apart, op by op in numpy, checking
# every intermediate against transformers, and find that it is the block `llamanb`'s engine runs.
# Why: every later chapter — the KV cache, the kernels, the accelerators — computes exactly this
# function, faster; this is the yardstick they are held to. (What the model costs in parameters,
# bytes and FLOPs is chapter 01b.)
#
# Every claim below is an `assert`: against the published config, against transformers, or against
# closed-form arithmetic.

# %%
import textwrap
import warnings

import matplotlib.pyplot as plt
import numpy as np
from IPython.display import Markdown, display

from llamanb import LLAMA3_70B, LLAMA32_1B, SMOLLM2_135M, Engine, LlamaConfig, load_model


def roundup(err: float) -> float:
    """An error rounded up to a power of ten (1e-6, 1e-5, ...): its order of magnitude, coarse
    enough to print the same from run to run."""
    return 0.0 if err == 0 else float(10.0 ** np.ceil(np.log10(err)))

warnings.filterwarnings("ignore")

MODELS = [SMOLLM2_135M, LLAMA32_1B, LLAMA3_70B]

# %% [markdown]
# ## 1. The symbols
#
# Every shape in this course is written with the same ten letters:
#
# - **B**: batch, how many independent sequences run together (1 everywhere in this notebook).
# - **S**: sequence length, the number of token positions processed in one call (the prompt
#   length in prefill, 1 in decode). B and S describe the call, not the model.
# - **H**: hidden size, the width of the vector every token carries from block to block.
# - **N_h**: number of query heads in attention.
# - **N_kv**: number of key/value heads. With grouped-query attention (GQA) it is smaller than N_h.
# - **G** = N_h / N_kv: how many query heads share one key/value head.
# - **d_h**: width of one head. It is a config field of its own (`head_dim`): N_h·d_h happens to
#   equal H in all three models below, but nothing in the math requires it.
# - **D_ff**: width of the feed-forward (MLP) layer inside each block.
# - **V**: vocabulary size, the number of distinct token ids (rows of the embedding table).
# - **L**: number of transformer blocks (layers).
#
# The three presets in `llamanb.model.config` hold the published values:

# %%
rows = [("H", "hidden"), ("N_h", "n_heads"), ("N_kv", "n_kv_heads"), ("G", "group"),
        ("d_h", "head_dim"), ("D_ff", "ffn"), ("V", "vocab"), ("L", "n_layers")]
table = "| symbol | " + " | ".join(c.name for c in MODELS) + " |\n|---|" + "---:|" * len(MODELS) + "\n"
for sym, attr in rows:
    table += f"| {sym} | " + " | ".join(f"{getattr(c, attr):,}" for c in MODELS) + " |\n"
table += "| tied embeddings | " + " | ".join(str(c.tie_embeddings) for c in MODELS) + " |\n"
display(Markdown(table))

for c in MODELS:
    assert c.group * c.n_kv_heads == c.n_heads            # G is a whole number
    assert c.q_dim == c.hidden                            # N_h * d_h == H for these three

# %% [markdown]
# ## 2. The whole forward pass, plainly
#
# Here is the entire model as `llamanb.model.reference.forward` writes it: one function, read top
# to bottom, in float64, one sequence, every position at once, with no cache, no padding and no
# tiles (in the spirit of llama2.c's `run.c`). Read it once now; section 3 takes its loop body apart
# operation by operation.

# %%
import inspect

from llamanb.model import reference

source = inspect.getsource(reference.forward)
print(source[source.index("    c = weights.config"):])

# %% [markdown]
# Run it on the embedded SmolLM2-135M, and run transformers' own `LlamaForCausalLM` on the same
# checkpoint: `load_hf(model, via="converted")` has transformers read the `config.json` and
# `model.safetensors` that `llamanb` converted from the GGUF, with its own loader and its own
# forward pass (in float32). The plain function must give the same logits, to float32 rounding,
# and so the same next token at every position.

# %%
from llamanb.platform.progress import stages

with stages(prefix="transformers") as say:              # a line while it runs, gone after
    say("importing torch and transformers, loading the converted checkpoint")
    import torch

    from llamanb.check.hf_reference import hidden_states, load_hf

    model = load_model()                      # SmolLM2-135M-Instruct, memory-mapped from the cache
    engine = Engine(model)
    W, c = model.weights, model.config
    torch.manual_seed(0)
    hf = load_hf(model, via="converted")
    hf.config._attn_implementation = "eager"  # plain matmul attention

    ids = model.tokenizer.encode_prompt(
        "Rotary embeddings tell each attention head where a token sits in the sentence.", chat=False)
    S = len(ids)
    say(f"the float64 reference and transformers, each over the {S}-token prompt")
    exact = reference.forward(W, ids)                                  # [S, V] float64
    with torch.no_grad():
        hf_logits = hf(torch.tensor([ids]), use_cache=False).logits[0].numpy()   # [S, V] float32
rel_logits = float(np.abs(hf_logits - exact).max() / np.abs(exact).max())
assert exact.shape == hf_logits.shape == (S, c.vocab)
assert np.array_equal(exact.argmax(-1), hf_logits.argmax(-1))      # the same next token everywhere
assert rel_logits < 1e-4
print("S =", S, "tokens:", ids)
print("logits", exact.shape, "| next token after the prompt:", repr(model.tokenizer.decode([int(exact[-1].argmax())])))

# %%
# NBVAL_IGNORE_OUTPUT
print(f"max |transformers - reference| / max |reference| on this machine: <= {roundup(rel_logits):.0e}")

# %% [markdown]
# ## 3. One block, op by op
#
# Now the arithmetic. Take a short real prompt through the embedding and then through block 0 of
# SmolLM2-135M, one operation per cell, writing the shape of every array. The reference is
# transformers running the same block: forward hooks on the submodules of its layer 0 record what
# goes in and comes out of each one.

# %%
captured = {}                             # module name -> (first input, output) as numpy

def record(name):
    def hook(module, args, out):
        out = out[0] if isinstance(out, tuple) else out          # self_attn returns (out, weights)
        captured[name] = (args[0][0].detach().numpy().copy() if args else None,
                          out[0].detach().numpy().copy())       # drop the batch axis
    return hook

layer0 = hf.model.layers[0]
hooked = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
          "self_attn.o_proj", "self_attn", "post_attention_layernorm", "mlp.gate_proj",
          "mlp.up_proj", "mlp.act_fn", "mlp.down_proj"]
handles = [layer0.get_submodule(n).register_forward_hook(record(n)) for n in hooked]
hf_hidden = hidden_states(hf, ids)          # one forward pass: hooks fire, hidden states returned
for h in handles:
    h.remove()
print(textwrap.fill("hooked: " + ", ".join(sorted(captured)), 100, subsequent_indent=" " * 8))

# %% [markdown]
# Every intermediate is checked with the same helper: shape equal, values within tolerance
# (both sides compute in float32; they differ only in the order of their sums).

# %%
RTOL, ATOL = 1e-4, 1e-5
report = []

def check(name, mine, theirs, rtol=RTOL, atol=ATOL):
    mine, theirs = np.asarray(mine), np.asarray(theirs)
    assert mine.shape == theirs.shape, (name, mine.shape, theirs.shape)
    np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol, err_msg=name)
    scale = float(np.max(np.abs(theirs)))
    report.append((name, mine.shape, float(np.max(np.abs(mine - theirs))) / (scale or 1.0)))

# %% [markdown]
# **Embedding.** Row `ids[i]` of the `[V, H]` table is token i's starting vector. A lookup, no
# arithmetic, so it must match exactly.

# %%
x = W.embed[np.array(ids)]                                      # [S, H]
assert np.array_equal(x, hf_hidden[0])
check("embedding", x, hf_hidden[0], rtol=0, atol=0)
print(x.shape)

# %% [markdown]
# **RMSNorm.** Each row is divided by its root mean square, then scaled per channel by a learned
# weight γ `[H]`: `x / sqrt(mean(x²) + ε) · γ`. No mean subtraction, no bias.

# %%
def rms_norm(x, gamma, eps):                                    # [S, H], [H] -> [S, H]
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps))   # [S, 1]
    return x / rms * gamma

h = rms_norm(x, W.layers[0].attn_norm, c.rms_eps)              # [S, H]
check("input_layernorm", h, captured["input_layernorm"][1])
print(h.shape)

# %% [markdown]
# **Q, K, V projections.** Three matrix products. `wqkv` stores q, k and v rows back to back;
# split it into HF's three matrices. K and V are `N_kv·d_h = 192` wide, a third of Q's 576,
# because G = 3 query heads share each K/V head.

# %%
Wq, Wk, Wv = W.split_qkv(0)             # [N_h d_h, H], [N_kv d_h, H], [N_kv d_h, H]
q = h @ Wq.T                            # [S, N_h d_h]  = [S, 576]
k = h @ Wk.T                            # [S, N_kv d_h] = [S, 192]
v = h @ Wv.T                            # [S, N_kv d_h] = [S, 192]
check("q_proj", q, captured["self_attn.q_proj"][1])
check("k_proj", k, captured["self_attn.k_proj"][1])
check("v_proj", v, captured["self_attn.v_proj"][1])
print(q.shape, k.shape, v.shape)

# %% [markdown]
# **RoPE.** Rotary position embedding rotates pairs of dimensions of every q and k head by an
# angle that grows with the position: pair i turns at frequency `θ^(-2i/d_h)` (θ = `rope_theta`,
# i = 0 .. d_h/2 - 1), so position p rotates it by `p · θ^(-2i/d_h)`. A dot product of a rotated
# query and a rotated key then depends only on the *difference* of their positions. HF (and
# `llamanb`) pair dimension i with dimension i + d_h/2 (the "half-split" layout; GGUF files pair
# 2i with 2i+1, the same rotation on a permuted head: notebook 02):
#
# `(x1, x2) → (x1·cos − x2·sin, x2·cos + x1·sin)`, with `x1 = x[:d_h/2]`, `x2 = x[d_h/2:]`.
#
# The frequency table first, derived here and checked against `llamanb.model.rope` and against the
# cos/sin that transformers' rotary module produced for this prompt:

# %%
from llamanb.model import rope

d = c.head_dim
inv_freq = (1.0 / c.rope_theta ** (np.arange(0, d, 2) / d)).astype(np.float32)   # [d_h/2]
angles = np.arange(S, dtype=np.float32)[:, None] * inv_freq[None, :]             # [S, d_h/2]
cos, sin = np.cos(angles), np.sin(angles)                                         # [S, d_h/2]
np.testing.assert_allclose(inv_freq, rope.inv_freq(d, c.rope_theta), rtol=1e-6)
with torch.no_grad():
    cos_t, sin_t = hf.model.rotary_emb(torch.zeros(1), torch.arange(S)[None])    # [1, S, d_h]
check("rope cos (vs HF)", np.concatenate([cos, cos], -1), cos_t[0].numpy())
check("rope sin (vs HF)", np.concatenate([sin, sin], -1), sin_t[0].numpy())
print(inv_freq.shape, cos.shape)

# %%
def rope_half_split(x, cos, sin):                       # x [S, n, d_h]; cos, sin [S, d_h/2]
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
    c_, s_ = cos[:, None, :], sin[:, None, :]                    # broadcast over heads
    return np.concatenate([x1 * c_ - x2 * s_, x2 * c_ + x1 * s_], axis=-1)

q_heads = q.reshape(S, c.n_heads, d)                    # [S, N_h, d_h]
k_heads = k.reshape(S, c.n_kv_heads, d)                 # [S, N_kv, d_h]
v_heads = v.reshape(S, c.n_kv_heads, d)                 # [S, N_kv, d_h]
q_rot = rope_half_split(q_heads, cos, sin)              # [S, N_h, d_h]
k_rot = rope_half_split(k_heads, cos, sin)              # [S, N_kv, d_h]

# reference: transformers' own apply_rotary_pos_emb on transformers' q and k
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

tq = torch.from_numpy(captured["self_attn.q_proj"][1]).view(1, S, c.n_heads, d).transpose(1, 2)
tk = torch.from_numpy(captured["self_attn.k_proj"][1]).view(1, S, c.n_kv_heads, d).transpose(1, 2)
hq, hk = apply_rotary_pos_emb(tq, tk, cos_t, sin_t)     # [1, N, S, d_h]
check("rope q", q_rot, hq[0].transpose(0, 1).numpy())
check("rope k", k_rot, hk[0].transpose(0, 1).numpy())
print(q_rot.shape, k_rot.shape)

# %% [markdown]
# **Grouped-query attention with a causal mask.** Query head j uses K/V head `j // G`. Its scores
# are `q·kᵀ / √d_h` for every (query, key) pair, `[S, S]` per head; positions after the query are
# set to −∞ so that softmax gives them weight 0 (a token may not look at the future). Each row of
# the softmax weights then averages the value vectors.

# %%
G = c.group
kv_of_head = np.arange(c.n_heads) // G                              # [N_h]: 0 0 0 1 1 1 2 2 2
qh = q_rot.transpose(1, 0, 2)                                       # [N_h, S, d_h]
kh = k_rot.transpose(1, 0, 2)[kv_of_head]                           # [N_h, S, d_h] (shared heads)
vh = v_heads.transpose(1, 0, 2)[kv_of_head]                         # [N_h, S, d_h]
scores = qh @ kh.transpose(0, 2, 1) / np.float32(np.sqrt(d))        # [N_h, S, S]
future = np.triu(np.ones((S, S), dtype=bool), k=1)                  # [S, S], True above diagonal
scores = np.where(future, -np.inf, scores)
probs = np.exp(scores - scores.max(-1, keepdims=True))
probs /= probs.sum(-1, keepdims=True)                               # [N_h, S, S], rows sum to 1
attn = (probs @ vh).transpose(1, 0, 2).reshape(S, c.n_heads * d)    # [S, N_h d_h]
assert np.all(probs[:, future] == 0)
check("attention (o_proj input)", attn, captured["self_attn.o_proj"][0])
print(scores.shape, attn.shape, kv_of_head)

# %% [markdown]
# **Output projection and the first residual.** o_proj maps the concatenated heads back to H;
# the block adds the result to its own input (the residual stream).

# %%
o = attn @ W.layers[0].wo.T                                         # [S, H]
check("o_proj", o, captured["self_attn.o_proj"][1])
check("self_attn output", o, captured["self_attn"][1])
x1 = x + o                                                          # [S, H]
check("residual 1", x1, captured["post_attention_layernorm"][0])
print(o.shape, x1.shape)

# %% [markdown]
# **The MLP (SwiGLU).** Normalise again, project up twice (gate and up, `[S, D_ff]`), pass the gate
# through SiLU, `silu(g) = g · sigmoid(g) = g / (1 + e^(−g))`, multiply elementwise with up,
# project back down to H, and add the second residual.

# %%
h2 = rms_norm(x1, W.layers[0].ffn_norm, c.rms_eps)                  # [S, H]
check("post_attention_layernorm", h2, captured["post_attention_layernorm"][1])
Wg, Wu = W.split_gate_up(0)                                         # [D_ff, H] each
gate = h2 @ Wg.T                                                    # [S, D_ff]
up = h2 @ Wu.T                                                      # [S, D_ff]
check("gate_proj", gate, captured["mlp.gate_proj"][1])
check("up_proj", up, captured["mlp.up_proj"][1])
print(h2.shape, gate.shape, up.shape)

# %%
act = gate / (1 + np.exp(-gate))                                    # [S, D_ff], SiLU
check("act_fn (silu)", act, captured["mlp.act_fn"][1])
prod = act * up                                                     # [S, D_ff]
check("silu(gate) * up", prod, captured["mlp.down_proj"][0])
down = prod @ W.layers[0].w_down.T                                  # [S, H]
check("down_proj", down, captured["mlp.down_proj"][1])
block_out = x1 + down                                               # [S, H]
check("block 0 output", block_out, hf_hidden[1])
print(act.shape, down.shape, block_out.shape)

# %% [markdown]
# Every intermediate of block 0, in order:

# %%
# NBVAL_IGNORE_OUTPUT
# (the distances move with the CPU's BLAS kernel; check() asserted each one above)
print(f"{'op':28s} {'shape':14s} max |ours - HF| / max |HF|  (rounded up to a power of ten)")
for name, shape, rel in report:
    print(f"{name:28s} {shape!s:14s} {'0 (exact)' if rel == 0 else f'<= {roundup(rel):.0e}'}")
print(f"({len(report)} checks, each asserted within rtol={RTOL}, atol={ATOL}; float32 eps = 1.2e-07)")

# %% [markdown]
# ### 3.1 All 30 blocks: llamanb's engine against transformers
#
# `Engine.forward(ids, cache, collect=lst)` appends the embedding and every block's output to
# `lst`. transformers' `hidden_states` are the same list, except that transformers 5 applies the
# final RMSNorm to the last entry, so that one is compared after the final norm. Per layer, the
# relative error is `‖ours − HF‖ / ‖HF‖` over the whole `[S, H]` array.

# %%
from llamanb.model.ops import rms_norm as llamanb_rms_norm
from llamanb.engine.step import Step

collected = []
with stages() as say:
    say(f"llamanb's forward over the prompt, keeping all {c.n_layers + 1} hidden states")
    engine.forward(ids, engine.new_cache(S), collect=collected)    # L + 1 arrays of [S, H]
assert len(collected) == len(hf_hidden) == c.n_layers + 1
ours_states = collected[:-1] + [llamanb_rms_norm(collected[-1], W.final_norm, c.rms_eps)]
rel_err = np.array([np.linalg.norm(a - b) / np.linalg.norm(b) if np.linalg.norm(b) else 0.0
                    for a, b in zip(ours_states, hf_hidden)])
BOUND = 1e-5
assert np.all(rel_err < BOUND)
print(f"all {len(rel_err)} hidden states (embedding, 30 blocks; last after the final norm): "
      f"relative error < {BOUND:g} (asserted)")
peak = max(np.abs(s).max() for s in hf_hidden[1:-1])
assert peak > 1e4
print(f"largest |activation| in the residual stream: {peak:.2g}")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"largest relative error on this machine: <= {roundup(rel_err.max()):.0e}")

# %%
fig, ax = plt.subplots(figsize=(7, 3))
ax.semilogy(np.arange(1, len(rel_err)), rel_err[1:], "o-", ms=3)
ax.axhline(BOUND, color="gray", ls="--", lw=1, label=f"asserted bound {BOUND:g}")
ax.set_xlabel("block (1-based); the last point also includes the final norm")
ax.set_ylabel("‖ours − HF‖ / ‖HF‖")
ax.set_title("llamanb numpy engine vs transformers, SmolLM2-135M, float32")
ax.legend()
fig.tight_layout()
plt.show()

# %% [markdown]
# The error stays at float32 rounding level through all 30 blocks, even though a few channels of
# the residual stream grow past 10,000 (the relative measure is what stays flat).
#
# ### 3.2 The hand-written block is llamanb's block
#
# Finally the block from the cells above against `engine.backend.block`, the code every later
# notebook runs (it fuses q/k/v into one GEMM, applies RoPE in place and computes attention in
# tiles, so agreement is to rounding, not to the bit):

# %%
def my_block(x, layer, start=0):
    """The cells above in one function: x [S, H] -> [S, H] (positions start .. start+S-1)."""
    lw, n = W.layers[layer], x.shape[0]
    ang = np.arange(start, start + n, dtype=np.float32)[:, None] * inv_freq[None, :]
    cs, sn = np.cos(ang), np.sin(ang)
    hq, hk, hv = (rms_norm(x, lw.attn_norm, c.rms_eps) @ w.T for w in W.split_qkv(layer))
    qr = rope_half_split(hq.reshape(n, c.n_heads, d), cs, sn).transpose(1, 0, 2)
    kr = rope_half_split(hk.reshape(n, c.n_kv_heads, d), cs, sn).transpose(1, 0, 2)[kv_of_head]
    vv = hv.reshape(n, c.n_kv_heads, d).transpose(1, 0, 2)[kv_of_head]
    sc = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf,
                  qr @ kr.transpose(0, 2, 1) / np.float32(np.sqrt(d)))
    p = np.exp(sc - sc.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    x = x + (p @ vv).transpose(1, 0, 2).reshape(n, -1) @ lw.wo.T
    g, u = (rms_norm(x, lw.ffn_norm, c.rms_eps) @ w.T for w in W.split_gate_up(layer))
    return x + (g / (1 + np.exp(-g)) * u) @ lw.w_down.T

assert np.array_equal(my_block(x, 0), block_out)            # the function is the cells above
step = Step.build([(0, 0, ids)])              # S rows of sequence 0 at positions 0..S-1
theirs = engine.backend.block(0, x.copy(), step, engine.new_cache(S))          # [S, H]
np.testing.assert_allclose(my_block(x, 0), theirs, rtol=1e-4, atol=1e-5)
for layer in (1, 15, 29):                                    # deeper blocks, on their real inputs
    np.testing.assert_allclose(my_block(collected[layer], layer),
                               engine.backend.block(layer, collected[layer].copy(), step,
                                                    engine.new_cache(S)),
                               rtol=1e-4, atol=1e-6 * float(np.abs(collected[layer]).max()))
worst_block = max(float(np.max(np.abs(my_block(collected[i], i) - engine.backend.block(
    i, collected[i].copy(), step, engine.new_cache(S))))) / float(np.max(np.abs(collected[i])))
    for i in (1, 15, 29))
print("hand-written block vs engine.backend.block, blocks 0, 1, 15, 29: equal within the asserted "
      "tolerances (rtol 1e-4)")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"max |difference| / max |input| on this machine: <= {roundup(worst_block):.0e}")

# %% [markdown]
# ## Summary
#
# - **The plainest forward pass** is `llamanb.model.reference.forward`: embed, `L` blocks of
#   RMSNorm, Q/K/V, RoPE, causal grouped-query attention and SwiGLU with their residuals, the final
#   norm and the LM head, in float64; transformers' float32 logits agree with it to rounding.
# - **The symbols** live in `llamanb.model.config.LlamaConfig`, with the presets `SMOLLM2_135M`,
#   `LLAMA32_1B`, `LLAMA3_70B`.
# - **The block** you wrote by hand is what `llamanb.engine.numpy_backend.NumpyBackend.block` runs,
#   with `llamanb.model.rope` for the rotation; `Engine.forward` chains 30 of them and agrees with
#   transformers to a relative error below 1e-5 at every layer of SmolLM2-135M.
#
# **Next**, notebook 01b counts what this model costs: its parameters, the bytes of its weights and
# KV cache, and the FLOPs of a prefill against torch's own counter; notebook 02 takes RoPE apart.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against the finished code in `llamanb`. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it: one
# line, `passed`, the first case that differs (expected, got, shapes) with a hint, or `not attempted
# yet`. One way to solve each, with a sentence on why: `solutions/01_llama_math_numpy.py`.

# %%
from llamanb.course.exercises import ch01

# %% [markdown]
# ### 01.1 Parameters of one block
#
# Write `block_params(c)`: the number of parameters of one transformer block of the config `c`
# (a `LlamaConfig`: `c.hidden`, `c.n_heads`, `c.n_kv_heads`, `c.head_dim`, `c.ffn`), the block's
# two RMSNorm weights included. It is checked on the four presets and on random small configs.
# *Hint:* the weight shapes of section 3 (one row per output); which projections shrink with
# grouped-query attention? (Chapter 01b counts the whole model this way.)

# %%
def block_params(c: LlamaConfig) -> int:
    """Parameters of one transformer block (4 attention projections, 3 FFN matrices, 2 norms)."""
    raise NotImplementedError  # your code here


# %%
ch01.block_params(block_params)

# %% [markdown]
# ### 01.2 RMSNorm
#
# Write `rms_norm(x, gamma, eps)`: `x [S, H]` float32, `gamma [H]`, returns `[S, H]`, each row
# divided by its root mean square and scaled by `gamma`. Checked against `llamanb.model.ops.rms_norm`
# to a relative 1e-5, including small activations where `eps` matters and an all-zero row.
# *Hint:* where does `eps` go, and is it a mean or a sum?

# %%
def rms_norm(x: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:   # [S, H], [H] -> [S, H]
    raise NotImplementedError  # your code here


# %%
ch01.rms_norm(rms_norm)
