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
#     builds: a scheduler with paged blocks; batched equals alone, bit for bit
#     modules:
#     - llamanb.serve
#     - llamanb.engine.kv.paged
#     part: III
# ---

# %% [markdown]
# # 10 · Continuous batching: many requests through one engine
#
# **What you will build.** One decode step of SmolLM2-135M reads all 538 MB of its weights to
# produce one token. A second request decoding in the same step does not read them a second time:
# its row joins the matrix products. (Whether that row is also free in *time* depends on the
# machine; chapter 10b measures it.) Serving engines therefore batch
# requests, and since Orca (Yu et al., OSDI '22) they decide the batch again at *every* iteration
# ("iteration-level scheduling"): a request that finishes hands its slot to a waiting one in the
# very next step, instead of the batch waiting for its longest member. To batch requests of
# different lengths and phases at all, Orca runs the non-attention operations (the linear layers,
# norms, activations) over all the requests' tokens at once and splits the batch only for
# attention, one request at a time ("selective batching") -- exactly what `Engine.step` does with
# a step's segments. vLLM (Kwon et al., SOSP '23) added the memory side: the KV cache in
# fixed-size blocks ("PagedAttention"), taken as sequences grow and returned when they end.
#
# You will derive the schedules of static and continuous batching and check `llamanb.serve`'s
# scheduler against them, step through its decisions, compare the paged KV cache's memory with
# contiguous caches, and prove that batching never changes a request's tokens, even across a
# preemption. What batching buys in time on this machine is the next chapter, 10b.

# %% [markdown]
# ## 0. Setup
#
# `llamanb.serve` holds one concept per file: `request.py` (a request and where it is in its
# life), `scheduler.py` (who runs in the next step), `runner.py` (the loop), `dry.py` (a stand-in
# for the model, for looking at scheduling alone).

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np

from llamanb import Engine, SamplingParams, load_model
from llamanb.engine.generate import generate
from llamanb.platform.progress import stages
from llamanb.serve import BatchRunner
from llamanb.serve.dry import DryEngine

model = load_model()
cfg, tok = model.config, model.tokenizer
print(f"{cfg.name}: {cfg.n_layers} layers, {cfg.n_kv_heads} KV heads of {cfg.head_dim}, "
      f"weights {model.weights.nbytes() / 1e6:.0f} MB (float32)")

# %% [markdown]
# ## 1. Why static batching wastes slots
#
# Eight requests arrive together. Each has a prompt (here short enough that a whole prompt goes
# through in one step) and a number of tokens to generate. With 4 slots, a request admitted in
# step `a` is prefilled in step `a` (which also yields its first token) and then decodes one token
# per step, so it holds its slot for exactly `k` steps, `a .. a + k - 1`.
#
# * **static**: requests go in batches of 4; the next batch starts when the *longest* member of
#   the current one is done.
# * **continuous**: the next waiting request takes the first slot that frees up.
#
# The whole schedule follows from those two rules. Our own derivation, in plain Python:

# %%
WORK = [(40, 12), (100, 30), (20, 6), (60, 18), (30, 8), (80, 24), (25, 10), (50, 14)]  # (prompt, k)
SLOTS = 4


def derive(policy: str) -> list[tuple[int, int]]:
    """(first step, last step) of each request, from the two rules above."""
    spans = []
    if policy == "static":
        start = 0
        for b in range(0, len(WORK), SLOTS):
            ks = [k for _, k in WORK[b:b + SLOTS]]
            spans += [(start, start + k - 1) for k in ks]
            start += max(ks)                          # the batch waits for its longest member
    else:
        free_at = [0] * SLOTS                         # step at which each slot frees up
        for _, k in WORK:
            s = int(np.argmin(free_at))               # FIFO: the earliest free slot
            spans.append((free_at[s], free_at[s] + k - 1))
            free_at[s] += k
    return spans


derived = {p: derive(p) for p in ("static", "continuous")}
for p, spans in derived.items():
    print(f"{p:>10}: {max(e for _, e in spans) + 1} steps; spans {spans}")

# %% [markdown]
# Now the package's scheduler, driven by `DryEngine` (the cache bookkeeping of a real step, logits
# that always pick token 0, so every request generates exactly its `k` tokens). Its recorded
# history gives each request's first and last step; they must be the derived ones. Then the
# slot-steps: the requests need `Σ k` slot-steps of work in all; a schedule of `T` steps offers
# `slots × T`. Everything else is a slot idling.

# %%
def dry_run(policy: str, slots: int = SLOTS, block: int = 16, kv_positions: int = 768):
    runner = BatchRunner(DryEngine(), slots=slots, block=block, kv_positions=kv_positions,
                         token_budget=512, policy=policy)
    reqs = [runner.add(list(range(3, 3 + p)), k, stop_ids=(), name=f"q{i}")
            for i, (p, k) in enumerate(WORK)]
    tables = []                                       # block tables after every step
    while runner.scheduler.busy:
        runner.step()
        tables.append([list(t) for t in runner.cache.tables])
    return runner, reqs, tables


runs = {p: dry_run(p) for p in ("static", "continuous")}
for p, (runner, reqs, _) in runs.items():
    steps_of = {r.name: [h.index for h in runner.history for _, n, _, _ in h.rows if n == r.name]
                for r in reqs}
    got = [(s[0], s[-1]) for s in steps_of.values()]
    assert got == derived[p], (p, got)
    assert all(len(r.output) == k for r, (_, k) in zip(reqs, WORK))
print("the scheduler's timeline equals the derived one for both policies")
need = sum(k for _, k in WORK)
for p, (runner, _, _) in runs.items():
    T = len(runner.history)
    print(f"{p:>10}: {T} steps, {need} of {SLOTS * T} slot-steps busy "
          f"({need / (SLOTS * T):.0%}), {need / T:.2f} tokens per step")

# %% [markdown]
# The timeline: one row per slot, one bar per request, the prefill step hatched. In the static
# schedule, slot after slot goes grey while its batch's longest member (q1, 30 tokens) finishes.

# %%
COLORS = plt.get_cmap("tab10").colors


def draw_timeline(ax, runner, upto=None, title=""):
    upto = len(runner.history) if upto is None else upto
    for h in runner.history[:upto]:
        for slot, name, kind, _ in h.rows:
            ax.barh(slot, 1, left=h.index, color=COLORS[int(name[1:]) % 10],
                    hatch="///" if kind == "prefill" else None, edgecolor="white", linewidth=0.3)
    ax.set_xlim(0, max(len(r.history) for r, _, _ in runs.values()))
    ax.set_ylim(-0.6, runner.cache.slots - 0.4)
    ax.set_yticks(range(runner.cache.slots))
    ax.set_ylabel("slot")
    ax.set_title(title, fontsize=10)


fig, axes = plt.subplots(2, 1, figsize=(10, 4.2), sharex=True)
for ax, (p, (runner, _, _)) in zip(axes, runs.items()):
    draw_timeline(ax, runner, title=f"{p} batching: {len(runner.history)} steps")
axes[1].set_xlabel("step")
handles = [plt.Rectangle((0, 0), 1, 1, color=COLORS[i]) for i in range(len(WORK))]
handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="grey", hatch="///", edgecolor="white"))
fig.legend(handles, [f"q{i} (k={k})" for i, (_, k) in enumerate(WORK)] + ["prefill step"],
           loc="center right", fontsize=8)
fig.tight_layout(rect=(0, 0, 0.86, 1))
plt.show()

# %% [markdown]
# ## 2. The scheduler, step by step
#
# Before every step `Scheduler.schedule()` makes three decisions, in this order:
#
# 1. every running request gets its next piece: one row if it is decoding, the next chunk of its
#    prompt if it is not; if the pool cannot hold the decode rows' new blocks, the *newest*
#    running request is preempted (its blocks freed, its tokens kept, back to the queue's head);
# 2. the step holds at most `token_budget` rows; a prompt that does not fit is cut at a multiple of
#    128 rows (the attention's query tile, so that chunked prefill stays bit-identical to one shot)
#    and continues next step, so one long prompt never stalls the decoding rows;
# 3. waiting requests are admitted in arrival order while slots, rows and blocks last; a request
#    is admitted only if the pool can hold its whole prompt now.
#
# Then `BatchRunner.step` is three lines: schedule, `engine.step` over all pieces, and sample /
# retire. The first steps of the continuous run, as the runner recorded them:

# %%
runner_c = runs["continuous"][0]
for h in runner_c.history[:4] + runner_c.history[10:13]:
    rows = ", ".join(f"{s}: {n} {kind} x{m}" for s, n, kind, m in h.rows)
    print(f"step {h.index:2d} | slot {rows} | blocks {h.blocks_used:2d}"
          + (f"\n{'':8}| admitted {', '.join(h.admitted)}" if h.admitted else "")
          + (f"\n{'':8}| finished {', '.join(h.finished)}" if h.finished else ""))

# %% [markdown]
# Step through the continuous run with the slider (live notebook): left, each slot's request and
# the positions it holds; right, the pool of KV blocks coloured by holder. The static figures
# after it show the same data at four steps.

# %%
import io

from IPython.display import Image, display
from ipywidgets import IntSlider, Output, VBox

from llamanb.course.widgets import kernel_notice

runner_c, reqs_c, tables_c = runs["continuous"]
N_BLOCKS = runner_c.cache.k_pool.shape[0]
owner_of_slot = [{s: n for s, n, _, _ in h.rows} for h in runner_c.history]


def draw_step(ax_slots, ax_pool, step: int):
    h, tables = runner_c.history[step], tables_c[step]        # tables: after the step, as the log
    for slot, name, kind, m in h.rows:
        held = len(tables[slot]) * runner_c.cache.block
        ax_slots.barh(slot, held, color=COLORS[int(name[1:]) % 10], alpha=0.35)
        done = name in h.finished                      # its last token: blocks back on the free list
        ax_slots.text(2, slot, f"{name} {kind}" + (", finished: blocks freed" if done else ""),
                      va="center", fontsize=10)
    ax_slots.set_xlim(0, 140)
    ax_slots.set_ylim(-0.6, SLOTS - 0.4)
    ax_slots.set_yticks(range(SLOTS))
    ax_slots.set_ylabel("slot", fontsize=10)
    ax_slots.set_xlabel("positions held after the step (whole blocks)", fontsize=10)
    ax_slots.set_title(f"step {step}" + (f": finished {', '.join(h.finished)}" if h.finished
                                         else ""), fontsize=11)
    grid = np.full(N_BLOCKS, -1)                       # the whole pool, 4 rows of 12 blocks
    for slot, t in enumerate(tables):
        name = owner_of_slot[step].get(slot)
        for b in t:
            if name is not None:
                grid[b] = int(name[1:])
    colors = [COLORS[g % 10] if g >= 0 else (0.92, 0.92, 0.92) for g in grid]
    for b, c in enumerate(colors):
        ax_pool.add_patch(plt.Rectangle((b % 12, -(b // 12)), 0.9, 0.9, color=c))
    ax_pool.set_xlim(0, 12)
    ax_pool.set_ylim(-3.1, 1)
    ax_pool.axis("off")
    after = sum(map(len, tables))
    freed = f"; {h.blocks_used - after} freed" if h.blocks_used != after else ""
    ax_pool.set_title(f"KV pool: {h.blocks_used} blocks during the step (the log's), {after} of "
                      f"{N_BLOCKS} held after it{freed}\n(colour: holder, as left)", fontsize=11)


def step_png(step: int) -> bytes:
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 2.8))
    draw_step(a, b, step)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=plt.rcParams["figure.dpi"], bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


slider = IntSlider(value=0, min=0, max=len(runner_c.history) - 1, description="step")
view = Output()


def show(step: int) -> None:
    view.outputs = ()
    view.append_display_data(Image(step_png(step)))


slider.observe(lambda change: show(change["new"]), names="value")
display(VBox([kernel_notice(), slider, view]))   # the notice shows only once the kernel is gone
show(slider.value)

# %%
fig, axes = plt.subplots(4, 2, figsize=(10, 10))
for row, step in zip(axes, [0, 6, 12, 24]):
    draw_step(row[0], row[1], step)
fig.tight_layout()
plt.show()

# %% [markdown]
# A freed block goes back on the free list and the next request to grow takes it, wherever it
# lies: by step 24, q5's block table is no longer a contiguous run, and nobody needs it to be.

# %%
q5_slot = next(s for s, n in owner_of_slot[24].items() if n == "q5")
print(f"q5's block table after step 24: {tables_c[24][q5_slot]}")
assert tables_c[24][q5_slot] != list(range(min(tables_c[24][q5_slot]), max(tables_c[24][q5_slot]) + 1))

# %% [markdown]
# **Going deeper: whose decisions these are.** Decision 1 is vLLM's: "the latest requests are
# preempted first", all of a sequence's blocks at once (Kwon et al., SOSP '23, §4.5;
# `preempted_req = self.running.pop()` in `vllm/v1/core/sched/scheduler.py`). Decision 2 is in
# neither paper (both run a prompt whole): it is "chunked prefill" (Sarathi-Serve, Agrawal et al.
# 2024), as vLLM's V1 token budget does. Orca admits the opposite way: it reserves KV room for a
# request's *maximum* length (section 3's contiguous layout), so it never preempts.

# %% [markdown]
# ## 3. The paged KV cache: blocks on demand
#
# `llamanb.engine.kv.paged.PagedKVCache` keeps every sequence's keys and values in blocks of 16
# positions from one pool; a sequence's block table lists its blocks in position order, so
# position `p` lives in row `p % 16` of block `table[p // 16]`. Sixteen is vLLM's default block
# size too (the paper's block-size ablation, §7.2; vLLM still sets 16 on GPUs when none is given).
# Left out: vLLM's copy-on-write block sharing (§4.4) and preemption by swapping to CPU memory
# (§4.5; the V1 scheduler recomputes only).
# One position costs `2 (K and V) × L × N_kv × d_h × 4 bytes`:

# %%
per_position = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4
real = Engine(model).new_cache(cfg.max_seq, slots=SLOTS, block=16, n_blocks=64)
assert real.nbytes == per_position * 64 * 16          # the pool is exactly that, nothing more
print(f"{per_position} bytes per position ({per_position / 1024:.0f} KiB); "
      f"a block of 16: {16 * per_position / 1e6:.2f} MB")

# %% [markdown]
# Memory over the continuous run, in positions: what the pool hands out (whole blocks), what the
# sequences actually hold, and what contiguous per-slot caches would reserve. A contiguous cache
# must give every slot room for the longest request it may get, or for the model's whole context
# if it cannot know. The share of the memory that holds tokens is printed last.

# %%
held = [h.blocks_used * 16 for h in runner_c.history]
fed = {r.name: 0 for r in reqs_c}        # positions each request holds, rebuilt from the history
tokens = []
for h in runner_c.history:
    for _, n, _, m in h.rows:
        fed[n] += m
    tokens.append(sum(fed[n] for _, n, _, _ in h.rows))
longest = max(p + k for p, k in WORK)
contiguous = SLOTS * longest
print(f"peak: pool {max(held)} positions, sequences {max(tokens)}; contiguous per-slot caches "
      f"{contiguous} ({SLOTS} x {longest}), or {SLOTS * cfg.max_seq} for the full context")
print(f"average over the run: pool {np.mean(held):.0f}, sequences {np.mean(tokens):.0f} "
      f"-> the pool wastes {1 - np.mean(tokens) / np.mean(held):.1%} to block rounding")
print(f"in bytes: pool peak {max(held) * per_position / 1e6:.1f} MB vs contiguous "
      f"{contiguous * per_position / 1e6:.1f} MB")
print(f"share of the memory holding tokens, on average: paged {np.mean(tokens) / np.mean(held):.0%},\n  "
      f"contiguous sized to the longest request {np.mean(tokens) / contiguous:.0%}, "
      f"sized to the context {np.mean(tokens) / (SLOTS * cfg.max_seq):.1%}")

fig, ax = plt.subplots(figsize=(9, 3))
ax.step(range(len(held)), held, where="post", label="paged pool: blocks held x 16")
ax.step(range(len(tokens)), tokens, where="post", label="positions the sequences hold")
ax.axhline(contiguous, color="grey", ls="--", label=f"contiguous: {SLOTS} slots x {longest}")
ax.set_xlabel("step")
ax.set_ylabel("KV positions")
ax.set_ylim(0, 1.15 * contiguous)
ax.legend(fontsize=8, loc="lower left")
ax.set_title("KV-cache memory over the continuous run", fontsize=10)
plt.show()
assert max(held) < contiguous and np.mean(tokens) / np.mean(held) > np.mean(tokens) / contiguous

# %% [markdown]
# **Going deeper: the same share in the vLLM paper.** Kwon et al. ("Efficient Memory Management
# for Large Language Model Serving with PagedAttention", SOSP 2023, Fig. 2) measured it in the
# authors' own re-implementation of Orca under three rules: sized to the maximum length, Orca
# (Max), 20.4 % of the KV memory held tokens; rounded up to a power of two, Orca (Pow2), 26.8 %;
# sized to the true output length, Orca (Oracle), 38.2 %; vLLM, 96.3 %.

# %% [markdown]
# ## 4. Batching never changes a request's tokens
#
# A request's tokens must not depend on who shares its steps. In `Engine(model,
# batch_invariant=True)` every row's arithmetic is independent of the other rows in its step
# (each GEMM runs at a row count where the BLAS computes every row the same way; see notebook 03b),
# so batched and alone must agree bit for bit -- greedy, and sampled with the same per-request
# seed, because each request carries its own random generator.
#
# To make it harder, the pool below has only 6 blocks of 8 positions for three requests that
# need 3 blocks each: when they grow, the newest is **preempted**. Its blocks are freed; when it
# is readmitted, its prompt is prefilled again and the tokens it had already generated go back in
# one per step ("replay"), exactly as they first went in: a decode row and a prefill row compute
# attention differently (one row against the keys, or a masked tile), so feeding those tokens as a
# prompt would give K/V that differ in the last bits.

# %%
engine_bi = Engine(model, batch_invariant=True)
prompts = ["The capital of France is", "Memory bandwidth matters because",
           "Once upon a time, a small robot"]
specs = [(tok.encode(t), 10, SamplingParams(temperature=0.0 if i == 0 else 0.8, top_p=0.9, seed=i))
         for i, t in enumerate(prompts)]
runner_bi = BatchRunner(engine_bi, slots=3, block=8, kv_positions=48, token_budget=128)
reqs_bi = [runner_bi.add(ids, k, params, stop_ids=(), name=name)
           for (ids, k, params), name in zip(specs, ["greedy", "sampled-1", "sampled-2"])]
with stages(prefix="batch-invariant engine") as say:   # a line per step while it runs, gone after
    while runner_bi.scheduler.busy:
        say(f"the 3 requests batched: step {len(runner_bi.history) + 1}")
        runner_bi.step()
    alone = []
    for (ids, k, params), name in zip(specs, ["greedy", "sampled-1", "sampled-2"]):
        say(f"request {name} alone: {k} tokens")
        alone.append(generate(engine_bi, ids, k, params, stop_ids=()).ids)
for r, a, (ids, _, p) in zip(reqs_bi, alone, specs):
    assert r.output == a
    same = sum(x == y for x, y in zip(r.output, a))
    print(f"{r.name}: {len(ids)} prompt tokens, T={p.temperature}, preempted {r.preemptions}x, "
          f"{same} of {len(a)} tokens as alone\n  {tok.decode(r.output)!r}")
n_replay = sum(kind == "replay" for h in runner_bi.history for _, _, kind, _ in h.rows)
assert sum(r.preemptions for r in reqs_bi) >= 1 and n_replay >= 1
print(f"{len(runner_bi.history)} steps, {sum(r.preemptions for r in reqs_bi)} preemption(s), "
      f"{n_replay} replayed token rows; peak {max(h.blocks_used for h in runner_bi.history)} of 6 blocks")

# %% [markdown]
# Why replay instead of one prefill over prompt + generated tokens? That prefill is what vLLM
# does: its recomputation concatenates the generated tokens to the prompt, so that "their KV
# cache at all positions can be generated in one prompt phase iteration" (paper §4.5; the V1
# scheduler sets the preempted request's `num_computed_tokens = 0`, and the resumed request's
# prompt and outputs go back in as prefill chunks). It is fast, but *not* bit-identical to how
# the tokens first went in. Measured: the logits after feeding a prompt and four generated tokens
# as one prompt, against the logits the four decode steps produced. Both are float32 roundings of
# the same function, so they differ, but by less than half the gap between the two largest
# logits: no logit can then overtake the top one, so the pick is the same (a derived bound, not
# a tolerance).

# %%
ids0 = specs[1][0] + alone[1][:4]                         # prompt + 4 generated tokens
c1 = engine_bi.new_cache(64)
with stages(prefix="batch-invariant engine") as say:   # a line per step while it runs, gone after
    say("the prompt's prefill")
    engine_bi.prefill(specs[1][0], c1)
    for i, t in enumerate(alone[1][:4]):
        say(f"decode row {i + 1} of 4")
        decoded = engine_bi.decode(t, c1)                 # 4 decode rows, one per step
    say(f"one prefill of all {len(ids0)} positions")
    prefilled = engine_bi.prefill(ids0, engine_bi.new_cache(64))   # the same positions at once
diff = float(np.abs(decoded - prefilled).max())
top2 = np.sort(prefilled)[-2:]
half_gap = float(top2[1] - top2[0]) / 2                   # the bound that keeps the argmax
assert diff > 0, "decode rows and one prefill agreed bit for bit"
assert diff < half_gap and np.argmax(decoded) == np.argmax(prefilled)
print(f"{len(ids0)} positions: decode rows and one prefill differ (not bit for bit),\nby less "
      f"than half the top-two logit gap, so they pick the same token")

# %%
# NBVAL_IGNORE_OUTPUT
print(f"max |logit difference| {diff:.1e} < half the top-two gap {half_gap:.2f} "
      f"(the difference depends on the machine's BLAS kernels)")

# %% [markdown]
# ### Going deeper: a small CUDA inferencer's batched step, mapped onto the engine
#
# xyg-coder/min_llm_inference is a small CUDA inferencer (one self-attention block, greedy
# decoding) that serves a batch of slots with continuous batching. Its design notes
# (`doc/min_llm_inferencekernels.html`, May 2025, later a PDF, since removed) split the attention
# into five CUDA kernels. Its state: `lengths [b]` (each slot's sequence length, 0 for an empty
# slot), `new_batch_idx` (the slots that received a new prompt), a K cache stored transposed
# (`kt_cache [b, output_dim, s]`) and `v_cache [b, s, output_dim]`. Each kernel is a step of
# `llamanb`'s engine:
#
# | CUDA kernel | what it does | in llamanb |
# |---|---|---|
# | `fill_new_kt_v_cache` | K/V of a newly inserted prompt into its slot | a prefill segment: `cache.write(layer, slot, 0, k, v)` for the prompt's rows |
# | `get_latest_kt_q_v` | Q/K/V of each slot's newest row; K/V appended | a decode segment (one row): its `qkv` row, `cache.write(layer, slot, start, ...)` |
# | `qkt` | `q · Kᵀ` over `lengths[i]` positions | `scores = q @ cache.keys(layer, slot, T).T`, `T = start + 1` |
# | `softmax_in_place_with_lengths` | softmax over the first `lengths[i]` scores, the rest 0 | `softmax_(scores)` over the sequence's own `T` keys |
# | `softmax_v` | probabilities · V | `p @ cache.values(layer, slot, T)` |
#
# `lengths` is `cache.lengths`; a slot listed in `new_batch_idx` is a `Step` segment starting at
# 0. Its decoder multiplies the last hidden rows by the embedding table (a tied head, as in
# SmolLM2), takes the argmax in the same kernel and writes that token's embedding straight into
# the next step's input -- which works, as it says, because the choice is greedy and made on the
# device; `llamanb` samples on the host instead, so each request can have its own temperature and
# seed.
#
# Where its notes and its code disagree, the code is what runs (`docs/corrections.md`, "Batching
# (chapter 10)"). The one that matters for correctness: the notes fill rows `1 .. lengths-1`,
# which would skip position 0; the code fills `0 .. lengths-1`. On the real model: filling
# positions `0 .. n-2` and then running the newest row as a decode gives the prefill's logits; a
# cache whose position 0 was never filled does not.

# %%
engine = Engine(model)
ids = tok.encode("The capital of France is")                 # n = 5 tokens
n = len(ids)
with stages() as say:                                        # a line per run while it runs, gone after
    say("the whole prompt's prefill")
    ref = engine.prefill(ids, engine.new_cache(64))          # [V] the whole prompt at once
    say("rows 0 .. n-2, then the newest row's decode")
    right = engine.new_cache(64)
    engine.forward(ids[:-1], right)                          # fill rows 0 .. n-2
    got = engine.decode(ids[-1], right)                      # then the newest row
    say("the same with position 0 never filled")
    wrong = engine.new_cache(64)
    engine.forward(ids[:-1], wrong)
    wrong.k_all[0, :, :, 0] = 0.0                            # position 0 never filled
    wrong.v_all[0, :, :, 0] = 0.0
    bad = engine.decode(ids[-1], wrong)
assert np.abs(got - ref).max() < 1e-3 and np.argmax(got) == np.argmax(ref)
assert np.abs(bad - ref).max() > 10
print(f"rows 0..n-2 + newest: logits agree with the prefill's to 1e-3, next token "
      f"{tok.decode([int(np.argmax(got))])!r}")
print(f"position 0 missing:   logits off by more than 10, next token "
      f"{tok.decode([int(np.argmax(bad))])!r} instead of {tok.decode([int(np.argmax(ref))])!r}")

# %% [markdown]
# That check is also the design's "only the last position" claim at work: one decode row against
# the cached keys gave the logits of a full prefill. By design rather than by mistake, its K cache
# is transposed (`[b, outputDim, s]`: `q · Kᵀ` reads a row-major `[d, T]` matrix, appending writes
# a strided column; `llamanb` stores `[N_kv, T, d_h]` and hands BLAS the transposed view), its
# attention holds one head where Llama has `N_h` query heads sharing `N_kv` K/V heads, a new
# prompt goes in whole where `llamanb` chunks it, and its cache is contiguous per slot (section
# 3's comparison). Its later paged engine (June 2025) is vLLM's recompute policy, section 2's
# decision 1; `docs/corrections.md` has the details.

# %% [markdown]
# **What you built.** A scheduler that re-decides the batch at every step, admits in arrival
# order when blocks allow, chunks long prompts, and preempts the newest request when memory runs
# out; a paged cache that holds only the blocks sequences use; and the proof that none of it
# changes a single token. `python -m llamanb batch FILE --check` runs the same machinery on a file
# of requests and checks every answer against generating it alone.
#
# **Next — 10b · What batching buys:** the same scheduler, timed on this machine against one
# request at a time.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against the scheduler and the paged cache of this
# chapter. Replace `raise NotImplementedError` with your code and run the cell, then run the check
# below it; it prints one line (`passed`, the first case that differs with a hint, or `not
# attempted yet`). Solutions: `solutions/10_continuous_batching.py`.

# %%
from llamanb.course.exercises import ch10

# %% [markdown]
# ### 10.1 Who gives way
#
# Write `preempt(cached, block, free_blocks)`: the running requests, oldest first, are all
# decoding; request `i` holds `cached[i]` positions in whole blocks of `block` positions, and
# `free_blocks` blocks are free. Return the indices the scheduler preempts before the next step,
# in order. Checked against `Scheduler.schedule()` on the same state. *Hint:* section 2, decision 1.

# %%
def preempt(cached: list[int], block: int, free_blocks: int) -> list[int]:
    raise NotImplementedError  # your code here


# %%
ch10.preempt(preempt)

# %% [markdown]
# ### 10.2 Reading a paged sequence
#
# Write `gather_keys(k_pool, table, n)`: one layer's pool `k_pool [n_blocks, N_kv, block, d]`, a
# sequence's block table, its length `n` -> its keys `[N_kv, n, d]` in position order, as the
# attention reads them. Checked against `PagedKVCache.keys` for sequences whose blocks are
# interleaved in the pool. *Hint:* section 3: where does position `p` live?

# %%
def gather_keys(k_pool: np.ndarray, table: list[int], n: int) -> np.ndarray:   # -> [N_kv, n, d]
    raise NotImplementedError  # your code here


# %%
ch10.gather_keys(gather_keys)
