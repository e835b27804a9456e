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
#     builds: a padded prefill that gives the unpadded bits, and a one-row LM head
#     modules:
#     - llamanb.engine.engine
#     - llamanb.engine.step
#     part: I
# ---

# %% [markdown]
# # 03b · Padded prefill is byte-identical
#
# **What you will build.** A padded prefill that gives exactly the bits of an unpadded one.
# Compiled accelerator kernels have fixed shapes, so a prompt is padded with EOS to a fixed length,
# run whole, and read at its last real row; if padding moved a single bit, every accelerator
# chapter's comparison against the CPU would have to be a tolerance instead of an equality.
# Notebook 03 showed that only attention mixes positions and that the causal mask hides the
# future. Here you prove that prefill padded with EOS gives **byte-identical** hidden states and
# logits at the real positions — and see why the causal mask alone does not guarantee that in
# floating point. Two consequences follow: the real prompt length must be carried alongside the
# padded ids (a chat prompt contains EOS tokens of its own), and only the last real row needs the
# LM head.
#
# Every claim below is an assertion: bit for bit against an unpadded run, against closed-form
# arithmetic, or within an error bound derived beside it.

# %%
import warnings

warnings.filterwarnings("ignore")

import os

os.environ.setdefault("TQDM_DISABLE", "1")

import time

import numpy as np

from llamanb import Engine, load_model, pad_to
from llamanb.model.numerics import gamma, matmul_bound
from llamanb.platform.progress import stages

model = load_model()
cfg = model.config
W = model.weights
tok = model.tokenizer
engine = Engine(model)
EOS = cfg.eos_ids[0]
print("EOS id:", EOS, repr(tok.decode([EOS])))


def rms_norm(x, w, eps):
    """x [S, H] / sqrt(mean over H of x^2 + eps) * w [H]: one row at a time (notebook 01)."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + np.float32(eps)) * w

# %% [markdown]
# ## 1. Padded prefill is byte-identical
#
# Compiled accelerator kernels have fixed shapes, so a prompt of `n` tokens is padded to a fixed
# length `P` with EOS tokens, the whole `P` rows are run, and the output is read at row `n - 1`.
# Padding is a few lines; we write it and check it against `llamanb.engine.engine.pad_to`.

# %%
def pad_with(token_ids, length, pad_id):
    """token_ids right-padded with pad_id to `length`; the real length is returned alongside."""
    assert len(token_ids) <= length
    padded_ids = list(token_ids) + [pad_id] * (length - len(token_ids))
    return np.array(padded_ids, dtype=np.int64), len(token_ids)


chat = tok.encode_prompt("Why is the sky blue? Answer in two short sentences.")
padded, n = pad_with(chat[:13], 64, EOS)
print("13 real tokens padded to 64:", padded[:16].tolist(), "...")
ref_padded, ref_n = pad_to(chat[:13], 64, EOS)
assert np.array_equal(padded, ref_padded) and n == ref_n == 13

# %% [markdown]
# Now the proof. For real lengths 5, 13 and 40 (prefixes of a chat prompt), run `Engine.prefill`
# on the unpadded ids, then on the ids padded to 64 and to 128 with `real_len=n`. `collect=`
# returns the embedding and every block's output (31 `[n, H]` arrays, cut to the real rows); the
# return value is the next-token logits. Every one of them must be equal **byte for byte**.

# %%
def prefill_states(token_ids, real_len=None):
    cache = engine.new_cache(128)
    states = []
    logits = engine.prefill(token_ids, cache, real_len=real_len, collect=states)
    return logits, states


print(f"{'real n':>6} {'padded to':>9} {'last real row, all 31 states':>29} {'all real rows':>13} "
      f"{'logits':>6} {'next token':>10}")
proof = []
with stages() as say:                                         # a line per prefill, gone after
    for n in (5, 13, 40):
        say(f"prefill of the {n} real tokens, unpadded")
        logits_ref, states_ref = prefill_states(chat[:n])
        for P in (64, 128):
            say(f"prefill of the {n} real tokens padded to {P}")
            padded, real_len = pad_to(chat[:n], P, EOS)
            logits_pad, states_pad = prefill_states(padded, real_len=real_len)
            last_row = all(np.array_equal(a[n - 1], b[n - 1]) for a, b in zip(states_pad, states_ref))
            all_rows = all(np.array_equal(a, b) for a, b in zip(states_pad, states_ref))
            same_logits = np.array_equal(logits_pad, logits_ref)
            nxt = repr(tok.decode([int(np.argmax(logits_pad))]))
            proof.append((last_row, all_rows, same_logits, len(states_pad) == cfg.n_layers + 1))
            print(f"{n:>6} {P:>9} {'equal' if last_row else 'DIFFER':>29} {'equal' if all_rows else 'DIFFER':>13} "
                  f"{'equal' if same_logits else 'DIFFER':>6} {nxt:>10}")
assert all(all(r) for r in proof)                             # every cell of the table: equal

# %% [markdown]
# **Why "the mask makes it exact" is not the whole argument.** The tempting proof: only attention
# crosses positions (notebook 03, section 3), and attention is causally masked, so the padding rows
# can never reach a real row. That is an argument in exact arithmetic; in float32 the last bits of
# a result also depend on the *order* in which its terms are added — and that order can depend on
# the shape, which padding changes. Float32 addition is not associative:

# %%
a, b, c = np.float32(1.0), np.float32(1e8), np.float32(-1e8)
left, right = (a + b) + c, a + (b + c)
print("(1 + 1e8) - 1e8 =", left, "   1 + (1e8 - 1e8) =", right)
assert left == 0.0 and right == 1.0                           # 1e8 + 1 rounds back to 1e8

# %% [markdown]
# A reduction whose grouping depends on the length of its input therefore changes when zeros are
# appended, even though the zeros contribute nothing. Below is a pairwise (tree) sum that splits
# its input in half — numpy's summation along a contiguous axis is pairwise in the same spirit, and
# BLAS kernels block their sums in their own ways — and an in-order sum. Masked keys contribute
# exact zeros (`exp(-inf) = 0`): appending one changes the tree sum, never the in-order one
# (`x + 0` is exactly `x`).

# %%
def tree_sum(xs):
    if len(xs) == 1:
        return xs[0]
    m = len(xs) // 2
    return tree_sum(xs[:m]) + tree_sum(xs[m:])


def in_order_sum(xs):
    total = np.float32(0.0)
    for x in xs:
        total = total + x
    return total


terms = [np.float32(1.0), np.float32(1e8), np.float32(-1e8)]
zero = [np.float32(0.0)]
print("tree sum:     3 terms ->", tree_sum(terms), "  same 3 terms + one zero ->",
      tree_sum(terms + zero))
print("in-order sum: 3 terms ->", in_order_sum(terms), "  same 3 terms + one zero ->",
      in_order_sum(terms + zero))
assert tree_sum(terms) == 1.0 and tree_sum(terms + zero) == 0.0
assert in_order_sum(terms) == in_order_sum(terms + zero)

rng = np.random.default_rng(0)
changed = {"in-order": 0, "tree": 0}
for trial in range(20):                                       # random terms, 1..60 zeros appended
    xs = [np.float32(t) for t in rng.standard_normal(int(rng.integers(2, 40)))]
    zs = [np.float32(0.0)] * int(rng.integers(1, 61))
    assert in_order_sum(xs) == in_order_sum(xs + zs)
    changed["in-order"] += int(in_order_sum(xs) != in_order_sum(xs + zs))
    changed["tree"] += int(tree_sum(xs) != tree_sum(xs + zs))
print("20 random trials with zeros appended; sums whose bits changed:", changed)

# %% [markdown]
# The in-order sum is not more *accurate* (it returns 0 where the exact sum is 1); it is *stable*:
# its grouping is fixed by the order of the terms, so trailing zeros cannot change it.

# %% [markdown]
# Where this bites in a real prefill:
#
# - **BLAS picks its kernel by matrix size.** OpenBLAS computes a product with one row as a
#   matrix-vector product (GEMV), small products (below roughly a million multiply-adds) with a
#   dedicated small-matrix kernel, and larger ones with the blocked GEMM. The kernels group the
#   sum over the inner dimension differently, so the same row of `x @ W` can come out a few ulp
#   apart depending on how many *other* rows were in the matrix. Padding changes the number of
#   rows, so it can change the kernel. (Which kernel wins where depends on the BLAS build and the
#   CPU; this notebook does not print it as a fact, it only relies on the end-to-end assertion.)
# - **A sum over keys regroups when the key axis grows.** The attention over `n` keys and over `P`
#   keys (with `P - n` masked) must add the same real terms in the same order; a pairwise sum
#   over the contiguous key axis does not.
#
# So llamanb's numpy backend (`llamanb/engine/numpy_backend.py`) is built so that no shape a real
# row goes through depends on how much padding follows it:

# %%
from llamanb.engine.numpy_backend import BLOCK_Q, KEY_TILE, NumpyBackend

print("BLOCK_Q  =", BLOCK_Q, " query rows per attention tile (short blocks are zero-filled)")
print("KEY_TILE =", KEY_TILE, " keys per tile: key ranges are rounded up and the rest masked")
backend = engine.backend
m = backend.row_multiple
assert m in (8, 48)                                   # which one depends on this machine's CPU
print("prefill rows padded to a multiple of row_multiple: 8 or 48, by BLAS kernel family (asserted)")


def key_range(rows_):
    return -(-rows_ // KEY_TILE) * KEY_TILE                   # keys rounded up to a whole tile


for n, P in [(5, 64), (13, 64), (40, 128)]:
    rows_unpadded, rows_padded = -(-n // m) * m, -(-P // m) * m
    assert key_range(rows_unpadded) == key_range(rows_padded) == key_range(P)
    print(f"n = {n:>2}: attention tile {key_range(P)} keys x {BLOCK_Q} query rows, "
          f"unpadded and padded to {P} alike")

# %% [markdown]
# - Attention runs in tiles of a fixed shape: `BLOCK_Q = 128` query rows (a short block is
#   zero-filled) against a key range rounded up to a multiple of `KEY_TILE = 256` (the extra keys
#   masked). An unpadded 13-token prompt and the same prompt padded to 128 run the *same* GEMMs.
# - The softmax sums over keys along a non-contiguous axis, where numpy adds strictly in key order:
#   the masked keys come last and add exact zeros.
# - The projections and the MLP are ordinary GEMMs, and the engine runs prefill with a row count
#   that is a multiple of `Backend.row_multiple` (the extra rows are padding rows: computed, but
#   never written to the cache and never attended to). How many rows is enough depends on the BLAS
#   kernels (the sidebar below).
#
# The causal mask is what makes padding *correct*; these choices are what make it *exact*. Without
# them the padded and unpadded runs would still agree to a tolerance — almost always close enough
# to pick the same token — but byte-identity would rest on luck (on which kernels a given BLAS picks
# for which shapes), not on construction.

# %% [markdown]
# > **Going deeper: where the mask argument comes from, and the row multiple.** The MLIR-AIR
# > Llama-3.2-1B guide (Xilinx/mlir-air,
# > `programming_examples/llms/llama32_1b/docs/detail/IMPLEMENTATION_GUIDE.html`, part A6) answers
# > "Does padding affect the math at real positions?" with "No. The hidden state at pred_pos =
# > prompt_len − 1 is bit-identical to what you'd get if you ran with seq=prompt_len instead of
# > seq=2048", because "of the 14 ops in a transformer block (Part A2), only attention crosses
# > positions" and "attention is causally masked": the exact-arithmetic argument above, which in
# > float32 needs the shape choices of this section as well.
# >
# > The row multiple was measured by forcing each of OpenBLAS's kernel families with
# > `OPENBLAS_CORETYPE`: with the AVX-512 kernels (`SkylakeX`, `SapphireRapids`, ...) every row of a
# > GEMM comes out the same for any row count from 8 up (below that a small-matrix kernel takes
# > over); with the `Haswell`/`Zen` kernels that most laptops run, only for row counts that are
# > multiples of 48 — the last rows of a ragged matrix go through narrower edge kernels that sum in
# > another order. The backend picks 8 or 48 from the kernel family OpenBLAS reports (48 when it
# > cannot tell), and the test suite repeats the padding proof under both families
# > (`tests/test_engine.py::test_padding_is_byte_identical_under_other_blas_kernels`).

# %% [markdown]
# ## 2. A prompt that contains EOS: carry the length, never count it
#
# With padded ids in hand, where is the last real token? A tempting rule recovers the length by
# counting the tokens that are not EOS, which assumes the real prompt contains none. For a chat
# prompt the assumption fails: every ChatML turn ends with `<|im_end|>`, SmolLM2's EOS. Even the
# one-question prompt of section 1 contains some (the default system turn and the user turn); a
# conversation contains one per turn (the cell prints both counts).

# %%
conversation = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Italy?"},
]
conv = tok.apply_chat_template(conversation)
n_real = len(conv)
print("one-question prompt:", chat.count(EOS), "EOS tokens in", len(chat))
print("conversation:       ", conv.count(EOS), "EOS tokens in", n_real,
      "at positions", [i for i, t in enumerate(conv) if t == EOS])

padded, _ = pad_to(conv, 64, EOS)
counted = int(np.sum(padded != EOS))                          # the counting rule
print("real length:", n_real, "| length recovered by counting non-EOS tokens:", counted)
print("the prompt ends, by the count:     ...", repr(tok.decode(conv[counted - 8:counted])))
print("the prompt ends, by the real length:...", repr(tok.decode(conv[n_real - 8:n_real])))
assert counted == n_real - conv.count(EOS) != n_real

# %% [markdown]
# Run prefill three ways: unpadded (the reference), padded with the real length carried, and padded
# with the counted length.

# %%
with stages() as say:                                         # a line per prefill, gone after
    say(f"prefill of the {n_real}-token conversation, unpadded")
    logits_ref, _ = prefill_states(conv)
    say("prefill of the conversation padded to 64, the real length carried")
    logits_carried, _ = prefill_states(padded, real_len=n_real)
    say("prefill of the conversation padded to 64, the counted length")
    logits_counted, _ = prefill_states(padded, real_len=counted)
for label, lg in [("unpadded", logits_ref), ("padded, real_len carried", logits_carried),
                  ("padded, length counted", logits_counted)]:
    print(f"{label:<25} next token {int(np.argmax(lg)):>5} {tok.decode([int(np.argmax(lg))])!r}")
assert np.array_equal(logits_carried, logits_ref)
assert not np.array_equal(logits_counted, logits_ref)
assert np.abs(logits_counted - logits_ref).max() > 1.0        # not rounding: a different position
assert int(np.argmax(logits_counted)) != int(np.argmax(logits_ref))

# %% [markdown]
# The counted length stops as many rows early as the prompt holds EOS tokens, where the prompt
# seems to end after the user's `<|im_end|>`: the model sensibly predicts the start of a new turn
# instead of the answer. It would also start decode at the wrong cache position, overwriting the
# keys and values of the last real tokens. The fix is bookkeeping, not arithmetic: return the real
# length together with the padded ids (`pad_to` does) and pass it on
# (`Engine.prefill(..., real_len=n)`).

# %% [markdown]
# > **Going deeper: who counts, who carries.** The MLIR-AIR Llama-3.2-1B guide
# > (`IMPLEMENTATION_GUIDE.html`, part A5) recovers the length inside prefill by counting:
# > "prompt_len = len([t for t in token_ids if t != tokenizer.eos_token_id])", with the caveat
# > "this assumes the real prompt does NOT contain any EOS tokens. For typical text inputs that's
# > true. The instruct chat template uses <|begin_of_text|>, <|start_header_id|>, etc. — none of
# > which are EOS". That template closes every message with `<|eot_id|>`, one of Llama-3.2-1B's end
# > ids (the cell below) and the very token the guide's own decode loop stops on; whether counting
# > survives then depends on which end id happens to be used for padding — a fragile thing to rest
# > correctness on. The design notes of min_llm_inference (xyg-coder/min_llm_inference, a small CUDA
# > inferencer with continuous batching) carry it instead: "`lengths`: The sequence length of each
# > batch", a tensor that travels with the batch and bounds the softmax — the design `pad_to` follows.

# %%
from llamanb.model.config import LLAMA32_1B

eot = 128009                                                  # <|eot_id|> in Llama 3's tokenizer
assert eot in LLAMA32_1B.eos_ids
print("Llama-3.2-1B end-of-sequence ids:", LLAMA32_1B.eos_ids, f"({eot} = <|eot_id|>)")

# %% [markdown]
# ## 3. The LM head needs one row
#
# Prefill produces a hidden state for every position, but the next token depends only on the last
# real one. The final norm and LM head (`[H] -> [V]`, a `V x H` matrix) are row-local, so running
# them on row `n - 1` alone gives that row's logits and skips the rest. The saving is
# `2 H V (S - 1)` FLOPs and an `[S - 1, V]` block of logits never written.

# %%
from llamanb.model.config import human_bytes


def head_savings(c, S_):
    flops_all, flops_one = 2 * c.hidden * c.vocab * S_, 2 * c.hidden * c.vocab
    return flops_all, flops_one, flops_all - flops_one


for c, S_ in [(cfg, 64), (LLAMA32_1B, 2048)]:
    f_all, f_one, saved = head_savings(c, S_)
    assert saved == 2 * c.hidden * c.vocab * (S_ - 1)
    print(f"{c.name} (H = {c.hidden}, V = {c.vocab}), S = {S_}:")
    print(f"  LM head FLOPs all rows {f_all:,}  one row {f_one:,}  saved {saved:,} ({S_}x fewer)")
    for fmt, nbytes in [("fp32", 4), ("bf16", 2)]:
        print(f"  logits [S, V] in {fmt}: {human_bytes(S_ * c.vocab * nbytes):>10}  "
              f"one row: {human_bytes(c.vocab * nbytes):>10}  "
              f"saved: {(S_ - 1) * c.vocab * nbytes:,} bytes")

# %% [markdown]
# The ratio of the two FLOP counts is exactly `S`. (The MLIR-AIR Llama-3.2-1B guide, part A7, gives
# the same two Llama-3.2-1B numbers rounded: "full-seq LM Head (2048, 2048) @ (2048, 128256) =
# (2048, 128256) ≈ 1 TFLOP" against "single-row GEMV (1, 2048) @ (2048, 128256) = (1, 128256) ≈ 0.5
# GFLOP".)
#
# On the embedded model: the final hidden rows of a prompt padded to 64, through the head all at
# once and one row only. `Backend.head` is what `Engine.prefill` calls, with one row.

# %%
padded, n = pad_to(chat[:40], 64, EOS)
with stages() as say:                                         # a line while it runs, gone after
    say("the 40 real tokens padded to 64 through the blocks, then the LM head on all rows and on one")
    x_final = engine.forward(padded, engine.new_cache(64))    # [64, H], before the final norm
    logits_all = engine.backend.head(x_final)                 # [64, V]
    logits_one = engine.backend.head(x_final[n - 1:n])        # [1, V]
print("all rows", logits_all.shape, "| one row", logits_one.shape, "| the head's matrix [H, V]:",
      engine.backend.lm_head_t.shape, engine.backend.lm_head_t.dtype, human_bytes(engine.backend.lm_head_t.nbytes))

# our own one-row head: final RMSNorm, then the (tied) LM head matrix
ours_one = rms_norm(x_final[n - 1:n], W.final_norm, cfg.rms_eps) @ W.lm_head.T     # [1, V]
# The tolerance, derived: each side is a float32 dot product of length H over the normalised row,
# within gamma_H |x||w| of the exact one whatever order its kernel sums in (a GEMV and a GEMM row
# sum differently); each side's RMSNorm scales the row within gamma_(H+3) of exact. So the two
# differ by at most 2 (gamma_H + gamma_(H+3)) |x||W|^T per logit, on any CPU.
xn = rms_norm(x_final[n - 1:n], W.final_norm, cfg.rms_eps)
head_bound = 2 * (1 + gamma(cfg.hidden + 3) / gamma(cfg.hidden)) * matmul_bound(xn, W.lm_head.T)[0]
err_rows = np.abs(logits_one[0] - logits_all[n - 1])
err_ours = np.abs(ours_one[0] - logits_one[0])
assert (err_rows <= head_bound).all() and (err_ours <= head_bound).all()
print(f"one row vs row n-1 of all rows, and ours vs llamanb: within the derived bound\nat every one of "
      f"{cfg.vocab} logits (logits up to {np.abs(logits_one).max():.0f})")
print("next token, one row:", int(np.argmax(logits_one[0])), "  all rows:", int(np.argmax(logits_all[n - 1])))

# %%
# NBVAL_IGNORE_OUTPUT
print(f"max |one row - row n-1 of all rows|: {err_rows.max():.1e}   largest bound {head_bound.max():.1e}")
print(f"max |our one-row head - llamanb|:    {err_ours.max():.1e}")
assert int(np.argmax(logits_one[0])) == int(np.argmax(logits_all[n - 1]))

# %% [markdown]
# Equal to a tolerance, not byte for byte, and for the reason of section 1: one row goes through
# BLAS's matrix-vector kernel (and the one-row RMSNorm is a dot product), 64 rows through the GEMM,
# which sum in a different order — on the machine that built this notebook the two differ in the
# last bits. That is harmless here because `Engine.prefill` always takes the one-row path, padded or
# not, so the logits of section 1 were compared path for path. The time saved on this machine
# (medians of 7):

# %%
# NBVAL_IGNORE_OUTPUT
def median_ms(fn, repeats=7):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


t_all = median_ms(lambda: engine.backend.head(x_final))
t_one = median_ms(lambda: engine.backend.head(x_final[n - 1:n]))
print(f"LM head, all 64 rows: {t_all:.2f} ms   one row: {t_one:.2f} ms   ratio {t_all / t_one:.1f}x")

# %% [markdown]
# 64 times fewer FLOPs, but nowhere near 64 times faster: the FLOP count says what the head
# *computes*, not what it must *read*. Every call, one row or 64, needs the whole `[H, V]` matrix
# (its size printed above, far larger than any cache), so each call streams it from memory once. One row does only 2 multiply-add FLOPs per 4-byte weight read: the core waits for memory
# (a matrix-vector product, GEMV, is *memory-bound*), and its time is the matrix's bytes divided by
# the memory bandwidth. With 64 rows each weight, once loaded, is used 64 times (a matrix-matrix
# product, GEMM): the same read now feeds 64 times the arithmetic, and the time becomes the FLOPs
# divided by what the cores can compute. The ratio of the two times is therefore not 64 but
#
# $$\frac{t(64)}{t(1)} \approx \frac{64 \cdot 2HV \,/\, \text{GEMM FLOP/s}}{4HV \,/\, \text{memory bandwidth}}
# = \frac{32 \cdot \text{memory bandwidth (B/s)}}{\text{GEMM FLOP/s}} ,$$
#
# a property of the machine. Measure all three on this one: the head for 1 to 64 rows (achieved
# FLOP rate and matrix-read rate), and a large square GEMM as the machine's arithmetic rate.

# %%
# NBVAL_IGNORE_OUTPUT
head_bytes = engine.backend.lm_head_t.nbytes                  # [H, V] float32, read by every call
row_flops = 2 * cfg.hidden * cfg.vocab                         # per row
sweep = [1, 2, 4, 8, 16, 32, 64]
print(f"{'rows':>4} {'ms':>7} {'GFLOP/s':>8} {'matrix read, GB/s':>18}")
t_rows = []
for r in sweep:                                                # each row printed as it is measured
    t_rows.append(t := median_ms(lambda r=r: engine.backend.head(x_final[:r])))
    print(f"{r:>4} {t:7.2f} {r * row_flops / t / 1e6:8.1f} {head_bytes / t / 1e6:18.1f}", flush=True)
a_sq = np.ones((1024, 1024), dtype=np.float32)
gemm_rate = 2 * 1024**3 / median_ms(lambda: a_sq @ a_sq) / 1e6            # GFLOP/s
bandwidth = head_bytes / t_rows[0] / 1e6                                    # GB/s, one row
print(f"square 1024 x 1024 GEMM: {gemm_rate:.0f} GFLOP/s;  one row reads the matrix at "
      f"{bandwidth:.1f} GB/s")
print(f"predicted t(64) / t(1) = 32 x {bandwidth:.1f} / {gemm_rate:.0f} = "
      f"{32 * bandwidth / gemm_rate:.1f}x   measured {t_rows[-1] / t_rows[0]:.1f}x   FLOP ratio 64x")

# %% [markdown]
# The timings drift with the machine's load (the cell above is not compared), but the reason stays:
# one row costs one read of the matrix, 64 rows cost their arithmetic. Decode is made only of
# one-row products, which is why it is memory-bound (notebook 04).

# %% [markdown]
# ## Summary
#
# - **Padded prefill is byte-identical** at every real row, every layer, and in the logits —
#   because of the mask *and* because the backend runs fixed-shape attention tiles (`BLOCK_Q`,
#   `KEY_TILE`), sums keys in order (`softmax_` over axis -2) and pads prefill to a row count the
#   BLAS kernels treat uniformly (`row_multiple`). The causal-mask argument alone (the MLIR-AIR
#   guide's) does not give bit-identity in float32: a sum regrouped by its length changes its bits.
# - **Carry the real length** (`llamanb.engine.engine.pad_to` returns it; `Engine.prefill(ids, cache,
#   real_len=n)` takes it): a chat prompt contains EOS, and counting non-EOS tokens picks the wrong
#   row and the wrong token.
# - **One-row LM head**: `Engine.prefill` runs `Backend.head` on row `n - 1` only, saving
#   `2 H V (S - 1)` FLOPs and the `[S - 1, V]` logits; 64 times fewer FLOPs is not 64 times faster,
#   because a GEMV waits for memory and a GEMM for arithmetic.
#
# **Next — 04 · KV cache growth:** the K/V tensors computed here are kept in a cache so that decode
# runs one new row per token; its layout, its growth and its cost.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against a reference computed another way. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it; it
# prints one line (`passed`, the first case that differs with a hint, or `not attempted yet`).
# Solutions: `solutions/03b_padded_prefill.py`.

# %%
from llamanb.course.exercises import ch03b

# %% [markdown]
# ### 03b.1 Padding, with the length carried
#
# Write `pad_prompt(ids, length, pad_id)`: the ids right-padded with `pad_id` to `length`, as an
# int64 array, and the real length beside it -- `(padded [length], n)`. Checked against
# `llamanb.engine.engine.pad_to`, on prompts that contain `pad_id` themselves. *Hint:* section 2; where
# does the real length come from?

# %%
def pad_prompt(ids: list[int], length: int, pad_id: int) -> tuple[np.ndarray, int]:
    raise NotImplementedError  # your code here


# %%
ch03b.pad_prompt(pad_prompt)

# %% [markdown]
# ### 03b.2 A sum that trailing zeros cannot change
#
# Write `in_order_sum(xs)`: `xs [n]` float32 -> the float32 sum of its terms added strictly from
# left to right, so that appending zeros (masked keys) never changes a bit. Checked exactly, bit
# for bit, against a left-to-right accumulation. *Hint:* section 1; why does `np.sum` not do?

# %%
def in_order_sum(xs: np.ndarray) -> np.float32:
    raise NotImplementedError  # your code here


# %%
ch03b.in_order_sum(in_order_sum)
