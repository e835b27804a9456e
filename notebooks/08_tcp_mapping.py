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
#     builds: Llama as an einsum program on Furiosa's TCP, compiled by furiosa-tcc
#     modules:
#     - llamanb.tcp
#     part: II
# ---

# %% [markdown]
# # 08 · Llama as an einsum program on Furiosa's TCP
#
# **What you will build.** Llama as an *einsum program*: every step of a block written as one
# contraction over named axes, the form a Tensor Contraction Processor runs natively -- and then
# run, checked against the engine, and compiled by the chip vendor's own compiler. Why: it is the
# plainest way to see that a transformer block is nothing but contractions plus a little
# elementwise work, and what a chip built around that idea must move.
#
# Furiosa's RNGD card is such a *Tensor Contraction Processor* (TCP). Its
# Tensor DMA engine moves tensors between HBM and the on-chip data memory (DM); inside each of the
# chip's 512 DM slices a *Tensor Unit* pipeline then streams a tensor from DM through Fetch, Switch
# and Collect into the Contraction Engine (broadcast, multiply, reduce over named axes: einsums),
# then the Vector Engine (elementwise work and reductions), Cast and Transpose, and Commit writes
# the result back to DM. The "Transformer Architecture" chapter of Furiosa's TCP programming book
# (repository furiosa-ai/furiosa-opt, `docs/src/kernel-examples/transformer.md`, versions of April
# and May 2026) writes Llama 3 70B as a chain of such steps and names the engine of each. As prose
# it cannot be run; here it becomes a program:
#
# 1. the chapter's op list as **data** (`llamanb.tcp.program`), each op with its einsum over named
#    axes, its engine and a note where the chapter is wrong, run by an **interpreter**
#    (`llamanb.tcp.interpret`, numpy) that reproduces the engine's tokens;
# 2. the same ops as **TCL kernels** compiled by Furiosa's own compiler, `furiosa-tcc`: one live,
#    the whole block for three models from a stored table of its cycle estimates;
# 3. from those cycles, a **prediction** of Furiosa's two published throughput figures.
#
# No TCP is used: the program runs on the CPU ("emulated"), and every RNGD time below is the
# compiler's **estimate**, never a measurement.
#
# > **Going deeper: which version of the book.** In August 2026 (commit d4d05a7) Furiosa replaced
# the Llama page with "Case Study: Transformer" (Qwen3-0.6B, one decode token, online-softmax
# attention, no prefill). The op list follows the earlier Llama walk (commits a837582, f8938cb).

# %% [markdown]
# ## 0. Setup

# %%
import warnings

warnings.filterwarnings("ignore")

import math
import textwrap

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, load_model
from llamanb.engine.generate import generate
from llamanb.model.config import LLAMA3_70B, LLAMA31_8B, SMOLLM2_135M
from llamanb.platform.progress import stages

with stages() as say:                           # a line while it runs, gone after
    say("loading the model and the numpy engine")
    model = load_model()
    engine = Engine(model)                      # the numpy reference engine
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
from llamanb.model.ops import rms_norm
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
# The prefill program, layer ops once (they repeat `L` times). An engine marked `*` is inferred,
# not named by the chapter. `view` ops are the chapter's "Reshape (noop)"; the program checks each
# one really is a reshape (no transpose hidden in it).

# %%
def listing(prog, width=120):                  # 120: Lab's output column
    for op, times in prog.ops():
        eng = op.engine + ("" if op.stated else " *")
        head = f"{op.section:<8} {op.name:<13} x{times:<3} {eng:<20} "
        line = head + op.formula()
        if len(line) > width:                     # a long formula continues under its "="
            lhs, rhs = op.formula().split(" = ", 1)
            line = f"{head}{lhs} =\n{' ' * (len(head) + 2)}{rhs}"
        print(line)


listing(prefill)

# %% [markdown]
# Decode differs in three places: `s_in = 1`, the score and weighted-sum einsums read the whole
# cache from HBM (`kv_cache_K`, `kv_cache_V`) instead of the prompt's own K and V, and there is no
# causal mask (one new row sees every cached row).

# %%
decode = program(cfg, "decode")
for op in decode.layer:
    if op.name in ("attn_scores", "attn_values", "store_k"):
        print(f"{op.name:<12} {op.formula()}\n{'':<12} moves: {op.moves}")
assert not any(op.name == "causal_mask" for op in decode.layer)     # no mask in decode
assert any(op.name == "causal_mask" for op in prefill.layer)

# %% [markdown]
# How one einsum runs on the chip, in the book's terms (`docs/src/computing-tensors/`): one operand
# sits in a slice's Tensor Register File, the other streams from DM through Fetch, Switch and
# Collect; the Contraction Engine broadcasts, multiplies (widening to f32) and reduces. An axis
# spread over slices is summed by the Vector Engine's inter-slice reducer; over chips, by DMA
# plus a Vector Engine add. The Vector Engine computes in i32/f32 only.

# %% [markdown]
# ## 4. The program runs the model
#
# Two prompts of equal length as one batch (`B = 2`; the chapter's `B` axis shares one `s_in`),
# prefill and four greedy decode steps, sampling on the "host" (an argmax). Each sequence is then run
# alone through the numpy engine: the same tokens, and the logits agree to float32 rounding.

# %%
from llamanb.tcp.interpret import Interpreter

tok = model.tokenizer
a, b = tok.encode_prompt("Name a color."), tok.encode_prompt("Name a fruit.")
print("prompt lengths:", len(a), len(b))
with stages() as say:                                      # a line per step while it runs, gone after
    say("the program's interpreter, then its prefill of both prompts")
    run = Interpreter(lay)                                 # the program, run by numpy
    tcp_cache = run.new_cache(2, len(a) + 5)
    steps = [run.step([a, b], tcp_cache)]                  # (logits [2, V], the program's argmax [2])
    for i in range(4):                                     # four greedy decode steps
        say(f"the program's decode step {i + 1} of 4")
        steps.append(run.step(steps[-1][1][:, None], tcp_cache))
tokens, logits = np.stack([t for _, t in steps], axis=1), [lg for lg, _ in steps]   # [2, 5], 5 x [2, V]
worst = 0.0
for row, p in enumerate((a, b)):
    with stages() as say:
        say(f"the engine's 5 greedy tokens and their logits for sequence {row}")
        res = generate(engine, p, max_new_tokens=5)
        say(f"the engine's logits, step by step, for sequence {row}")   # generate's own line is gone
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
prompt = tok.encode_prompt("What is the capital of France?")
with stages() as say:                                      # a line per run while it runs, gone after
    say("the tcp engine: its weights laid out, then 8 greedy tokens; then the numpy engine's 8")
    tcp_engine = Engine(model, backend="tcp")
    out, ref8 = generate(tcp_engine, prompt, max_new_tokens=8), generate(engine, prompt, max_new_tokens=8)
print(tcp_engine.backend.description)
print(repr(out.text))
assert out.ids == ref8.ids

# %% [markdown]
# ## 5. Going deeper: where the book's chapter is wrong
#
# The program above already holds the fixes. Each correction lives in the op it concerns
# (`op.note`), quoting the chapter. All of them:

# %%
import textwrap

from llamanb.tcp.program import CORRECTIONS

for k, v in CORRECTIONS.items():
    print(f"- {k}:\n" + textwrap.fill(v, 100, initial_indent="    ", subsequent_indent="    "))

# %% [markdown]
# Three of them change the numbers, so we measure them. First the RoPE pairing: the chapter rotates
# *consecutive* pairs `(x_2i, x_2i+1)`; HF checkpoints pair `x_i` with `x_{i + d_k/2}`, so `layout`
# permutes each head's `d_k` columns of `w_q` and `w_k` once. Without it the program runs, every
# shape right, and computes another model (here the first token happens to agree; logits do not):

# %%
def variant(**changes):
    """The same program on weights with some layer arrays replaced."""
    bad = layout(model.weights)
    for i, lw in enumerate(bad.layers):
        lw.update({k: f(i) for k, f in changes.items()})
    r = Interpreter(bad)
    return r.prefill([prompt], r.new_cache(1, len(prompt)))[0]


with stages() as say:                                      # a line while it runs, gone after
    say("the prompt's prefill by the program and by the engine; then the program on HF-ordered weights")
    right = run.prefill([prompt], run.new_cache(1, len(prompt)))[0]
    ref = engine.prefill(prompt, engine.new_cache(len(prompt)))
    hf_order = variant(w_q=lambda i: model.weights.split_qkv(i)[0].T.reshape(cfg.hidden, cfg.n_heads, cfg.head_dim),
                       w_k=lambda i: model.weights.split_qkv(i)[1].T.reshape(cfg.hidden, cfg.n_kv_heads, cfg.head_dim))
for name, lg in (("pairs permuted (program)", right), ("HF order, consecutive pairs", hf_order)):
    print(f"{name:<28} max |logits - engine| = {np.abs(lg - ref).max():7.4f}   next token {tok.decode([int(lg.argmax())])!r}")
print(f"{'numpy engine':<28} {'':>34} next token {tok.decode([int(ref.argmax())])!r}")

# %% [markdown]
# Second, the group axis. The chapter reads `h_q` as `[G, h_kv]`: query head `h` would share K/V
# head `h mod h_kv`. Llama's heads (and HF's `repeat_kv`) are `[h_kv, G]`: head `h` reads K/V head
# `h // G`. The program refuses the chapter's reading as a view (it needs a transpose); to measure
# what it would compute we relabel the query heads (and the rows of `w_o`) the chapter's way:

# %%
from llamanb.errors import LlamanbError
from llamanb.tcp.ops import check_view

try:
    check_view(("B", "h_q", "s_in", "d_k"), ("B", "G", "h_kv", "s_in", "d_k"), "chapter's GQA view")
except LlamanbError as e:
    print("refused:", e)
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
new = int(ref.argmax())                                     # the token the prompt predicts
ecache = engine.new_cache(len(prompt) + 1)
with stages() as say:                                       # a line while it runs, gone after
    say("the prompt's prefill by the program and by the engine, then the engine's decode")
    run.prefill([prompt], cache0)
    engine.prefill(prompt, ecache)
    ref_dec = engine.decode(new, ecache)


def decode_at(position):
    cache = copy.deepcopy(cache0)
    d = dims(cfg, 1, 1, len(prompt) + 1)
    d["s_max"] = cache.s_max
    h = run.layers(run.programs["decode"], lay.w_emb[[[new]]], np.array([position]), d, cache)
    return run.head(h, d)[0][0]


s_now = len(prompt) + 1                                    # s counts the new row
with stages() as say:                                       # a line per decode while it runs, gone after
    for name, pos in (("position s - 1 (program)", s_now - 1), ("position s (chapter)", s_now)):
        say(f"the program's decode at {name}")
        print(f"{name:<26} max |logits - engine| = {np.abs(decode_at(pos) - ref_dec).max():.4f}")

# %% [markdown]
# ## 6. FLOPs, derived from the axes
#
# Summed per op name over a step, the einsums' FLOPs must equal `llamanb.model.flops`' closed forms
# (notebook 01b), with the *full* score rectangle in prefill (the chapter computes all `s_in x s_in`
# scores, then masks); RoPE's 2x2 einsums are extra. Prefill of 512 tokens, decode at 2048, B = 4:

# %%
from llamanb.model.flops import OPS, decode_flops, prefill_flops, total

print(f"{'model':<22} {'prefill GFLOP':>14} {'llamanb.model.flops':>14} {'RoPE':>8} {'decode GFLOP':>13} {'llamanb.model.flops':>14}")
for c in (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B):
    pf = program(c, "prefill").flops(dims(c, 4, 512))
    df = program(c, "decode").flops(dims(c, 4, 1, 2049))
    ref_p, ref_d = prefill_flops(c, 512, attention="full", batch=4), decode_flops(c, 2048, batch=4)
    assert {k: pf[k] for k in OPS} == ref_p and {k: df[k] for k in OPS} == ref_d
    rope = pf["rope_q"] + pf["rope_k"]
    print(f"{c.name:<22} {sum(pf[k] for k in OPS) / 1e9:>14,.1f} {total(ref_p) / 1e9:>14,.1f} "
          f"{rope / 1e9:>8,.2f} {sum(df[k] for k in OPS) / 1e9:>13,.2f} {total(ref_d) / 1e9:>14,.2f}")

# %% [markdown]
# ## 7. What the interpreter is, and what the compiler adds
#
# Everything so far is the course's **executable model of the mapping**: the op list as data, run
# by `numpy.einsum`. It proves the mapping computes Llama and counts its FLOPs; it says nothing
# about time. Furiosa's compiler does: `furiosa-tcc` (PyPI, one native binary) reads **TCL**, the
# Tensor Contraction Language, and `--evaluate-tcl` prints the cycles its scheduler estimates for
# a kernel on a target, `renegade` (one of RNGD's 8 PEs) to `renegade-8pe` (the chip) and
# multi-chip targets; `--output x.edf` goes on to an RNGD binary. `llamanb.tcp.tcl_kernels` writes
# each op as a kernel with the `furiosa.tcl` eDSL from `furiosa-kernels` (PyPI), using Furiosa's
# own ops where the package has them. No RNGD is used: every cycle count is the compiler's
# **estimate**, at the 1.0 GHz of RNGD's specification table.
#
# > **Going deeper: the toolchain's details.** `--output x.edf` calls `aarch64-linux-gnu-gcc`
# last. Furiosa's ops used: `einsum_dpe`, `rms_norm_bf16_naive`, `softmax`, `silu`,
# `binary_mul`/`binary_add`, and `einsum_rope_naive` (the 2 x 2 rotation einsum of the RoPE
# correction, section 5). The clock: furiosa-tcc 2026.4.0 embeds its target descriptions
# (`renegade.yaml` ... `renegade-8pe-8chip.yaml`), each with `profiling_frequency_in_mhz: 1000`.

# %% [markdown]
# ## 8. One kernel through the compiler, live
#
# SmolLM2's Q projection for one decode token, `[T, D] x [D, H, E] -> [T, H, E]`, as TCL. The
# eDSL writes the kernel with its axis sizes bound; `tk.EinsumByDpe` is one Tensor Unit pass:
# read both operands, `dpe.exec` contracts `D` on the Contraction Engine, write the result.

# %%
from llamanb.tcp import compiler, table

print("missing here:", compiler.missing(edf=True) or "nothing")
print("clock:", "\n  ".join(textwrap.wrap(compiler.CLOCK_SOURCE, 110)))
q = next(k for k in compiler.kernels(SMOLLM2_135M, "decode", 1, 2048) if k.op == "q_proj")
print("kernel:", q.function, "| axis sizes:", dict(q.bindings))
print("body from", q.source, "\n")
print(q.tcl())

# %% [markdown]
# `--evaluate-tcl` on one PE and on the whole chip, and the schedule behind the first number
# (`--tcl-plot`): the compiler counts the kernel's own moves between HBM and DM (Tensor DMA
# loads of `x` and `w_q`, a store of `Q`), not only the contraction. The cells compare each
# number with the stored table of section 9, so a change of compiler shows up here too.

# %%
# NBVAL_IGNORE_OUTPUT
stored = {r["target"]: r["cycles"] for t in table.BOTH for r in table.rows(SMOLLM2_135M, "decode", 1, 2048, target=t)
          if r["op"] == "q_proj"}
print(compiler.version())
cycles, steps = compiler.schedule(q.tcl(), "renegade")
for st in steps:
    print(f"  {st['context']:<12} {st['name']:<28} cycles {st['begin']:>6} .. {st['end']:>6}")
c8 = compiler.evaluate(q.tcl(), "renegade-8pe")
print(f"1 PE: {cycles} cycles = {cycles / 1e3:.1f} us | 8 PE: {c8} cycles = {c8 / 1e3:.1f} us (estimates at 1 GHz)")
assert (cycles, c8) == (stored["renegade"], stored["renegade-8pe"])

# %% [markdown]
# The weight load dominates (576 x 576 bf16 = 0.66 MB on one PE's share of HBM); with 8 PEs, DMA
# start-up (the book: ~500 cycles per command) weighs. Then on to an RNGD binary, for the RMSNorm
# kernel (the Q projection's EDF stage ran past ten minutes here): its stages and size, or what is missing.

# %%
# NBVAL_IGNORE_OUTPUT
import tempfile
from pathlib import Path

need = compiler.missing(edf=True)
if need:
    print("no EDF here, missing:", "; ".join(need))
else:
    with tempfile.TemporaryDirectory() as d:
        norm = next(k for k in compiler.kernels(SMOLLM2_135M, "decode", 1, 2048) if k.op == "attn_norm")
        e = compiler.compile_edf(norm.tcl(), "renegade", Path(d) / "attn_norm.edf")
    print(f"EDF: {e.size:,} bytes after {len(e.stages)} stages in {e.seconds:.1f} s")
    for name, sec in e.stages:
        print(f"  {name:<28} {sec:6.3f} s")

# %% [markdown]
# ## 9. The whole block, compiled: the stored per-op table
#
# Compiling every op for three models takes minutes, so it was done once and stored with the
# compiler's version and the regenerating command; `tests/tcp/test_tcp_compiler.py` recompiles a
# sample and fails if the numbers changed. Each op is one kernel, compiled alone; a shape the
# compiler cannot compile is stored as `refused`, not as a made-up number. bf16 weights.

# %%
doc = table.load()
print(doc["compiler"], "|", doc["command"])
print("\n".join(textwrap.wrap(doc["note"], 120)))


def per_op(c, phase, B, s, weights="bf16"):
    one, eight = (table.rows(c, phase, B, s, weights, t, doc) for t in table.BOTH)
    return [(a["op"], a["times"], a["cycles"], b["cycles"]) for a, b in zip(one, eight)]


for c in (SMOLLM2_135M, LLAMA31_8B):
    print(f"\n{c.name}, decode B=1 s=2048: cycles per run (1 PE | 8 PE), runs per step")
    for op, n, *cyc in per_op(c, "decode", 1, 2048):
        print(f"  {op:<14} x{n:<3} " + " | ".join(f"{'refused' if v is None else v:>9}" for v in cyc))
print("\nper step (cycles x runs, ops one after another)")
print(f"{'model':<22} {'phase':<8} {'s':>5} {'1 PE ms':>9} {'8 PE ms':>9} {'8PE speed-up':>12}  largest op (8 PE)")
for c in (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B):
    for phase in ("prefill", "decode"):
        s = 128 if (c is SMOLLM2_135M and phase == "prefill") else 2048
        rows = per_op(c, phase, 1, s)
        one = sum(n * (x or 0) for _, n, x, _ in rows)
        eight = sum(n * (y or 0) for _, n, _, y in rows)
        top = max(rows, key=lambda r: r[1] * (r[3] or 0))[0]
        gap = "" if all(None not in r for r in rows) else " (refused ops left out)"
        print(f"{c.name:<22} {phase:<8} {s:>5} {one / 1e6:>9.2f} {eight / 1e6:>9.2f} {one / eight:>11.1f}x  {top}{gap}")

# %% [markdown]
# **Pick a model, phase and target** (live notebook): a step's cycles, op by op (static: below).

# %%
import io

from IPython.display import Image, display
from ipywidgets import Dropdown, Output, VBox

from llamanb.course.widgets import kernel_notice


def bars(ax, c, phase, target):
    s = 128 if (c is SMOLLM2_135M and phase == "prefill") else 2048
    rs = [r for r in table.rows(c, phase, 1, s, "bf16", target, doc) if r["cycles"] is not None]
    us = [r["cycles"] * r["times"] / 1e3 for r in rs]
    ax.barh([r["op"] for r in rs], us, color="C0")
    ax.invert_yaxis()
    ax.set_xlabel("microseconds per step (compiler estimate, 1 GHz)")
    ax.set_title(f"{c.name} {phase} s={s} on {target}: {sum(us) / 1e3:.2f} ms", fontsize=9)
    ax.tick_params(labelsize=7)


ws = [Dropdown(options=list(table.MODELS), value=LLAMA31_8B.name, description="model"),
      Dropdown(options=["decode", "prefill"], value="decode", description="phase"),
      Dropdown(options=list(table.BOTH), value="renegade-8pe", description="target")]
view = Output()


def redraw(_=None):
    fig, ax = plt.subplots(figsize=(6, 4))
    bars(ax, table.MODELS[ws[0].value], ws[1].value, ws[2].value)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plt.rcParams["figure.dpi"], bbox_inches="tight")
    plt.close(fig)
    view.outputs = ()
    view.append_display_data(Image(buf.getvalue()))


for w in ws:
    w.observe(redraw, names="value")
display(VBox([kernel_notice(), *ws, view]))   # the notice shows only once the kernel is gone
redraw()

# %%
fig, axes = plt.subplots(3, 1, figsize=(9, 10))
for ax, c in zip(axes, (SMOLLM2_135M, LLAMA31_8B, LLAMA3_70B)):
    bars(ax, c, "decode", "renegade-8pe")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 10. Furiosa's published throughput, predicted from compiler cycles
#
# Two throughput figures are attributed to Furiosa's RNGD product page (FuriosaSDK, FP8, batch not
# stated): Llama 3.1 70B on 8 cards and Llama 3.1 8B on one card (printed below). They are
# third-party figures: the only public copy we found is b-lab.team's summary of 20 April 2025, and
# no publication of these numbers by Furiosa itself (appendix A; docs/corrections.md).
# `llamanb.tcp.predict` builds each run from the stored cycles of fp8 kernels, adds the data movement they lack, fits nothing, and computes every plausible reading of
# what was not published (batch, where sampling runs, the keys attention sees, the 70B stage
# hand-off). The cell asserts what it finds: **neither published figure falls inside its
# predicted range; both lie above it**. The block compiled one unfused kernel at a time is slower
# than Furiosa's SDK run.

# %%
from llamanb.tcp import predict

for r in predict.ranges(doc):
    assert not r["inside"] and r["published"] > r["high"]          # above the whole range
    print(f"{r['model']} on {r['cards']} card(s): published {r['published']:,.0f} tok/s, predicted "
          f"{r['low']:,.0f} .. {r['high']:,.0f}")

# %% [markdown]
# The compiler against the specification sheet, every reading, why the chapter's earlier fitted
# efficiency was retracted, and what the prediction cannot see: appendix A §2
# (`notebooks/A_cost_models.py`); corrections to earlier versions of this chapter:
# `docs/corrections.md` ("Furiosa TCP").
#
# ## Summary
#
# * The chapter's Llama as data, with named axes: subscripts and FLOPs follow from the names, and
#   the FLOP totals equal `llamanb.model.flops`. Run with numpy it reproduces the engine's greedy tokens
#   (also as backend `"tcp"`): the course's executable model of the mapping, not a model of time.
# * Its errors, fixed in the data and quoted: V's layout and a "noop" reshape that is a transpose,
#   the decode cache index and RoPE position, the `[G, h_kv]` grouping and consecutive RoPE pairs
#   on HF weights (both measured), the RoPE table's orientation, tied heads, where sampling runs.
# * The same ops as TCL kernels (Furiosa's own where `furiosa-kernels` has them) through Furiosa's
#   compiler: one live down to an RNGD binary, the block for three models from a stored table of
#   the compiler's cycle estimates (1 PE and 8 PE, at its 1 GHz).
# * Compiler cycles plus the data movement outside the kernels, nothing fitted, give each
#   published figure a range over the unpublished settings; both figures lie above it (section 10).

# %% [markdown]
# ## Exercises
#
# Three functions to write about one TCP einsum; each is checked against every einsum of the
# prefill, decode and extend programs. Replace `raise NotImplementedError` with your code and run
# the cell, then run the check below it; it prints one line (`passed`, the first case that differs
# with a hint, or `not attempted yet`). Solutions: `solutions/08_tcp_mapping.py`.

# %%
from llamanb.course.exercises import ch08
from llamanb.tcp.ops import AXES  # axis name -> einsum letter

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
