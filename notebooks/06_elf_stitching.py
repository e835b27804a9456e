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
#     builds: many launches stitched into one ELF, bit for bit
#     modules:
#     - llamanb.npu.compiler.stitch
#     - llamanb.npu.compiler.groups
#     part: II
# ---

# %% [markdown]
# # 06 · Stitching: many kernels, one ELF, one dispatch
#
# **What you will build.** Notebook 05 built seven NPU kernels, each a module with one function.
# Run one by one, a decode step of Llama-3.2-1B would cost the host a dispatch per kernel per
# layer. The MLIR-AIR Llama guide (Xilinx/mlir-air, `programming_examples/llms/llama32_1b`)
# instead *stitches* several kernels into one function, compiled to one ELF and started by one
# `xrt.run()`: the launches run back to back on the NPU, and a buffer one launch writes is read by
# the next straight from DDR, with no host in between.
#
# You will count what stitching saves, write the text transformation on two kernels (rename,
# remap arguments, wrap bare herds), check it computes *bit for bit* what they compute one by one,
# then run one decode layer of the real model through two stitched groups on the **emulated** NPU2.

# %% [markdown]
# ## 0. Setup

# %%
import re
import time
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, Step, load_model
from llamanb.model.config import LLAMA32_1B
from llamanb.npu.compiler import verify as V
from llamanb.npu.compiler.builders import gemv, rmsnorm, rope_lut
from llamanb.npu.compiler.emulator import run
from llamanb.npu.compiler.plan import read_plan
from llamanb.model.numerics import to_bf16
from llamanb.model.ops import rms_norm

model = load_model()
engine = Engine(model)
cfg, w0 = model.config, model.weights.layers[0]
H, Nh, Nkv, d, F = cfg.hidden, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.ffn
print(f"embedded model: H = {H}, q_dim = {cfg.q_dim}, kv_dim = {cfg.kv_dim}, D_ff = {F}, "
      f"{cfg.n_layers} layers")

# %% [markdown]
# ## 1. What a dispatch costs
#
# The MLIR-AIR Llama guide puts the fixed cost of one `xrt.run()` (look up the kernel, hand it the
# buffers, synchronise host and device) at about **100 µs**, whatever the kernel does. That is a
# figure quoted from the guide, not measured here (there is no NPU in this course's machine). A
# decode step runs every kernel of every layer once; its per-token work on the NPU is small, so a
# fixed cost per call adds up. Count the calls from the groups we will build in §5: unstitched, one
# call per kernel (a *launch* in the stitched module); stitched, one call per group.

# %%
from llamanb.npu.compiler.groups import layer_groups

DISPATCH_US = 100          # the guide's figure per xrt.run(), an estimate


def dispatch_table(c, seq=128):
    gs = layer_groups(c, seq)
    rows = []
    for phase in ("prefill", "decode"):
        layer = [g for g in gs.values() if g.phase == phase
                 and g.name not in ("lm_head_gemv", "o_gemv_ffn3")]      # §8b: the 3-launch one
        head = gs["lm_head_gemv"]
        unstitched = c.n_layers * sum(g.launches for g in layer) + head.launches
        stitched = c.n_layers * len(layer) + 1
        rows.append((phase, unstitched, stitched))
    return gs, rows


tables = {}
print(f"calls per forward pass, one by one and stitched; their dispatch time at {DISPATCH_US} µs "
      f"each (an estimate)")
print(f"{'model':23s} {'layers':>6s}  {'phase':7s} {'one by one':>10s} {'stitched':>8s} "
      f"{'ms one by one':>13s} {'ms stitched':>11s}")
for label, c in (("Llama-3.2-1B", LLAMA32_1B), ("SmolLM2-135M (embedded)", cfg)):
    gs, rows = dispatch_table(c)
    tables[label] = (gs, rows)
    for phase, un, st in rows:
        print(f"{label:23s} {c.n_layers:6d}  {phase:7s} {un:10d} {st:8d} "
              f"{un * DISPATCH_US / 1000:13.1f} {st * DISPATCH_US / 1000:11.1f}")

# %% [markdown]
# Per decode token of Llama-3.2-1B: every layer's kernels one by one, plus the LM head's
# partitions, against two groups per layer plus one. At the guide's 100 µs per call the difference
# is tens of milliseconds per token, comparable to the NPU work itself. Stitching does not cut DDR
# traffic: the intermediates still go through DDR, only the host's round trips disappear.

# %%
fig, ax = plt.subplots(figsize=(7, 3))
labels, un_ms, st_ms = [], [], []
for name, (_, rows) in tables.items():
    for phase, un, st in rows:
        labels.append(f"{name.split(' ')[0]}\n{phase}")
        un_ms.append(un * DISPATCH_US / 1000)
        st_ms.append(st * DISPATCH_US / 1000)
xs = np.arange(len(labels))
ax.bar(xs - 0.2, un_ms, 0.4, label="one xrt.run per kernel")
ax.bar(xs + 0.2, st_ms, 0.4, label="one xrt.run per stitched group")
ax.set_xticks(xs, labels, fontsize=8)
ax.set_ylabel("dispatch per pass (ms)")
ax.set_title(f"Dispatch cost per forward pass at {DISPATCH_US} µs per call (estimate)", fontsize=10)
ax.legend(fontsize=8)
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 2. Two kernels before stitching
#
# The smallest useful group: RMSNorm of the token's row, then the K projection (a GEMV) of the
# normalised row. Each kernel's module has its own function over `%arg0..%arg2`. RMSNorm is a
# *bare* herd (no launch around it); the GEMV has the full
# `air.launch → air.segment → air.herd` nest and calls the C++ kernel `@matvec_bf16` from `mv.o`.

# %%
def excerpt(text, *keys, width=116):                 # + " ...": Lab's 120 columns
    """The lines of text containing any of keys, cut to width."""
    for line in text.splitlines():
        if any(k in line for k in keys):
            print(line[:width] + (" ..." if len(line) > width else ""))


norm = rmsnorm(1, H, cfg.rms_eps, herd_xy=(1, 1), flat_out=True)     # x [H] -> y [H]
proj = gemv(cfg.kv_dim, H)                                           # a [kv, H] @ x [H] -> y [kv]
for spec in (norm, proj):
    print(f"--- {spec.name}: {len(spec.text.splitlines())} lines")
    excerpt(spec.text, "func.func", '"air.launch"(', '"air.herd"(', '"func.call"')

# %% [markdown]
# ## 3. The algorithm, written here
#
# Stitching is a text transformation of the two functions' bodies:
#
# 1. **rename** every SSA value `%v` of kernel *k* to `%k_v` and every symbol it defines
#    (`sym_name = "..."`: launch, segment and herd names, and the module-level `air.channel`
#    declarations its DMAs name) likewise, and its affine-map aliases (`#map` to `#k_map`), so two
#    bodies and their module headers can sit in one module (the same kernel may even appear twice:
#    the K and V projections). The GEMV below has no maps or channels, so the derivation renames
#    values and symbols only;
# 2. **remap** `%argN` through the *argument map*: kernel argument → group argument. Two kernels
#    naming the same group argument share one DDR buffer: RMSNorm's output `y` and the GEMV's input
#    `x` both become the group's `xn`;
# 3. keep external kernels (`@matvec_bf16`) as they are, declared once.
#
# Write steps 1 and 2 for the GEMV's body, with the group arguments in order of first use:
# `x, norm_w, xn` (from RMSNorm), then `wk, k`.

# %%
group_args = ["x", "norm_w", "xn", "wk", "k"]
argmap = {"a": "wk", "x": "xn", "y": "k"}                     # GEMV argument -> group argument
slot = {i: group_args.index(argmap[a.name]) for i, a in enumerate(proj.args)}
print("GEMV %argN -> group %argM:", slot)


def body(text):
    """The lines of a module's public function, between its header and `return`."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("  func.func @"))
    return lines[start + 1:lines.index("    return", start)]


def rename(lines, label, slot):
    def value(m):
        name = m.group(1)
        if re.fullmatch(r"arg\d+", name):
            return f"%arg{slot[int(name[3:])]}"
        return f"%{label}_{name}"

    out = [re.sub(r"%([\w.$-]+)", value, l) for l in lines]
    return [re.sub(r'sym_name = "([^"]+)"', rf'sym_name = "{label}_\1"', l) for l in out]


mine = rename(body(proj.text), "k", slot)
excerpt("\n".join(mine), '"air.launch"(', '"func.call"')

# %% [markdown]
# > **Going deeper.** The MLIR-AIR guide's stitcher does the same: its `_rename_all` renames values,
# symbols and maps (`docs/explain.md`, "The Stitching Utilities", in Xilinx/mlir-air's
# `programming_examples/llms/llama32_1b`).

# %% [markdown]
# ## 4. Bare herds get a launch
#
# A stitched function is a sequence of launches: each `air.launch` is one step of the ELF's
# instruction stream. RMSNorm's bare herd is therefore wrapped in `air.launch { air.segment {
# herd } }` over a 1×1 iteration space. A launch is *isolated from above*: nothing inside may use a
# value defined outside, so the herd's size constants are re-created inside the segment and its
# buffers come in through the launch's and segment's block arguments. The herd's body is untouched.

# %%
from llamanb.npu.compiler.stitch import Member, run_one_by_one, stitch, wrap_bare_herds

wrapped = wrap_bare_herds(norm.text)
print("before:")
excerpt(norm.text, '"air.herd"(')
print("after:")
excerpt(wrapped, '"air.launch"(', '"air.segment"(', '"air.herd"(', "_size")
assert [lp.bare for lp in read_plan(norm.text).launches] == [True]       # a herd, no launch
assert [lp.bare for lp in read_plan(wrapped).launches] == [False]        # now inside a launch

# %% [markdown]
# Now the package's stitcher on the same two kernels. Its GEMV section must be exactly the lines
# derived in §3:

# %%
members = [Member(norm, {"x": "x", "w": "norm_w", "y": "xn"}, "norm"),
           Member(proj, {"a": "wk", "x": "xn", "y": "k"}, "k")]
group = stitch("rms_gemv", members)
assert [a.name for a in group.args] == group_args
assert "\n".join(mine) in group.text
print(f"the derived GEMV section ({len(mine)} lines) appears verbatim in the stitched module "
      f"({len(group.text.splitlines())} lines)")
print(group.table())

# %% [markdown]
# The roles are derived, not typed: a buffer that one launch writes and a later one reads is an
# **intermediate** (`xn`): the runtime neither uploads it before the call nor reads it back after.
# The launch plan, read back from the stitched text, shows the hand-over through DDR:

# %%
plan = read_plan(group.text)
print(plan.table())
V.verify(group.text)          # MLIR's parser (where installed) and the course's AIR structure checks

# %% [markdown]
# ## 5. Stitched = one by one, bit for bit
#
# Feed the real layer-0 weights and a token's embedding. Run the stitched module on the emulated
# NPU2 once, then run the two original modules one after the other on the same buffers. Same
# kernels, same DMAs, same order: every bit must agree. And both must agree with float64 math
# within bf16 rounding.

# %%
tok = model.tokenizer.encode("The")[-1]
x_tok = to_bf16(engine.backend.embed(np.array([tok])))[0]                # [H]
feed = {"x": x_tok, "norm_w": w0.attn_norm, "wk": w0.wqkv[cfg.q_dim:cfg.q_dim + cfg.kv_dim]}


def arrays_for(spec, feed):
    return [np.ascontiguousarray(feed[a.name], np.float32) if a.name in feed
            else np.zeros(a.shape, np.float32) for a in spec.args]


a_st, a_one = arrays_for(group, feed), arrays_for(group, feed)
report = run(group, *a_st)
run_one_by_one(group, members, a_one)
k_st, k_one = a_st[group.arg_index("k")], a_one[group.arg_index("k")]
diff_bits = int(np.sum(k_st.view(np.uint32) != k_one.view(np.uint32)))
print(f"{report.launches} launches in one emulated run; K [{k_st.size}]: {diff_bits} elements "
      f"differ in any bit from the one-by-one run")

x64 = x_tok.astype(np.float64)
xn64 = x64 / np.sqrt(np.mean(x64 ** 2) + cfg.rms_eps) * w0.attn_norm
k64 = feed["wk"].astype(np.float64) @ xn64
rel = np.abs(k_st - k64).max() / np.abs(k64).max()
# the bound: one bf16 ulp of the largest |k| (2^-8 relative); the measured value is printed below
assert diff_bits == 0 and rel < 2.0 ** -8
print(f"vs float64: largest error {rel:.0e} of the largest |k| (asserted < 2^-8 = 3.9e-03, one "
      f"bf16 ulp)")

# %% [markdown]
# A wrong argument map is not a syntax error: the module still verifies. Point the GEMV at the raw
# row `x` instead of the normalised `xn` (one entry of the map), and the numbers change:

# %%
bad = stitch("rms_gemv", [members[0], Member(proj, {"a": "wk", "x": "x", "y": "k"}, "k")])
a_bad = arrays_for(bad, feed)
run(bad, *a_bad)
k_bad = a_bad[bad.arg_index("k")]
changed = np.mean(k_bad != k_st)
assert changed > 0.5
print(f"one map entry changed: {changed:.0%} of K's elements change "
      f"(plan of launch 1 reads {[bad.args[i].name for i in read_plan(bad.text).launches[1].args]})")

# %% [markdown]
# ## 6. Why a prefill layer is three groups
#
# Stitching could in principle put a whole layer into one function. The guide's prefill layer is
# three: `rms_gemms_rope`, `flash_attn` alone, `o_ffn`. The reason is the compiler, not
# correctness: FlashAttention's channels block merging it with other launches, and compiling it
# together with many launches took too long (the sidebar after section 7 quotes the guide).

# %% [markdown]
# ## 7. The production groups
#
# `llamanb.npu.compiler.groups` builds the guide's layout from a model config: prefill `rms_gemms_rope`
# (6 launches), `flash_attn` (alone), `o_ffn` (8); decode `rms_gemv_rope` (6), `o_gemv_ffn` (8) and
# `lm_head_gemv` (the vocabulary in 8 row slices). One detail comes from the one-function rule: an
# external kernel has one declaration per module, so the down projection (K = D_ff) is the same
# `mv.cc` compiled under a second symbol, and RoPE on the K heads (a smaller L1 tile) gets one too.
# `o_gemv_ffn3` is this course's own 3-launch packing of the decode FFN (§8b). Every count below is
# read back from the stitched module's text:

# %%
from llamanb.npu.compiler.groups import group_table

for name, (gs, _) in tables.items():
    print(f"--- {name}")
    print(group_table(gs))

# %%
def counts(g):
    return (g.launches, tuple(g.roles().get(r, 0) for r in ("weight", "input", "intermediate",
                                                             "output")))


big, small = (tables[k][0] for k in tables)
differ = [n for n in big if counts(big[n]) != counts(small[n])]
assert differ == []                        # the same layout for both models: the figure draws one

fig, ax = plt.subplots(figsize=(7.5, 3.2))
roles = ("weight", "input", "intermediate", "output")
names = list(big)
bottom = np.zeros(len(names))
for r in roles:
    n_r = np.array([big[g].roles().get(r, 0) for g in names])
    ax.bar(names, n_r, bottom=bottom, label=f"{r} arguments")
    bottom += n_r
ax.plot(names, [big[g].launches for g in names], "ko", label="launches")
ax.set_ylabel("count")
ax.tick_params(axis="x", labelsize=7, rotation=20)
ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
ax.set_title("Llama-3.2-1B groups (the embedded model's are the same): arguments by role and "
             "launches,\nread from the stitched module text", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# > **Going deeper: the guide's groups and upstream HEAD.** The guide's table of compiler limitations
# (`docs/explain.md`, "Compiler Limitations Discovered") says "FlashAttention channels block
# multi-launch merging", and that `air-opt-shim-dma-bds` "scales super-linearly with
# FlashAttention": 9 or more launches with it took over ten minutes to compile; alone,
# `flash_attn.elf` compiles in 46 s (`docs/profile.md`). Upstream's FlashAttention relays Q, K and
# V through per-stage channels (`attn_npu2_seqfirst.py`); this course's has a simpler channel
# structure, so its text predicts nothing about upstream's compile time. The counts above are the
# guide's (`docs/profile.md`: 6 / 1 / 8 and 6 / 8 / 8); at upstream HEAD the builders in
# `llms/shared/builders/` make 7 / 1 / 12 for prefill and 6 / 3 / 8 for decode. Upstream names the
# second GEMV object `mv_k8192.o` and reuses one `@rope` for Q and K. More: `docs/corrections.md`.

# %% [markdown]
# ## 8. One decode layer of the real model, two stitched calls
#
# Prefill five tokens with the numpy engine, then decode the sixth at position 5. The engine's
# block gives the reference output of layer 0 (and writes the new K and V into its cache). On the
# NPU side: `rms_gemv_rope` (6 launches) gives q, k, v; attention over the cache runs on the host, as
# in the guide's decode; `o_gemv_ffn` (8 launches) gives the layer's output.

# %%
from llamanb.npu.compiler.groups import decode_groups

prompt = model.tokenizer.encode("Tiles talk through DDR")[:6]
P = len(prompt) - 1
cache = engine.new_cache(16)
engine.prefill(prompt[:P], cache)
b = engine.backend
x = b.embed(np.array(prompt[P:]))                                             # [1, H]
keys, values = cache.keys(0, 0, P).copy(), cache.values(0, 0, P).copy()      # [Nkv, P, d]
ref = b.block(0, x.copy(), Step.build([(0, P, prompt[P:])]), cache)[0]       # [H]

dg = decode_groups(cfg)
qd, kvd = cfg.q_dim, cfg.kv_dim
t0 = time.perf_counter()
g1 = dg["rms_gemv_rope"].spec
a1 = arrays_for(g1, {"x": x[0], "attn_norm": w0.attn_norm, "wq": w0.wqkv[:qd],
                     "wk": w0.wqkv[qd:qd + kvd], "wv": w0.wqkv[qd + kvd:],
                     "lut_q": rope_lut([P], Nh, b.freqs)[0], "lut_k": rope_lut([P], Nkv, b.freqs)[0]})
r1 = run(g1, *a1)
q, k, v = (a1[g1.arg_index(n)] for n in ("q", "k", "v"))

K = np.concatenate([keys, k.reshape(Nkv, 1, d)], 1).astype(np.float64)       # [Nkv, P+1, d]
Vv = np.concatenate([values, v.reshape(Nkv, 1, d)], 1).astype(np.float64)
attn = np.zeros((Nh, d))
for h in range(Nh):
    s = K[h // cfg.group] @ q.reshape(Nh, d)[h] / np.sqrt(d)
    p = np.exp(s - s.max())
    attn[h] = p / p.sum() @ Vv[h // cfg.group]

g2 = dg["o_gemv_ffn"].spec
a2 = arrays_for(g2, {"x": x[0], "attn": to_bf16(attn.reshape(-1).astype(np.float32)), "wo": w0.wo,
                     "ffn_norm": w0.ffn_norm, "w_gate": w0.w_gate_up[:F],
                     "w_up": w0.w_gate_up[F:], "w_down": w0.w_down})
r2 = run(g2, *a2)
out = a2[g2.arg_index("out")]
seconds = time.perf_counter() - t0
print(f"{r1.launches} + {r2.launches} launches in 2 emulated calls")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"emulated in {seconds:.1f} s on this machine")

# %% [markdown]
# The engine keeps float32 between its bf16 roundings; the NPU path stores bf16 after every kernel.
# So they differ, by about an ulp of bf16 per element. Measure in ulps of the output's largest
# magnitude (the residual stream's scale):

# %%
gap = 2.0 ** (np.floor(np.log2(np.abs(ref).max())) - 7)          # bf16 ulp at the largest |ref|
worst = np.abs(out - ref).max() / gap
typical = np.median(np.abs(out - ref) / np.maximum(np.abs(ref), 1e-30))
k_ref = cache.keys(0, 0, P + 1)[:, P].reshape(-1)
k_ulps = np.abs(k - k_ref).max() / 2.0 ** (np.floor(np.log2(np.abs(k_ref).max())) - 7)
# Measured on this machine (printed in the next cell): worst at most 1 ulp, K at most 1 ulp,
# median relative error under 2^-7. The bounds add one ulp (another BLAS may sum in another
# order and move a bf16 result by one) and keep the median's power of two.
assert worst <= 2 and k_ulps <= 2 and typical <= 2.0 ** -7
print(f"layer 0 output [{out.size}]: worst error <= 2 ulp of the largest |x| (asserted), "
      f"median relative error <= 2^-7 (asserted)")
print("new K vs the engine's cache: <= 2 ulp of the largest |k| (asserted)")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"measured here: worst {worst:.3f} ulp, median relative error {typical:.2e} "
      f"(2^{np.log2(typical):.2f}), new K {k_ulps:.3f} ulp")

# %% [markdown]
# ## 8b. Fewer launches
#
# A launch is one step of the ELF's command stream, so fewer launches means fewer
# reconfigurations inside one `xrt.run`. `stitch(..., launches=[[0, 1], [2, 3, 4], [5, 6]])` puts
# several members' herds into one launch; `o_gemv_ffn3` packs the decode FFN into 3 launches that
# way, with gate and up as ONE GEMV over the packed `w_gate_up` [2·D_ff, H]. On the same inputs it
# must give the same bits, since only the launch structure changed. (The guide's own 3-launch FFN
# is different, fused kernels: the sidebar below.)

# %%
g8, g3 = dg["o_gemv_ffn"], dg["o_gemv_ffn3"]
a3 = arrays_for(g3.spec, {"x": x[0], "attn": to_bf16(attn.reshape(-1).astype(np.float32)),
                          "wo": w0.wo, "ffn_norm": w0.ffn_norm, "w_gate_up": w0.w_gate_up,
                          "w_down": w0.w_down})
r3 = run(g3.spec, *a3)
out3 = a3[g3.spec.arg_index("out")]
assert np.array_equal(out3, out) and r3.launches == g3.launches
for g in (g8, g3):
    herds = " | ".join(", ".join(h.op for h in lp.herds) for lp in g.plan.launches)
    print(f"{g.name:11s} {g.launches} launches, {len(g.plan.args)} arguments: {herds}")
for g in (g8, g3):
    print(f"{g.name:11s} per token, {cfg.n_layers} layers: {cfg.n_layers} xrt.run calls, "
          f"{cfg.n_layers * g.launches} launches (reconfigurations) inside them")
same = int(np.sum(out3.view(np.uint32) == out.view(np.uint32)))
print(f"layer 0 output, o_gemv_ffn3 vs o_gemv_ffn: {same} of {out.size} elements bit-identical "
      f"(emulated)")

# %% [markdown]
# > **Going deeper: upstream's 3-launch FFN.** Upstream's decode FFN went from 8 launches to 3
# (Xilinx/mlir-air commit 462bf133b), but its 3 launches are three *different, fused* kernels
# (`llms/shared/builders/o_gemv_ffn_multi.py`), not the 8 members regrouped; `o_gemv_ffn3`
# reproduces none of those fusions and predicts nothing about their speed.
# `docs/corrections.md`, "NPU2 (chapters 05–07)", describes them.

# %% [markdown]
# ## 9. Compiling once
#
# `llamanb.npu.compiler.compile.compile(spec)` turns a group into an artifact directory in the cache: the
# module text, its launch plan as JSON, the host build the emulator calls, and a manifest that says
# **emulated** without mlir-air and Peano (with them: Peano's objects, then mlir-air's `XRTBackend`
# writes `<group>.elf`, loaded later as kernel `main:<group>`). Its name holds a fingerprint of the
# text, the compile options, the kernel sources and the toolchain, so a second compile finds it.

# %%
from llamanb.npu.compiler import compile as npc

first = npc.compile(dg["o_gemv_ffn"].spec, mode="emulated")
second = npc.compile(dg["o_gemv_ffn"].spec, mode="emulated")
m = second.manifest
print(f"mode: {m['mode']}; launches: {m['launches']}; arguments: {len(m['args'])}")
print(f"objects linked: {sorted({l['object'] for l in m['links']})}")
assert second.cache_hit and second.path == first.path          # the second call: a cache hit

# %% [markdown]
# > **Going deeper: what the real compiler and runtime add.** None of the above has been through
# the real toolchain. On a Ryzen AI machine, mlir-air's
# `XRTBackend.compile` runs **aircc** (the AIR passes, then aiecc's AIE passes) into one `.elf`
# per group, loaded as kernel `main:<group>`, with **Peano** compiling the C++ kernels that
# `link_with` names. aircc lowers `linalg` with `convert-linalg-to-loops` (`tools/aircc/aircc.cpp`):
# only vector ops or C++ kernels run vectorised. It packs each ELF's shim DMAs into 16 buffer
# descriptors per shim tile, doubles every DMA-fed L1 buffer unless the group omits ping-pong
# (notebook 05's L1 check counts that copy; `o_gemv_ffn` and `flash_attn` are compiled with
# `omit_pingpong: "all"`, `shared/infra/backend_presets.py`), and needs the host to pre-transpose
# bf16 weights and K/V (the DMA cannot transpose bf16). Upstream keeps decode attention on the CPU
# ("NPU launch overhead > compute", `llms/README.md`). Each of these points, with its upstream
# file, the published compile times per ELF, the one-row LM head in prefill and where a call's
# time goes (BO write / NPU run / BO read, and why "BO read" is more than a zero-copy view), is in
# `docs/corrections.md`, "NPU2 (chapters 05–07)"; notebook 07 takes a call apart.

# %% [markdown]
# ## Summary
#
# * One stitched function per group makes a decode layer 2 dispatches instead of one per kernel.
# * Stitching is text: renaming, argument remapping, and wrapping bare herds in a launch; a wrong
#   argument map still verifies, so the result is checked by running it.
# * The stitched group computes what its kernels compute one by one, bit for bit, and one decode
#   layer of the real model through two stitched calls matches the engine within bf16 rounding.

# %% [markdown]
# ## Exercises
#
# Two functions to write: the bookkeeping of section 3 for any group. Each is checked against
# `llamanb.npu.compiler.stitch`. Replace `raise NotImplementedError` with your code and run the cell, then
# run the check below it; it prints one line (`passed`, the first case that differs with a hint, or
# `not attempted yet`). Solutions: `solutions/06_elf_stitching.py`.

# %%
from llamanb.course.exercises import ch06

# %% [markdown]
# ### 06.1 The argument map
#
# Write `group_arguments(members)`. `members` is a list of `(label, kernel_args, argmap)`: a
# member's label, its kernel's argument names in order (e.g. `["a", "x", "y"]` for a GEMV), and
# its map kernel argument -> group argument (arguments not in the map are named
# `<label>_<name>`). Return `(names, slots)`: the group's arguments in order of first use, and per
# member the group index of each of its arguments (`%argN` -> `%argM`). Checked against
# `stitch(...)` on real kernels. *Hint:* section 3's `group_args` and `slot`, for any number of
# members.

# %%
def group_arguments(members: list) -> tuple[list[str], list[list[int]]]:
    raise NotImplementedError  # your code here


# %%
ch06.group_arguments(group_arguments)

# %% [markdown]
# ### 06.2 Roles
#
# Write `derive_roles(events, names)`: `events[i]` lists `(group argument, role in member i)` for
# member `i` in launch order, roles `"input"`, `"weight"` or `"output"`; return `{name: role}`
# with `"input"`, `"weight"`, `"intermediate"` or `"output"` for the group. Checked against
# `llamanb.npu.compiler.stitch.derive_roles` on the groups of 06.1 and random ones. *Hint:* a buffer the
# host never needs to read back is one some later member reads.

# %%
def derive_roles(events: list, names: list[str]) -> dict[str, str]:
    raise NotImplementedError  # your code here


# %%
ch06.derive_roles(derive_roles)
