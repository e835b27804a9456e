# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 08 · Llama as an einsum program on Furiosa's TCP
#
# **What you will build.** Furiosa's RNGD card is a *Tensor Contraction Processor* (TCP). Its
# Tensor DMA engine moves tensors between HBM and the on-chip data memory (DM); inside each of the
# chip's 512 DM slices a *Tensor Unit* pipeline then streams a tensor from DM through Fetch, Switch
# and Collect into the Contraction Engine (broadcast, multiply, reduce over named axes: einsums),
# then the Vector Engine (elementwise work and reductions), Cast and Transpose, and Commit writes
# the result back to DM. The "Transformer Architecture" chapter of Furiosa's TCP programming book
# (repository furiosa-ai/furiosa-opt, `docs/src/kernel-examples/transformer.md`, versions of April
# and May 2026) writes Llama 3 70B as a chain of such steps and names the engine of each. As prose
# it cannot be run; here it becomes a program:
#
# 1. the chapter's op list as **data** (`llamanb.tcp.program`): each op with its einsum over named
#    axes, its engine, what it moves between HBM and DM, and a note where the chapter is wrong;
# 2. an **interpreter** (`llamanb.tcp.interpret`) that runs that list with `numpy.einsum` on the
#    embedded model's real weights, for a batch of sequences, prefill then decode, and reproduces
#    the numpy engine's tokens; the same program plugs into the engine as backend `"tcp"`;
# 3. a **cost model** (`llamanb.tcp.cost`) built from RNGD's published specifications that says,
#    op by op, where the time goes for Llama 3.1 8B and Llama 3 70B; calibrated on one of
#    Furiosa's published throughput figures, it predicts the other.
#
# No TCP is used. The program runs on the CPU (the backend says "emulated"), and every time below
# that concerns RNGD is an **estimate** from specifications, never a measurement.
#
# *Which version of the book.* In August 2026 (commit d4d05a7) Furiosa replaced the Llama page with
# "Case Study: Transformer": Qwen3-0.6B, one decode token, the embedding prepared on the host,
# attention computed in online-softmax chunks, no prefill. The op list here follows the earlier
# Llama walk (commits a837582 and f8938cb), which is the one with prefill, decode and engine names
# for every step; where the newer page does something differently, the text says so.

# %% [markdown]
# ## 0. Setup

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, generate, load_model
from llamanb.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M

model = load_model()
engine = Engine(model)                          # the numpy reference engine
cfg = model.config
print(cfg.name, "| L =", cfg.n_layers, "D =", cfg.hidden, "h_q =", cfg.n_heads, "h_kv =", cfg.n_kv_heads,
      "d_k =", cfg.head_dim, "F =", cfg.ffn, "V =", cfg.vocab)

# %% [markdown]
# ## 1. The chapter's axes
#
# The chapter names every axis: `B` (batch), `s_in` (new tokens), `s` (tokens so far, the keys),
# `s_max`, `h_q`, `h_kv`, `G = h_q / h_kv`, `d_k`, `d_k' = d_k / 2`, `f = 2` (which member of a RoPE
# pair), `D`, `F`, `V`. We add `r = 2`, the output member of a RoPE pair: an einsum must tell the
# axis it contracts from the one it writes. `dims` gives each axis its size for one step;
# here a prefill of 2 sequences of 16 tokens for the three models of this chapter.

# %%
from llamanb.tcp.program import dims

for c in (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B):
    d = dims(c, 2, 16)
    print(f"{c.name:<22}", "  ".join(f"{k}={v}" for k, v in d.items() if k not in ("s_max",)))

# %% [markdown]
# ## 2. One einsum by hand: the Q projection
#
# `Q = einsum(x_norm, w_q)` with `x_norm [B, s_in, D]` and `w_q [D, h_q, d_k]` is, on a TCP, three
# moves: **broadcast** both operands to the product of all their axes `[B, s_in, D, h_q, d_k]`,
# **multiply** elementwise (the Contraction Engine), **reduce** the axis that is not in the result,
# `D` (the reducers). We write exactly that in numpy on layer 0 of the embedded model, for 3 tokens.

# %%
from llamanb.ops import rms_norm
from llamanb.tcp.interpret import layout

lay = layout(model.weights)                     # the chapter's weight layouts, made once
w_q = lay.layers[0]["w_q"]                      # [D, h_q, d_k]
ids = np.array([[1, 9690, 198]])                # [B=1, s_in=3]
x = model.weights.embed[ids]                    # [1, 3, D]
x_norm = rms_norm(x[0], model.weights.layers[0].attn_norm, cfg.rms_eps)[None]       # [1, 3, D]
product = x_norm[:, :, :, None, None] * w_q[None, None, :, :, :]                      # [1, 3, D, h_q, d_k]
Q_hand = product.sum(axis=2)                                                          # [1, 3, h_q, d_k]
print("broadcast product:", product.shape, "-> reduced over D:", Q_hand.shape)

# %% [markdown]
# The package's op holds the same einsum as data; its numpy subscripts are derived from the axis
# names, and its FLOPs from their sizes (2 per point of the broadcast product).

# %%
from llamanb.tcp.program import program

prefill = program(cfg, "prefill")
q_op = next(op for op in prefill.layer if op.name == "q_proj")
print(q_op.formula())
print("subscripts:", q_op.subscripts, "| reduced:", q_op.reduced, "| broadcast:", q_op.broadcast)
Q_pkg = np.einsum(q_op.subscripts, x_norm, w_q)
print("max |hand - package| =", f"{np.abs(Q_hand - Q_pkg).max():.1e}")
assert np.allclose(Q_hand, Q_pkg, atol=1e-4)
assert q_op.flops(dims(cfg, 1, 3)) == 2 * product.size

# %% [markdown]
# ## 3. The program: every op and its engine
#
# The prefill program, layer ops once (they repeat `L` times). An engine marked `*` is not named
# by the chapter and was inferred (an einsum goes to the Contraction Engine, a table lookup to the
# Tensor DMA). `view` ops are the chapter's "Reshape (noop)": the same bytes under other axes; the
# program checks each one really is a reshape (no transpose hidden in it).

# %%
def listing(prog):
    for op, times in prog.ops():
        eng = op.engine + ("" if op.stated else " *")
        print(f"{op.section:<8} {op.name:<13} x{times:<3} {eng:<20} {op.formula()}")


listing(prefill)

# %% [markdown]
# Decode differs in three places: `s_in = 1`, the score and weighted-sum einsums read the whole
# cache from HBM (`kv_cache_K`, `kv_cache_V`) instead of the prompt's own K and V, and there is no
# causal mask (one new row sees every cached row).

# %%
decode = program(cfg, "decode")
for op in decode.layer:
    if op.name in ("attn_scores", "attn_values", "store_k"):
        print(f"{op.name:<12} {op.formula():<75} moves: {op.moves}")
print("causal_mask in decode:", any(op.name == "causal_mask" for op in decode.layer))

# %% [markdown]
# What crosses between HBM and DM, per kind of op (the cost model in section 8 counts the bytes):

# %%
moves = {}
for op, _ in prefill.ops() + decode.ops():
    moves.setdefault(op.moves, set()).add(op.name)
for m, names in sorted(moves.items()):
    print(f"{m:<55} {', '.join(sorted(names))}")

# %% [markdown]
# How one einsum runs on the chip, in the book's own terms (`docs/src/computing-tensors/`): one
# operand is first placed in a slice's Tensor Register File (TRF), the other streams from DM through
# Fetch, Switch (moves data between slices) and Collect (cuts the stream into 32-byte flits); the
# Contraction Engine's Outer stage broadcasts and multiplies (widening bf16 or fp8 to f32), its
# Packet Reducer sums the contracted axis inside a packet and its Time Reducer across cycles. A
# contracted axis spread over several slices is summed by the Vector Engine's inter-slice reducer
# (the chapter's list calls it "slice reduce: global adder tree"), and one spread over chips by
# DMA plus a Vector Engine add ("cluster/chip reduce"). The Vector Engine computes in i32/f32 only.

# %% [markdown]
# ## 4. Where the chapter is wrong, and what the program does instead
#
# Each correction lives in the op it concerns (`op.note`), quoting the chapter. All of them:

# %%
import textwrap

from llamanb.tcp.program import CORRECTIONS

for k, v in CORRECTIONS.items():
    print(f"- {k}:\n" + textwrap.fill(v, 100, initial_indent="    ", subsequent_indent="    "))

# %% [markdown]
# Two of them change the numbers, so we measure them. First the RoPE pairing. The chapter rotates
# *consecutive* pairs `(x_2i, x_2i+1)` with its `[s_max, d_k', 2, 2]` table (the table's
# orientation is derived in notebook 02). HF checkpoints pair `x_i` with `x_{i + d_k/2}`, so `layout`
# permutes each head's `d_k` columns of `w_q` and `w_k` once. Without that permutation the program
# runs, with every shape right, and computes another model (here its first token happens to be the
# same; its logits are not):

# %%
from llamanb.tcp.interpret import Interpreter

prompt = model.tokenizer.encode_prompt("What is the capital of France?")
run = Interpreter(lay)
right = run.prefill([prompt], run.new_cache(1, len(prompt)))[0]
ref = engine.prefill(prompt, engine.new_cache(len(prompt)))


def variant(**changes):
    """The same program on weights with some layer arrays replaced."""
    bad = layout(model.weights)
    for i, lw in enumerate(bad.layers):
        lw.update({k: f(i) for k, f in changes.items()})
    r = Interpreter(bad)
    return r.prefill([prompt], r.new_cache(1, len(prompt)))[0]


hf_order = variant(w_q=lambda i: model.weights.split_qkv(i)[0].T.reshape(cfg.hidden, cfg.n_heads, cfg.head_dim),
                   w_k=lambda i: model.weights.split_qkv(i)[1].T.reshape(cfg.hidden, cfg.n_kv_heads, cfg.head_dim))
tok = model.tokenizer
for name, lg in (("pairs permuted (program)", right), ("HF order, consecutive pairs", hf_order)):
    print(f"{name:<28} max |logits - engine| = {np.abs(lg - ref).max():7.4f}   next token {tok.decode([int(lg.argmax())])!r}")
print(f"{'numpy engine':<28} {'':>34} next token {tok.decode([int(ref.argmax())])!r}")

# %% [markdown]
# Second, the group axis. The chapter reads `h_q` as `[G, h_kv]`: query head `h` would share K/V
# head `h mod h_kv`. Llama's heads (and HF's `repeat_kv`) are `[h_kv, G]`: head `h` reads K/V head
# `h // G`. The program's own check refuses the chapter's reading as a view, since it would need a
# transpose:

# %%
from llamanb.errors import LlamanbError
from llamanb.tcp.ops import check_view

try:
    check_view(("B", "h_q", "s_in", "d_k"), ("B", "G", "h_kv", "s_in", "d_k"), "chapter's GQA view")
except LlamanbError as e:
    print("refused:", e)

# %% [markdown]
# To measure what it would compute, we relabel the query heads (and the matching rows of `w_o`)
# so that the program's `[h_kv, G]` grouping pairs them the chapter's way:

# %%
G, hkv = cfg.group, cfg.n_kv_heads
chapter_heads = np.array([g * hkv + k for k in range(hkv) for g in range(G)])   # slot k*G+g <- head g*h_kv+k
grouped_wrong = variant(w_q=lambda i: lay.layers[i]["w_q"][:, chapter_heads],
                        w_o=lambda i: lay.layers[i]["w_o"][chapter_heads])
print(f"[G, h_kv] grouping: max |logits - engine| = {np.abs(grouped_wrong - ref).max():.3f}, "
      f"next token {tok.decode([int(grouped_wrong.argmax())])!r}")
print("first heads' K/V head, Llama:", [h // G for h in range(6)], " chapter:", [h % hkv for h in range(6)])

# %% [markdown]
# Third, the decode position. The chapter's decode step holds `s - 1` cached rows, writes the new
# row at index `s - 1`, and gives RoPE `position(0) = s`. One decode step after our prompt, with the
# angle of position `s - 1` (the program) and of `s` (the chapter's text), against the engine:

# %%
import copy

cache0 = run.new_cache(1, len(prompt) + 2)                # room for the RoPE row of position s
run.prefill([prompt], cache0)
new = int(ref.argmax())                                     # the token the prompt predicts
ecache = engine.new_cache(len(prompt) + 1)
engine.prefill(prompt, ecache)
ref_dec = engine.decode(new, ecache)


def decode_at(position):
    cache = copy.deepcopy(cache0)
    d = dims(cfg, 1, 1, len(prompt) + 1)
    d["s_max"] = cache.s_max
    h = run.layers(run.programs["decode"], lay.w_emb[[[new]]], np.array([position]), d, cache)
    return run.head(h, d)[0][0]


s_now = len(prompt) + 1                                    # s counts the new row
for name, pos in (("position s - 1 (program)", s_now - 1), ("position s (chapter)", s_now)):
    print(f"{name:<26} max |logits - engine| = {np.abs(decode_at(pos) - ref_dec).max():.4f}")

# %% [markdown]
# ## 5. The program runs the model
#
# Two prompts of equal length as one batch (`B = 2`; the chapter's `B` axis shares one `s_in`),
# prefill and four greedy decode steps, sampling on the "host" (an argmax). Each sequence is then run
# alone through the numpy engine: the same tokens, and the logits agree to float32 rounding.

# %%
a = tok.encode_prompt("Name a color.")
b = tok.encode_prompt("Name a fruit.")
print("prompt lengths:", len(a), len(b))
tokens, logits = run.generate([a, b], 5)                   # tokens [2, 5], logits 5 x [2, V]
worst = 0.0
for row, p in enumerate((a, b)):
    res = generate(engine, p, max_new_tokens=5)
    cache = engine.new_cache(len(p) + 5)
    ref_logits = [engine.prefill(p, cache)] + [engine.decode(t, cache) for t in res.ids[:4]]
    worst = max(worst, max(np.abs(lg[row] - r).max() / np.abs(r).max() for lg, r in zip(logits, ref_logits)))
    print(f"sequence {row}: program {tokens[row].tolist()}  engine {res.ids}  -> {tok.decode(res.ids)!r}")
    assert tokens[row].tolist() == res.ids
print(f"largest logit difference, relative to the largest logit: {worst:.0e} (< 1e-4)")
assert worst < 1e-4

# %% [markdown]
# The same program on the engine's seam: `Engine(model, backend="tcp")` runs every block through
# the interpreter (one sequence of a step at a time) and the engine's own KV cache.

# %%
tcp_engine = Engine(model, backend="tcp")
print(tcp_engine.backend.description)
out = generate(tcp_engine, prompt, max_new_tokens=8)
print(repr(out.text))
assert out.ids == generate(engine, prompt, max_new_tokens=8).ids

# %% [markdown]
# ## 6. FLOPs, derived from the axes
#
# Every einsum's FLOPs come from its axis sizes. Summed per op name over a step they must equal
# `llamanb.flops`' closed forms (notebook 01), which know nothing about einsums. Prefill is compared
# with the *full* score rectangle, because the chapter computes all `s_in x s_in` scores and then
# masks; RoPE's 2x2 einsums are extra (llamanb.flops leaves them out). Prefill of 512 tokens and one
# decode step at 2048 tokens of context, batch 4:

# %%
from llamanb.flops import OPS, decode_flops, prefill_flops, total

print(f"{'model':<22} {'prefill GFLOP':>14} {'llamanb.flops':>14} {'RoPE':>8} {'decode GFLOP':>13} {'llamanb.flops':>14}")
for c in (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B):
    pf = program(c, "prefill").flops(dims(c, 4, 512))
    df = program(c, "decode").flops(dims(c, 4, 1, 2049))
    ref_p, ref_d = prefill_flops(c, 512, attention="full", batch=4), decode_flops(c, 2048, batch=4)
    assert {k: pf[k] for k in OPS} == ref_p and {k: df[k] for k in OPS} == ref_d
    rope = pf["rope_q"] + pf["rope_k"]
    print(f"{c.name:<22} {sum(pf[k] for k in OPS) / 1e9:>14,.1f} {total(ref_p) / 1e9:>14,.1f} "
          f"{rope / 1e9:>8,.2f} {sum(df[k] for k in OPS) / 1e9:>13,.2f} {total(ref_d) / 1e9:>14,.2f}")

# %% [markdown]
# ## 7. RNGD's numbers, and where each comes from
#
# The cost model reads one table. Every entry is Furiosa's own: the hardware specification table
# of the RNGD overview on developer.furiosa.ai (peaks, clock, HBM, 256 MB SRAM, PCIe, TDP), the
# TCP book's memory and DMA chapters (DM geometry and bandwidth, HBM channels, PCIe DMA rate, DMA
# start-up), and Furiosa-LLM's model-parallelism page (8 PEs per card). Only the per-transfer
# latency between cards is our assumption.

# %%
from llamanb.tcp.cost import RNGD

for k, v in RNGD.sources.items():
    print(f"{k:<9} {v}")
print(f"\nridge points (FLOP per HBM byte where compute time = HBM time): "
      + ", ".join(f"{f} {r:.0f}" for f, r in RNGD.ridge.items()))

# %% [markdown]
# The book's geometry reproduces the published peaks. Each of the 512 slices has a Contraction
# Engine of 8 lanes that take a 64-byte packet per cycle: 32 bf16 (or 64 fp8) multipliers per lane,
# 2 FLOPs per multiply, at 1 GHz. That gives 262 TFLOP/s for bf16, not 256: the published "256
# TFLOPS" is 256 x 1024 GFLOP/s. The model uses the published 256 and 512 (2.4 % below the
# geometry). The same book gives the DM bandwidth as 16 DMNs x 128 B per cycle = 2 TB/s.

# %%
for fmt in ("bf16", "fp8"):
    g = RNGD.contraction_peak(fmt)
    print(f"{fmt}: {RNGD.slices} slices x {RNGD.lanes} lanes x {RNGD.packet_bytes // (2 if fmt == 'bf16' else 1)} "
          f"multipliers x 2 FLOP x 1 GHz = {g / 1e12:.1f} TFLOP/s = {g / 1024e9:.0f} x 1024 GFLOP/s "
          f"(published {RNGD.peak[fmt] / 1e12:.0f} TFLOPS)")

# %% [markdown]
# ## 8. One op on the roofline, by hand
#
# Decode of Llama 3.1 8B, one sequence, FP8 weights: the FFN's gate projection reads
# `D x F` one-byte weights once and does `2 D F` FLOPs, an intensity of 2 FLOP/byte, far left of
# the FP8 ridge (341). Its time is the weight stream, `D F / 1.5 TB/s` per layer:

# %%
from llamanb.tcp.cost import op_costs, step_time

c8 = LLAMA31_8B
t_gate = c8.n_layers * c8.hidden * c8.ffn * 1.0 / RNGD.hbm_bw
costs = {c.name: c for c in op_costs(c8, "decode", 1, 1, 2048, weights="fp8")}
print(f"by hand: {t_gate * 1e3:.3f} ms | package: {costs['gate_proj'].time_s * 1e3:.3f} ms, "
      f"intensity {costs['gate_proj'].intensity:.1f}, bound by {costs['gate_proj'].bound}")
assert np.isclose(t_gate, costs["gate_proj"].time_s)

# %% [markdown]
# The whole step, op by op (estimated, one RNGD). Views and the host's sampling take no time
# in the model and are left out.

# %%
def table(cs, top=None):
    print(f"{'op':<14} {'xL':>3} {'GFLOP':>9} {'HBM MB':>9} {'FLOP/B':>7} {'bound':>8} {'us':>9}")
    for c in sorted(cs, key=lambda c: -c.time_s)[:top]:
        if c.time_s:
            print(f"{c.name:<14} {c.times:>3} {c.flops / 1e9:>9.2f} {c.hbm_bytes / 1e6:>9.1f} "
                  f"{c.intensity:>7.1f} {c.bound:>8} {c.time_s * 1e6:>9.1f}")
    print(f"step: {step_time(cs) * 1e3:.2f} ms (estimated)")


table(list(costs.values()))

# %% [markdown]
# The same model for the three models of this chapter, bf16 weights: time to first token for one
# prompt of 2048 tokens, and a decode step at 2048 tokens of context for batch 1 and 64, each with
# the op that takes longest. Llama 3 70B (141 GB in bf16) does not fit one 48 GB card: it is split
# over 8 cards here the way the chapter's einsums suggest, tensor parallel with two all-reduces per
# layer over PCIe (section 12 shows that Furiosa splits it differently).

# %%
print(f"{'model':<22} {'cards':>5} {'TTFT 2048':>10} {'top op':>19} {'decode B=1':>11} {'tok/s':>6} "
      f"{'decode B=64':>12} {'tok/s':>7} {'top op':>12}")
for c, cards in ((SMOLLM2_135M, 1), (LLAMA31_8B, 1), (LLAMA3_70B, 8)):
    pre = op_costs(c, "prefill", 1, 2048, cards=cards)
    d1, d64 = (op_costs(c, "decode", B, 1, 2048, cards=cards) for B in (1, 64))
    top = lambda cs: max(cs, key=lambda x: x.time_s).name
    print(f"{c.name:<22} {cards:>5} {step_time(pre) * 1e3:>8.1f}ms {top(pre):>19} {step_time(d1) * 1e3:>9.2f}ms "
          f"{1 / step_time(d1):>6.0f} {step_time(d64) * 1e3:>10.2f}ms {64 / step_time(d64):>7.0f} {top(d64):>12}")

# %% [markdown]
# ## 9. The roofline: every op a point
#
# x: FLOPs per byte crossing HBM; y: the FLOP/s the model grants the op. Ops with no HBM traffic
# (activations that stay in DM) are drawn at the right edge. Prefill of 1 x 2048 tokens and decode
# at 2048 tokens of context for batch 1 and batch 64, Llama 3.1 8B with bf16 weights.

# %%
RIGHT = 1e5


def roofline(ax, cs, fmt="bf16", label=None, marker="o", color=None):
    peak, ridge = RNGD.peak[fmt], RNGD.ridge[fmt]
    xs = np.logspace(-1, 5, 200)
    ax.loglog(xs, np.minimum(peak, xs * RNGD.hbm_bw), color="0.5", lw=1)
    ax.axvline(ridge, color="0.8", ls=":", lw=1)
    pts = [(min(c.intensity, RIGHT), c.flops / c.time_s) for c in cs if c.flops and c.time_s]
    ax.scatter(*zip(*pts), s=22, marker=marker, label=label, color=color, alpha=0.8)
    ax.set_xlabel("FLOP per HBM byte")
    ax.set_ylabel("FLOP/s (estimated)")
    ax.set_ylim(1e10, 2 * peak)
    ax.text(1.6 * RIGHT, 0.3 * peak, "on chip:\nno HBM bytes", fontsize=7, ha="right", va="top", color="0.4")


fig, ax = plt.subplots(figsize=(7, 4.5))
pre = op_costs(c8, "prefill", 1, 2048)
roofline(ax, pre, label="prefill 1 x 2048", color="C0")
roofline(ax, op_costs(c8, "decode", 1, 1, 2048), label="decode B=1", color="C1", marker="s")
roofline(ax, op_costs(c8, "decode", 64, 1, 2048), label="decode B=64", color="C2", marker="^")
for c in pre:
    if c.name in ("gate_proj", "attn_scores", "lm_head", "softmax"):
        ax.annotate(c.name, (min(c.intensity, RIGHT), c.flops / c.time_s), fontsize=7, xytext=(4, -10),
                    textcoords="offset points")
ax.set_title("Llama 3.1 8B on one RNGD (bf16 weights): ridge at 171 FLOP/B", fontsize=9)
ax.legend(fontsize=8, loc="lower right")
plt.show()

# %% [markdown]
# In prefill the projections sit at `2 s_in / 2 bytes = 2048` FLOP/B: compute-bound. The LM head
# sees one row (the last), so it is memory-bound even in prefill. The chapter's attention scores
# are `[B, h_q, s_in, s_in]`: 32 x 2048 x 2048 x 2 bytes = 256 MB per layer here, more than the DM
# can keep (section 10), so the score einsum writes them to HBM and lands below the ridge, and the
# scale, mask and softmax each read and write them again. In decode every projection slides to
# intensity `B` and the attention einsums stay at `G = 4`, whatever the batch: each cached key
# meets only the `G` query heads of its group.
#
# **Move the sliders** (in a live notebook) to see the ops cross the ridge: batch size and
# sequence length, prefill or decode. The figure below the widget is the same drawing, static, for
# four settings.

# %%
import io

from IPython.display import Image, display
from ipywidgets import Dropdown, IntSlider, Output, VBox


def roofline_png(phase, B, s):
    fig, ax = plt.subplots(figsize=(6, 3.8))
    cs = op_costs(c8, phase, B, s) if phase == "prefill" else op_costs(c8, phase, B, 1, s)
    roofline(ax, cs, color="C0" if phase == "prefill" else "C1")
    ax.set_title(f"{phase}, B = {B}, s = {s}: step {step_time(cs) * 1e3:.1f} ms (estimated)", fontsize=9)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


phase_w = Dropdown(options=["prefill", "decode"], value="decode", description="phase")
batch_w = IntSlider(value=1, min=1, max=256, description="B")
seq_w = IntSlider(value=2048, min=16, max=8192, step=16, description="s")
view = Output()


def redraw(_=None):
    view.outputs = ()
    view.append_display_data(Image(roofline_png(phase_w.value, batch_w.value, seq_w.value)))


for w in (phase_w, batch_w, seq_w):
    w.observe(redraw, names="value")
display(VBox([phase_w, batch_w, seq_w, view]))
redraw()

# %%
settings = [("decode", 1, 2048), ("decode", 256, 2048), ("prefill", 1, 64), ("prefill", 4, 512)]
fig, axes = plt.subplots(1, 4, figsize=(15, 3.6), sharey=True)
for ax, (phase, B, s) in zip(axes, settings):
    cs = op_costs(c8, phase, B, s) if phase == "prefill" else op_costs(c8, phase, B, 1, s)
    roofline(ax, cs, color="C0" if phase == "prefill" else "C1")
    above = sum(c.bound == "compute" for c in cs)
    ax.set_title(f"{phase} B={B} s={s}\n{above} compute-bound ops", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 10. What fits on chip
#
# RNGD has 256 MB of DM (Furiosa's specification table; the book: 512 slices of 512 KB). The
# model keeps an activation in DM when it fits in half of it (the other half streams weights). The
# largest tensors of one layer:

# %%
from llamanb.tcp.ops import shape


def biggest(c, phase, B, s_in, s, cards=1, n=5):
    d = dims(c, B, s_in, s)
    d.update(h_q=d["h_q"] // cards, h_kv=max(d["h_kv"] // cards, 1), F=d["F"] // cards)
    sizes = {}
    for op in program(c, phase).layer:
        for name, axes in zip(op.args + (op.out,), op.arg_axes + (op.out_axes,)):
            sizes[name] = np.prod(shape(axes, d)) * (1 if name.startswith("w_") else 2)
    return sorted(sizes.items(), key=lambda kv: -kv[1])[:n]


for c, phase, B, s_in, s, cards in ((LLAMA31_8B, "prefill", 1, 2048, 2048, 1), (LLAMA3_70B, "prefill", 1, 2048, 2048, 1),
                                     (LLAMA3_70B, "prefill", 1, 2048, 2048, 8), (LLAMA3_70B, "decode", 64, 1, 4096, 8)):
    big = ", ".join(f"{k} {v / 2**20:.0f} MB" + ("" if v <= RNGD.sram_bytes / 2 else " (spills)") for k, v in
                    biggest(c, phase, B, s_in, s, cards))
    print(f"{c.name} {phase} B={B} s={s} on {cards} card(s), fp8 weights / bf16 activations:\n    {big}")

# %% [markdown]
# The 70B model's FFN weights do not fit in DM on one card, and no model's whole set of weights
# does, so weights stream from HBM every step. The chapter's un-tiled attention scores for 2048
# tokens spill to HBM on one card (256 MB for 8B, 512 MB for 70B per layer) and fit once 8 cards
# split the heads. Furiosa's own decoder example never builds them whole: it walks the keys in
# online-softmax chunks.
#
# ## 11. Where the time goes, per engine
#
# Each op's time is charged to the engine that binds it: the Contraction Engine when compute-bound,
# the Tensor DMA when HBM-bound, the Vector Engine when its DM traffic binds, the link for
# all-reduces. Estimated shares for a prefill of 2048 tokens and a decode step at 2048 tokens:

# %%
from llamanb.tcp.cost import engine_share

cases = [("SmolLM2 prefill", SMOLLM2_135M, "prefill", 1, 1), ("SmolLM2 decode B=1", SMOLLM2_135M, "decode", 1, 1),
         ("8B prefill", LLAMA31_8B, "prefill", 1, 1), ("8B decode B=1", LLAMA31_8B, "decode", 1, 1),
         ("8B decode B=64", LLAMA31_8B, "decode", 64, 1), ("70B x8 prefill", LLAMA3_70B, "prefill", 1, 8),
         ("70B x8 decode B=64", LLAMA3_70B, "decode", 64, 8)]
engines = ["Contraction Engine", "Tensor DMA (HBM)", "Vector Engine", "inter-card link"]
shares = []
for name, c, phase, B, cards in cases:
    cs = (op_costs(c, "prefill", B, 2048, weights="fp8", cards=cards) if phase == "prefill"
          else op_costs(c, "decode", B, 1, 2048, weights="fp8", cards=cards))
    sh = engine_share(cs)
    shares.append([sh.get(e, 0.0) for e in engines])
    print(f"{name:<20} {step_time(cs) * 1e3:9.2f} ms  " + "  ".join(f"{e.split()[0]} {sh.get(e, 0):4.0%}" for e in engines))

fig, ax = plt.subplots(figsize=(8, 3.2))
left = np.zeros(len(cases))
for j, e in enumerate(engines):
    vals = np.array([s[j] for s in shares])
    ax.barh([c[0] for c in cases], vals, left=left, label=e)
    left += vals
ax.invert_yaxis()
ax.set_xlabel("share of the step (estimated)")
ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
plt.show()

# %% [markdown]
# The Vector Engine bars are the chapter's op-by-op reading: each vector op reads its input from DM
# and writes its result back at the book's 2 TB/s. They are large for SmolLM2's prefill because its
# 9 heads x 2048 x 2048 scores are scaled, masked and normalised that way while its small matrices
# take the Contraction Engine little time. On the chip the Vector Engine sits right after the
# Contraction Engine in the same Tensor Unit pipeline, so such work can ride the einsum's output
# stream instead (section 12 does that). For the 70B split Megatron-style over 8 cards, the PCIe
# link (the book's PCIe DMA rate, 30 GB/s) takes three quarters of the prompt's time: section 12
# shows that Furiosa does not split it that way.
#
# The chapter's comparison table calls decode "Memory-bound (KV cache access)". Memory-bound, yes;
# but at batch 1 it is the weights, not the KV cache, that fill the HBM stream: for Llama 3.1 8B at
# 2048 tokens the cache is 0.27 GB against 7.5 GB of weights. The cache takes over only when
# `B x s` grows:

# %%
for B, s in ((1, 2048), (16, 2048), (64, 4096)):
    cs = op_costs(c8, "decode", B, 1, s, weights="fp8")
    kv = sum(c.hbm_bytes for c in cs if c.name in ("attn_scores", "attn_values"))
    w = sum(c.hbm_bytes for c in cs if c.name.endswith("proj") or c.name == "lm_head")
    print(f"B={B:<3} s={s}: KV cache {kv / 1e9:5.2f} GB, weights {w / 1e9:4.2f} GB -> KV share {kv / (kv + w):4.0%}")

# %% [markdown]
# ## 12. Predictions against Furiosa's published throughput
#
# Furiosa publishes two RNGD throughput figures, both with FuriosaSDK and FP8 and neither with its
# batch (Furiosa's RNGD product page; we read it through b-lab.team's summary of April 2025, which
# quotes the table with its H100 and L40S columns): Llama 3.1 70B on 8 cards at 2048 input / 128
# output tokens, 957.05 tok/s; Llama 3.1 8B on one card at 128 / 4096, 3,935.25 tok/s. Llama 3.1
# 70B has Llama 3 70B's shapes (only its RoPE scaling and context differ), so `LLAMA3_70B` stands
# in for it. tok/s counts output tokens. With two figures, one calibrates and the other is held
# back: the model is fitted on the 70B figure and then predicts the 8B one.

# %%
from llamanb.tcp.cost import PUBLISHED

for p in PUBLISHED:
    print(f"{p['role']:<12} {p['model']:<14} {p['cards']} card(s)  {p['n_in']:>4} in / {p['n_out']:>4} out  "
          f"{p['tok_s']:>9,.2f} tok/s   {p['source']}")

# %% [markdown]
# ### 12.1 The chapter's reading
#
# First the program exactly as the chapter writes it, every op on its own at the full roofline,
# the 70B split Megatron-style over the 8 cards (two all-reduces per layer over PCIe), and the
# largest batch whose cache fits when every sequence is at its final length:

# %%
from llamanb.tcp.cost import CHAPTER, Assumptions, assumed_batch, estimate

megatron = Assumptions(parallel="tensor", batch="full")
for p in PUBLISHED:
    w = estimate(p, CHAPTER, a=megatron)
    print(f"{p['model']:<14} batch {w.B:>3}: estimated {w.tok_s:7,.0f} tok/s vs published {p['tok_s']:7,.0f}"
          f" -> {w.tok_s / p['tok_s'] - 1:+.0%}")

# %% [markdown]
# The 8B estimate is close, the 70B one is less than a third of Furiosa's number: each 2048-token
# prompt spends most of its time in 160 all-reduces over PCIe. Nothing is wrong with the
# arithmetic; the layout is not Furiosa's.
#
# ### 12.2 How Furiosa runs it
#
# Four things the chapter does not write, each from a Furiosa source:
#
# * **Parallel layout.** Furiosa-LLM's *Model Parallelism* page (developer.furiosa.ai, 2024.2
#   release): a card has 8 PEs, "TP size x PP size x DP size = total number of NPU PEs", the tensor
#   parallel size is 4 or 8 and the pipeline size at most the number of cards. Eight cards are then
#   tensor parallel over each card's 8 PEs and **pipeline parallel across cards**: each card holds
#   10 of the 80 layers, and only one `[B, s_in, D]` hand-off per stage crosses PCIe. The PEs'
#   all-reduce stays on the chip (charged here to DM bandwidth).
# * **Attention on chip.** The book's current decoder example computes attention in
#   online-softmax chunks (`attention_forward_first`, then `attention_forward`): the scores are never
#   written to HBM.
# * **Fusion.** The Vector Engine follows the Contraction Engine in one Tensor Unit pipeline, so
#   norms, scaling, softmax, SwiGLU and residuals are charged nothing beyond the einsum they follow.
# * **Start-up.** The book's DMA chapter: each DMA command pays about 500 cycles before data moves;
#   every op pays that once.
#
# Pipeline over P cards: P micro-batches of `B / P` sequences are in flight, so one decode round
# (every sequence one token further) takes P stage times, and the busiest stage (10 layers plus the
# LM head) sets the pace. At the full roofline (eta = 1):

# %%
from llamanb.tcp.cost import ASSUME, FURIOSA_UNCALIBRATED

print("assumptions:", ASSUME)
for p in PUBLISHED:
    w = estimate(p, FURIOSA_UNCALIBRATED)
    print(f"{p['model']:<14} batch {w.B:>3} ({w.stages} stage(s), micro-batch {w.micro_batch:>3}): "
          f"{w.tok_s:7,.0f} tok/s at eta = 1 -> {w.tok_s / p['tok_s'] - 1:+.0%}")

# %% [markdown]
# Both estimates now sit above the published figures, as a roofline should: it is the speed of
# this traffic with every engine at its peak. The batch follows the assumption `batch="paged"`:
# Furiosa-LLM keeps the KV cache in paged blocks (its build options name
# `paged_attention_num_blocks`), so with requests at staggered positions a sequence holds on average
# `n_in + n_out / 2` positions; the batch is the largest whose cache of that size fits beside the
# weights. The KV cache is assumed bf16 (the published "FP8" names the weights).
#
# ### 12.3 Calibration on one figure, validation on the other
#
# One number is fitted: `eta`, the fraction of each roofline (Contraction Engine, HBM, DM) the
# compiled program reaches. The 70B run calibrates it: 16 prompt tokens per output token make its
# time mostly compute-bound prefill, which depends little on the batch and KV-cache assumptions. The
# 8B run, almost all decode and bound by the HBM stream of weights and KV cache, is held back and
# predicted with the same `eta`: it tests whether an efficiency measured on the Contraction Engine
# carries over to the HBM stream.

# %%
from llamanb.tcp.cost import furiosa, prediction_table

table = prediction_table()
print(f"eta (calibrated on the 70B figure) = {furiosa().eta:.3f}\n")
for role in ("calibration", "validation"):
    print(role.upper())
    print(f"  {'model':<14} {'cards':>5} {'in/out':>10} {'batch':>5} {'published':>10} {'estimate':>9} {'error':>7}"
          f" {'TTFT':>8} {'decode round':>13}")
    for r in table:
        if r["role"] == role:
            print(f"  {r['model']:<14} {r['cards']:>5} {r['n_in']:>5}/{r['n_out']:<4} {r['B']:>5} "
                  f"{r['published']:>10,.0f} {r['estimate']:>9,.0f} {r['error']:>+7.1%} "
                  f"{r['ttft_s'] * 1e3:>6.0f}ms {r['round_s'] * 1e3:>11.1f}ms")
worst = max(abs(r["error"]) for r in table if r["role"] == "validation")
print(f"\nlargest validation error: {worst:.0%} (target: 25 %)")

# %% [markdown]
# The prediction for the held-back 8B figure lands inside the ±25 % target, below the published
# value. The test `tests/test_tcp_cost.py` recomputes this table, checks the split (changing the
# validation figure tenfold leaves `eta` and every estimate unchanged) and the target.
#
# ### 12.4 What was not published moves the prediction
#
# Furiosa states neither the batch nor the KV-cache format. The same procedure (calibrate on the
# 70B figure, predict the 8B one) under each choice of the two:

# %%
import dataclasses

from llamanb.tcp.cost import calibrate

p70, p8 = (next(p for p in PUBLISHED if p["role"] == r) for r in ("calibration", "validation"))
print(f"{'KV cache':<9} {'batch rule':<11} {'70B batch':>9} {'eta':>6} {'8B batch':>8} {'8B estimate':>12} {'error':>7}")
for kv in ("bf16", "fp8"):
    for rule in ("full", "paged"):
        a = Assumptions(kv=kv, batch=rule)
        m = dataclasses.replace(FURIOSA_UNCALIBRATED, eta=calibrate(a=a))
        w = estimate(p8, m, a=a)
        print(f"{kv:<9} {rule:<11} {assumed_batch(p70, a):>9} {m.eta:>6.3f} {w.B:>8} {w.tok_s:>12,.0f} "
              f"{w.tok_s / p8['tok_s'] - 1:>+7.0%}")

# %% [markdown]
# Across these four readings the held-back error runs from about -30 % to +30 %: the assumptions
# matter as much as the model. The KV format moves the 8B estimate most, because at these batches
# its decode step reads more KV cache than weights. (The FP8 curve flattens past B of about 170:
# there the projections cross the FP8 ridge, 341 FLOP/B, and turn compute-bound.) The curve shows how the 8B prediction (with the
# calibrated `eta`) moves with the batch, for both formats, and the band of ±25 % around
# Furiosa's figure:

# %%
eta_m = furiosa()
fig, ax = plt.subplots(figsize=(7, 3.8))
for kv, ls in (("bf16", "-"), ("fp8", "--")):
    a = Assumptions(kv=kv)
    Bmax = assumed_batch(p8, a)
    Bs = np.unique(np.geomspace(1, Bmax, 14).astype(int))
    ax.plot(Bs, [estimate(p8, eta_m, int(B), a).tok_s for B in Bs], ls, color="C0",
            label=f"estimate, {kv} KV cache (memory allows {Bmax})")
B8 = assumed_batch(p8)
ax.scatter([B8], [estimate(p8, eta_m).tok_s], color="C3", zorder=3, label=f"prediction (B = {B8})")
ax.axhline(p8["tok_s"], color="k", lw=1, label="published")
ax.axhspan(0.75 * p8["tok_s"], 1.25 * p8["tok_s"], color="0.9", zorder=0, label="±25 %")
ax.set_xscale("log")
ax.set_xlabel("batch B")
ax.set_ylabel("output tok/s (estimated)")
ax.set_title(f"Llama 3.1 8B, 1 RNGD, 128 in / 4096 out, eta = {eta_m.eta:.2f} from the 70B figure", fontsize=9)
ax.legend(fontsize=7)
plt.show()

# %% [markdown]
# ### 12.5 What the model lacks for the 8B run
#
# Two numbers say how much is missing and where. Fitted to the 8B figure *alone* (a diagnosis, not
# used anywhere), `eta` would have to be higher than the 70B run's; and at the assumed batch, the
# share of a decode round spent reading the KV cache says how much an FP8 cache alone could give:

# %%
eta_8b = calibrate(p8)
ops8 = op_costs(p8["cfg"], "decode", B8, 1, p8["n_in"] + p8["n_out"] // 2, weights="fp8", mapping=eta_m)
kv_time = sum(c.time_s for c in ops8 if c.name in ("attn_scores", "attn_values"))
print(f"eta from the 70B figure {eta_m.eta:.2f}; the 8B figure alone would need {eta_8b:.2f} "
      f"({eta_8b / eta_m.eta - 1:+.0%})")
print(f"8B decode step at the mean context: {step_time(ops8) * 1e3:.1f} ms, of which reading the KV cache "
      f"{kv_time * 1e3:.1f} ms ({kv_time / step_time(ops8):.0%})")

# %% [markdown]
# The 8B run needs about a quarter more HBM throughput per token than the efficiency measured on
# the 70B prefill gives. The model lacks the mechanism that would supply it, and two candidates fit
# the size: the decode stream reaching a higher fraction of HBM bandwidth than prefill reaches of
# the Contraction Engine (one `eta` for every engine is our simplification), or a KV cache in FP8
# (most of the round is cache reads, so halving them is more than enough). A third figure, a
# decode-bound run with a stated batch and KV format, would tell them apart.
#
# **What the model still cannot see.** It does not see how Furiosa's compiler tiles each op (its
# efficiency is one fitted number), overlap *between* ops, how the serving stack interleaves
# prefills with decode steps, the host's share (tokenization, sampling, PCIe transfers of logits),
# power or thermal limits (150 W per card), or the batch, KV format and scheduler settings Furiosa
# used.
#
# ## Summary
#
# * The chapter's Llama is a short list of steps; as data, with named axes, every einsum's
#   subscripts and FLOPs follow from the names, and its FLOP totals equal `llamanb.flops` for the
#   three models.
# * Run with numpy on the embedded model, the list reproduces the numpy engine's greedy tokens
#   (batch 2, prefill + decode) with logits equal to float32 rounding, and the backend `"tcp"` does
#   the same through the engine's seam.
# * The chapter's errors, each fixed in the data and quoted: V's layout (and a "noop" reshape that is
#   a transpose), the decode cache index and RoPE position, the `[G, h_kv]` grouping (a measured
#   change of the next token), consecutive RoPE pairs on HF weights (likewise), the RoPE table's
#   orientation, tied heads, where sampling runs.
# * Read as written (op by op, Megatron over 8 cards) the program misses Furiosa's 70B figure by
#   about 70 %. Run the way Furiosa documents (pipeline across cards, attention on chip, fused vector
#   work), with one efficiency calibrated on that figure, it predicts the held-back 8B figure within
#   the ±25 % target; the unpublished batch and KV format move that prediction by ±30 %.

# %% [markdown]
# ## Exercises
#
# Three functions to write about one TCP einsum; each is checked against every einsum of the
# prefill, decode and extend programs. Replace `raise NotImplementedError` with your code and run
# the cell, then run the check below it; it prints one line (`passed`, the first case that differs
# with a hint, or `not attempted yet`). Solutions: `solutions/08_tcp_mapping.py`.

# %%
from llamanb.exercises import ch08
from llamanb.tcp.ops import AXES          # axis name -> einsum letter

# %% [markdown]
# ### 08.1 Subscripts from named axes
#
# Write `subscripts(arg_axes, out_axes)`: e.g. `[["B", "s_in", "D"], ["D", "h_q", "d_k"]]`,
# `["B", "s_in", "h_q", "d_k"]` -> `"bim,mqe->biqe"`, using `AXES`. Checked against `Op.subscripts`.

# %%
def subscripts(arg_axes: list[list[str]], out_axes: list[str]) -> str:
    raise NotImplementedError  # your code here


# %%
ch08.subscripts(subscripts)

# %% [markdown]
# ### 08.2 Its FLOPs
#
# Write `einsum_flops(arg_axes, out_axes, dims)`: the FLOPs of that einsum with the axis sizes
# `dims` (from `llamanb.tcp.program.dims`). Checked against `Op.flops` for three models and shapes.
# *Hint:* section 2: the broadcast product has which axes?

# %%
def einsum_flops(arg_axes: list[list[str]], out_axes: list[str], dims: dict[str, int]) -> int:
    raise NotImplementedError  # your code here


# %%
ch08.einsum_flops(einsum_flops)

# %% [markdown]
# ### 08.3 RoPE on the Contraction Engine
#
# Write `rope_q(Q2, t_rope)`: `Q2 [B, s_in, h_q, d_k', f]` (the query as pairs), `t_rope [s_in,
# d_k', f, r]` (notebook 02's table) -> `Q_rope2 [B, h_q, s_in, d_k', r]`, one `np.einsum`. Checked
# against the program's `rope_q` op. *Hint:* which pair axis is contracted, and where does `h_q` go?

# %%
def rope_q(Q2: np.ndarray, t_rope: np.ndarray) -> np.ndarray:
    raise NotImplementedError  # your code here


# %%
ch08.rope_q(rope_q)
