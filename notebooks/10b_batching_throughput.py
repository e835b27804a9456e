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
#     builds: batching timed against one request at a time, beside the counted ceiling
#     modules:
#     - llamanb.bench.batching
#     - llamanb.serve
#     part: III
# ---

# %% [markdown]
# # 10b · What batching buys: throughput on this machine
#
# **What you will build.** A fair timing of chapter 10's scheduler against serving one request at
# a time. Every engine step reads every weight once; *if* a decode step's time were that weight
# read alone, batching would divide the cost by the tokens each step produces, a number you can
# count without a clock. You will count it, then time the three ways of serving the same requests
# on this machine, paired round by round, and see how far the measured gain falls short of the
# count, and why.

# %% [markdown]
# ## 0. Setup

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, load_model
from llamanb.serve import BatchRunner
from llamanb.serve.dry import DryEngine
from llamanb.serve.workload import mixed_workload

model = load_model()
tok = model.tokenizer
engine = Engine(model)
work = mixed_workload(tok.encode("The old lighthouse stood at the end of a narrow spit of rock, "
                                 "where the harbour met the open sea."), 5, seed=1,
                      prompt_range=(8, 32), new_range=(4, 10))
SLOTS = 4
print(f"{len(work)} requests: prompts of {[len(p) for p, _ in work]} tokens, "
      f"{[k for _, k in work]} new tokens each")

# %% [markdown]
# ## 1. The ceiling, counted
#
# One at a time, each step makes one token: 1.00 token per weight pass. Batched, a step makes one
# token for every request decoding in it. The scheduler decides the steps without looking at the
# logits (every request here generates exactly its `k` tokens), so `DryEngine`, chapter 10's
# stand-in for the model, gives the same schedule the real engine will run:

# %%
def dry_steps(policy: str) -> int:
    runner = BatchRunner(DryEngine(), slots=SLOTS, block=16, kv_positions=16 * 1024, policy=policy)
    for p, k in work:
        runner.add(p, k, stop_ids=())
    runner.run()
    return len(runner.history)


need = sum(k for _, k in work)
counted = {f"{p}, {SLOTS} slots": need / dry_steps(p) for p in ("static", "continuous")}
for m, c in counted.items():
    print(f"{m:>20}: {need} tokens in {need / c:.0f} steps = {c:.2f} tokens per weight pass")
assert 1 < counted["static, 4 slots"] <= counted["continuous, 4 slots"] <= SLOTS
assert all(need / c >= max(k for _, k in work) for c in counted.values())   # a token a step at most

# %% [markdown]
# ## 2. The papers' premise, and this CPU's
#
# The papers measured batching on GPUs serving large models, where a decode step is bound by
# reading the weights. Orca (Yu et al., OSDI '22): "36.9× throughput improvement at the same level
# of latency" against NVIDIA FasterTransformer on GPT-3 175B (abstract); vLLM (Kwon et al., SOSP
# '23): "2-4×" against FasterTransformer and Orca at the same latency (abstract), from fitting more
# sequences into the same memory.
#
# On a CPU the premise fails: a batched step is not free. Its rows are a GEMM instead of a GEMV
# (the multiply-adds grow with the rows and are no longer hidden behind the weight reads), a step
# with prompt rows is padded to the BLAS row multiple for bit-identical prefill, and each
# sequence's attention is its own call. Quiet machines' figures from `python -m llamanb bench
# --batching` (16 requests, medians of interleaved rounds) are in `docs/performance.md`.
#
# ## 3. Measured here
#
# The requests served one at a time (`generate`), and by static and continuous batching with 4
# slots (`llamanb.bench.batching`, the functions `bench --batching` runs). Each round runs all
# three, in a rotated order, so each batched run is compared with the one-at-a-time run of its own
# round (paired). The cell says which run it is on while it runs (seconds to a minute a round, by
# the machine and its load). Timings are not stored: they depend on the machine; the step counts
# are checked against section 1's.

# %%
# NBVAL_IGNORE_OUTPUT
from llamanb.bench.batching import batched, one_at_a_time
from llamanb.platform.progress import stages

MODES = {"one at a time": lambda: one_at_a_time(engine, work)[0],
         "static, 4 slots": lambda: batched(engine, work, SLOTS, "static")[0],
         "continuous, 4 slots": lambda: batched(engine, work, SLOTS, "continuous")[0]}
ROUNDS = 3
samples = {m: [] for m in MODES}
with stages(prefix="benchmark") as say:           # one line, replaced run by run, gone after
    for rnd in range(ROUNDS):                     # rotated order: no mode always runs first
        for m in list(MODES)[rnd:] + list(MODES)[:rnd]:
            say(f"round {rnd + 1} of {ROUNDS}: {m}, {len(work)} requests")
            samples[m].append(MODES[m]())
    print(f"{ROUNDS} rounds of {len(MODES)} runs done")
for m in counted:                                 # the real runs took the counted steps
    assert all(s["steps"] == need / counted[m] for s in samples[m]), m
one = samples["one at a time"]
ratios = {m: [r["tok_s"] / o["tok_s"] for r, o in zip(samples[m], one)] for m in counted}
for m, rs in ratios.items():
    print(f"{m:>20}: {np.median(rs):.2f}x one at a time (rounds {min(rs):.2f}-{max(rs):.2f}); "
          f"counted {counted[m]:.2f} tokens per weight pass")
cont = samples["continuous, 4 slots"]
step_ratio = [c["full_decode_step_s"] / o["decode_step_s"] for c, o in zip(cont, one)]
print(f"a 4-row decode step takes {np.median(step_ratio):.1f}x a 1-row one (median of "
      f"{ROUNDS} rounds): 4x the tokens for that much time")
fig, ax = plt.subplots(figsize=(8.5, 2.4))
for y, (m, rs) in enumerate(ratios.items()):
    ax.plot(rs, [y] * len(rs), "o", color="C0", alpha=0.5, label="a round" if y == 0 else None)
    ax.plot([np.median(rs)] * 2, [y - 0.3, y + 0.3], color="C0", lw=2,
            label="median" if y == 0 else None)
    ax.plot(counted[m], y, "D", color="C1", label="counted tokens / weight pass" if y == 0 else None)
ax.axvline(1.0, color="grey", ls="--", lw=0.8)
ax.set_yticks(range(len(ratios)), list(ratios))
ax.set_ylim(-0.6, len(ratios) - 0.4)
ax.set_xlim(0, 1.15 * max(max(counted.values()), max(max(r) for r in ratios.values())))
ax.set_xlabel("throughput / one at a time (measured, this machine and run)")
ax.set_title(f"{len(work)} requests, {ROUNDS} paired rounds: a noisy demo; diamonds are counted",
             fontsize=10)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
plt.show()

# %% [markdown]
# The diamonds hold on any machine; the dots are this run's. The gap between them is what a
# batched step costs beyond one weight pass on this CPU: the printed ratio of a 4-row decode step
# to a 1-row one says how much. On a GPU serving a large model that ratio is close to 1, and the
# dots move toward the diamonds.
#
# **What you built.** A measurement that separates what batching must give (tokens per weight
# pass, counted from the schedule) from what this machine gives (paired, rotated rounds), with the
# per-step cost that explains the difference. `python -m llamanb bench --batching` runs the same
# functions on 16 requests and more slot counts.
