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
#     builds: greedy, temperature, top-k and top-p against transformers; the token loop
#     modules:
#     - llamanb.engine.sampling
#     - llamanb.engine.generate
#     part: I
# ---

# %% [markdown]
# # 04b · Sampling: from logits to a token
#
# **What you will build.** A sampler: the last step of every decode, which turns the model's `V`
# logits into the next token (notebook 04 ended with those logits). Greedy decoding repeats itself;
# sampling is how a chat model varies its answers, and its settings decide how far. Here you take
# the logits of a real prompt on the embedded SmolLM2-135M-Instruct, derive in numpy every transform
# a sampler applies to them (greedy, temperature, top-k, top-p), check the distributions against
# `llamanb.engine.sampling.next_token_probs` and against transformers' own logits warpers, and draw seeded
# samples to see that `llamanb.engine.sampling.sample` draws from exactly those distributions.
#
# Every claim is an assertion: against transformers, against closed-form probabilities, or against
# binomial error bars on the draws.

# %%
import warnings

warnings.filterwarnings("ignore")

import matplotlib.pyplot as plt
import numpy as np
import torch

from llamanb import Engine, load_model

model = load_model()
engine = Engine(model)                      # the numpy reference backend, float32
tok, V = model.tokenizer, model.config.vocab

# %% [markdown]
# ## 1. The model's next-token distribution
#
# The prompt of notebook 04: after its prefill, the logits for the first answer token. Its top
# candidates are well separated (so the token strings printed here are robust to rounding):

# %%
ids = tok.encode_prompt("Tell me a short story.")                   # [S] token ids
logits0 = engine.prefill(ids, engine.new_cache(64))                 # [V] float32
z = logits0.astype(np.float64)                                      # [V] logits for the first answer token


def softmax(zz: np.ndarray) -> np.ndarray:
    e = np.exp(zz - zz.max())                  # subtracting the max: no overflow, same result
    return e / e.sum()


def fmt(x: float, nd: int = 2) -> str:
    """x rounded to nd decimals, after asserting it is not near a rounding boundary."""
    assert abs(abs(x * 10**nd - np.floor(x * 10**nd)) - 0.5) > 1e-2, x
    return f"{x:.{nd}f}"


p1 = softmax(z)                                 # [V] temperature 1
order = np.argsort(-p1)                         # most likely first
top = order[:20]
assert all(p1[order[i]] - p1[order[i + 1]] > 4e-3 for i in range(4))
for i in order[:5]:
    print(f"{tok.decode([int(i)])!r:8s} p = {fmt(p1[i])}")

# %% [markdown]
# ## 2. Four transforms of the logits
#
# Each sampling setting is a transform of the logits, applied in this order (the order
# `llamanb.engine.sampling` and transformers use):
#
# 1. **Greedy** (`temperature = 0`): all the probability on the arg-max.
# 2. **Temperature** `T`: softmax of `z / T`. `T < 1` sharpens the distribution, `T > 1` flattens
#    it; every token keeps a non-zero probability.
# 3. **Top-k**: keep the `k` largest logits, set the others to `-inf` (probability 0), renormalise.
# 4. **Top-p** (nucleus): sort by probability and keep the smallest prefix whose mass reaches `p`; a
#    token is kept when the mass of the tokens *before* it is still below `p`. Renormalise.
#
# Here they are in numpy, step by step:

# %%
def greedy(zz: np.ndarray) -> np.ndarray:
    out = np.zeros_like(zz)
    out[np.argmax(zz)] = 1.0
    return out


def top_k_filter(zz: np.ndarray, k: int) -> np.ndarray:
    kth = np.sort(zz)[-k]                       # the k-th largest logit
    return np.where(zz >= kth, zz, -np.inf)


def top_p_filter(probs: np.ndarray, p: float) -> np.ndarray:
    idx = np.argsort(-probs)                    # descending
    before = np.cumsum(probs[idx]) - probs[idx]  # mass of the tokens ranked above each one
    keep = np.zeros(probs.size, dtype=bool)
    keep[idx[before < p]] = True
    kept = np.where(keep, probs, 0.0)
    return kept / kept.sum()


def my_probs(zz: np.ndarray, temperature: float, top_k=None, top_p: float = 1.0) -> np.ndarray:
    if temperature == 0:
        return greedy(zz)
    zz = zz / temperature
    if top_k is not None:
        zz = top_k_filter(zz, top_k)
    probs = softmax(zz)
    return top_p_filter(probs, top_p) if top_p < 1 else probs


def top_p_margin(zz: np.ndarray, temperature: float, top_k, top_p: float) -> float:
    """How far the cumulative mass is from p at the cut (a small value would make the count
    of kept tokens depend on rounding)."""
    probs = my_probs(zz, temperature, top_k)
    cum = np.cumsum(np.sort(probs)[::-1])
    return float(np.abs(cum - top_p).min())


# %% [markdown]
# The settings we compare. For the two with top-p we assert that the cumulative mass is at least
# 0.003 away from `p` at the cut, so the number of surviving tokens is not a matter of rounding.

# %%
from llamanb.engine.sampling import SamplingParams, next_token_probs, sample

SETTINGS = {                                    # name: (temperature, top_k, top_p)
    "greedy": (0.0, None, 1.0),
    "T=0.5": (0.5, None, 1.0),
    "T=1": (1.0, None, 1.0),
    "T=1.5": (1.5, None, 1.0),
    "T=1, top-k 5": (1.0, 5, 1.0),
    "T=1, top-p 0.75": (1.0, None, 0.75),
    "T=0.7, top-k 50, top-p 0.9": (0.7, 50, 0.9),
}
probs = {}
for name, (temp, k, p) in SETTINGS.items():
    if p < 1:
        assert top_p_margin(z, temp, k, p) > 3e-3, name
    mine = my_probs(z, temp, k, p)                                          # [V]
    theirs = next_token_probs(logits0, SamplingParams(temperature=temp, top_k=k, top_p=p))
    assert np.array_equal(mine > 0, theirs > 0)                             # the same survivors
    np.testing.assert_allclose(mine, theirs, rtol=1e-9, atol=1e-15)
    probs[name] = theirs
    print(f"{name:28s} surviving tokens: {int((theirs > 0).sum()):6d}   top-1 p = {fmt(theirs.max())}")
for name, (temp, k, p) in SETTINGS.items():                  # what each filter leaves, asserted
    kept = int((probs[name] > 0).sum())
    if temp == 0:
        assert kept == 1
    elif k is None and p == 1:
        assert kept == V                                         # temperature alone filters nothing
    elif k is not None:
        assert kept <= k and (p < 1 or kept == k)

# %% [markdown]
# ## 3. Against transformers' logits warpers
#
# Our numpy transforms and `llamanb.engine.sampling.next_token_probs` agree (same survivors, probabilities
# equal to 1e-9). Temperature alone filters nothing: all `V` tokens keep some probability (asserted
# above), it only moves mass between them. Top-k keeps exactly `k`; top-p keeps as many as the
# shape of the distribution needs.
#
# Now the independent reference: transformers' logits warpers, `TemperatureLogitsWarper`,
# `TopKLogitsWarper` and `TopPLogitsWarper`. Transformers' `generate` applies them in the order
# temperature, top-k, top-p, each to the previous one's output, as we do; greedy in HF is not a
# warper but `argmax` of the scores.

# %%
from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

scores0 = torch.tensor(logits0)[None, :]               # [1, V] float32, as HF sees them
input_ids = torch.tensor([ids])                               # [1, S] (the warpers ignore it)
for name, (temp, k, p) in SETTINGS.items():
    if temp == 0:
        assert int(torch.argmax(scores0)) == int(np.argmax(probs[name]))
        continue
    sc = TemperatureLogitsWarper(float(temp))(input_ids, scores0)               # [1, V]
    if k is not None:
        sc = TopKLogitsWarper(top_k=k, min_tokens_to_keep=1)(input_ids, sc)
    if p < 1:
        sc = TopPLogitsWarper(top_p=p, min_tokens_to_keep=1)(input_ids, sc)
    hf_p = torch.softmax(sc.double(), dim=-1)[0].numpy()       # [V]
    assert np.array_equal(hf_p > 0, probs[name] > 0), name
    np.testing.assert_allclose(hf_p, probs[name], rtol=1e-5, atol=1e-9)
print("transformers' warpers give the same survivors and probabilities (rtol 1e-5) for all",
      len(SETTINGS), "settings")

# %% [markdown]
# > **Going deeper: HF's top-p from the other end.** The warpers live in
# `transformers/generation/logits_process.py`. They take `min_tokens_to_keep` (1 unless beam
# search), which never binds here. HF's top-p removes a token when the mass of it and every *less*
# likely token is at most `1 - p`: our "mass before it is below `p`" seen from the other end, which
# is why the survivors above are the same set.

# %% [markdown]
# ## 4. Drawing
#
# Finally, draw. For each setting, 1000 samples from `np.random.default_rng(0)`. `rng.choice(V,
# size=n, p=probs)` draws exactly what `llamanb.engine.sampling.sample` draws one call at a time from the
# same generator (we check that on the first 100 draws), so this is the sampler `generate` uses.

# %%
N_DRAWS = 1000
params = SamplingParams(temperature=1.0, top_p=0.75)
rng_a, rng_b = np.random.default_rng(0), np.random.default_rng(0)
one_by_one = [sample(logits0, params, rng_a) for _ in range(100)]
batched = rng_b.choice(V, size=100, p=next_token_probs(logits0, params))
assert one_by_one == batched.tolist()

freqs = {}
for name, pr in probs.items():
    draws = np.random.default_rng(0).choice(V, size=N_DRAWS, p=pr)          # [N_DRAWS]
    freqs[name] = np.bincount(draws, minlength=V) / N_DRAWS                 # [V]
    assert pr[draws].min() > 0                                               # never a filtered token
    sigma = np.sqrt(pr[top] * (1 - pr[top]) / N_DRAWS)                      # binomial std, top 20
    assert np.all(np.abs(freqs[name][top] - pr[top]) <= 4 * sigma + 1e-9), name
print("every draw is a surviving token, and every top-20 frequency is within 4 sigma of its"
      " probability, for all", len(probs), "settings")

# %% [markdown]
# The top 20 tokens (ranked at temperature 1) under each setting: bars are the probabilities the
# sampler uses, dots the frequencies in 1000 seeded draws.

# %%
labels = [tok.decode([int(i)]).replace("\n", "\\n") for i in top]
fig, axes = plt.subplots(2, 4, figsize=(9.6, 6.4), sharey=True)
for ax, (name, pr) in zip(axes.flat, probs.items()):
    ax.bar(np.arange(20), pr[top], color="#4c72b0", label="probability")
    ax.plot(np.arange(20), freqs[name][top], "o", color="black", ms=3, label="frequency (1000 draws)")
    n_kept = int((pr > 0).sum())
    kept = "1 token survives" if n_kept == 1 else f"{n_kept} tokens survive"
    ax.set_title(f"{name}\n{kept}", fontsize=9)
    ax.set_xticks(np.arange(20))
    ax.set_xticklabels(labels, rotation=90, fontsize=7)
axes.flat[-1].axis("off")
axes.flat[0].legend(fontsize=7)
axes[0, 0].set_ylabel("p")
axes[1, 0].set_ylabel("p")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## Summary
#
# * A sampler is a transform of the logits, then one draw: greedy (`temperature = 0`, the arg-max),
#   temperature (softmax of `z / T`), top-k (the `k` largest logits), top-p (the smallest most-likely
#   prefix whose mass reaches `p`, the token that crosses `p` kept), applied in that order.
# * `llamanb.engine.sampling.next_token_probs(logits, SamplingParams(...))` gives the distribution and
#   `sample(logits, params, rng)` draws from it; both agree with our numpy derivation (to 1e-9) and
#   with transformers' `TemperatureLogitsWarper`, `TopKLogitsWarper`, `TopPLogitsWarper` (1e-5).
# * Seeded draws never pick a filtered token, and their frequencies sit within 4 binomial standard
#   deviations of the probabilities.
#
# **Next — 04c · What the KV cache costs:** the memory the cache of notebook 04 takes, per token,
# per model and per batch, and when it outweighs the weights.

# %% [markdown]
# ## Exercises
#
# Two functions to write; each is checked against the finished code in `llamanb`. Replace
# `raise NotImplementedError` with your code and run the cell, then run the check below it; it
# prints one line (`passed`, the first case that differs with a hint, or `not attempted yet`).
# Solutions: `solutions/04b_sampling.py`.

# %%
from llamanb.course.exercises import ch04b

# %% [markdown]
# ### 04b.1 Top-p
#
# Write `top_p_probs(logits, top_p)`: `logits [V]` -> `[V]` float64, the softmax restricted to the
# smallest set of most likely tokens whose probability reaches `top_p`, renormalised (temperature
# 1, no top-k). Checked against `llamanb.engine.sampling.next_token_probs`, including a case exactly on a
# boundary. *Hint:* section 2; is the token that crosses `top_p` kept?

# %%
def top_p_probs(logits: np.ndarray, top_p: float) -> np.ndarray:    # [V] -> [V] float64
    raise NotImplementedError  # your code here


# %%
ch04b.top_p_probs(top_p_probs)

# %% [markdown]
# ### 04b.2 Temperature, then top-k
#
# Write `top_k_probs(logits, temperature, k)`: `logits [V]` -> `[V]` float64, the softmax of
# `logits / temperature` restricted to the `k` largest logits and renormalised (no top-p). Checked
# against `llamanb.engine.sampling.next_token_probs`. *Hint:* section 2; which comes first, the division
# or the filter, and does the order matter for which tokens survive?

# %%
def top_k_probs(logits: np.ndarray, temperature: float, k: int) -> np.ndarray:   # [V] -> [V] float64
    raise NotImplementedError  # your code here


# %%
ch04b.top_k_probs(top_k_probs)
