"""Choosing the next token from logits: the sampling settings, the distribution they define, and
the one object that owns a random stream.

    params  = SamplingParams(temperature=0.7, top_k=40, top_p=0.9, seed=1)
    sampler = Sampler(params, exempt=eos_ids)      # the only np.random.Generator of a sequence
    token   = sampler(logits, history)             # repeat penalty over history, then a draw

Every path samples through a Sampler: single-stream generation, a chat (one Sampler for the whole
conversation), each request of the batching server (its own Sampler, so a request draws the same
tokens whatever else shares its steps). Greedy (temperature 0) takes the argmax and draws nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.model.token_ids import is_int


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0        # 0 -> greedy
    top_k: int | None = None        # keep the k most likely tokens
    top_p: float = 1.0              # keep the smallest set whose probability reaches top_p
    seed: int | None = 0            # None: a fresh seed from the OS for every Sampler
    repeat_penalty: float = 1.0     # 1 = off; llama.cpp's --repeat-penalty (see repeat_penalty())
    repeat_last_n: int = 64         # ... over the last this many tokens (its --repeat-last-n)

    def __post_init__(self):
        t, k, p, seed = self.temperature, self.top_k, self.top_p, self.seed
        if not _is_real(t) or not 0 <= t < float("inf"):          # also rejects NaN
            raise LlamanbError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if k is not None and (not is_int(k) or k < 1):
            raise LlamanbError(f"top_k must be None (off) or an integer >= 1, got {k!r}")
        if not _is_real(p) or not 0 < p <= 1:
            raise LlamanbError(f"top_p must be a number in (0, 1] (1 = off), got {p!r}")
        if seed is not None and (not is_int(seed) or seed < 0):
            raise LlamanbError(f"seed must be None or an integer >= 0, got {seed!r}")
        rp, n = self.repeat_penalty, self.repeat_last_n
        if not _is_real(rp) or not 1.0 <= rp < float("inf"):
            raise LlamanbError(f"repeat_penalty must be a number >= 1 (1 = off), got {rp!r}")
        if not is_int(n) or n < 1:
            raise LlamanbError(f"repeat_last_n must be an integer >= 1, got {n!r}")
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_p", float(p))
        object.__setattr__(self, "top_k", None if k is None else int(k))
        object.__setattr__(self, "seed", None if seed is None else int(seed))
        object.__setattr__(self, "repeat_penalty", float(rp))
        object.__setattr__(self, "repeat_last_n", int(n))


def next_token_probs(logits: np.ndarray, p: SamplingParams) -> np.ndarray:
    """The distribution a sampler draws from, after temperature, top-k and top-p. [V] float64."""
    z = np.asarray(logits, dtype=np.float64)
    if p.temperature == 0:
        out = np.zeros_like(z)
        out[int(np.argmax(z))] = 1.0
        return out
    z = z / p.temperature
    if p.top_k is not None and p.top_k < z.size:
        kth = np.partition(z, -p.top_k)[-p.top_k]
        z = np.where(z >= kth, z, -np.inf)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    if p.top_p < 1.0:
        order = np.argsort(-probs, kind="stable")
        cum = np.cumsum(probs[order])
        keep = cum - probs[order] < p.top_p          # tokens needed before reaching top_p
        mask = np.zeros_like(probs, dtype=bool)
        mask[order[keep]] = True
        probs = np.where(mask, probs, 0.0)
        probs /= probs.sum()
    return probs


def sample(logits: np.ndarray, p: SamplingParams, rng: np.random.Generator) -> int:
    """One token from next_token_probs(logits, p), drawn with rng (greedy: the argmax, no draw)."""
    if p.temperature == 0:
        return int(np.argmax(logits))
    probs = next_token_probs(logits, p)
    return int(rng.choice(probs.size, p=probs))


def repeat_penalty(logits: np.ndarray, recent, penalty: float, exempt=frozenset()) -> np.ndarray:
    """llama.cpp's repeat penalty (its --repeat-penalty; the same rule as transformers'
    RepetitionPenaltyLogitsProcessor, there over every earlier token): each distinct token of
    `recent` except the `exempt` ones (end-of-turn ids, so that an answer can always end) has its
    logit divided by the penalty when positive, multiplied when negative. penalty 1: logits as
    they are (the same object)."""
    if penalty == 1.0:
        return logits
    seen = np.array(sorted(set(int(t) for t in recent) - set(exempt)), dtype=np.int64)
    if seen.size == 0:
        return logits
    out = np.array(logits, dtype=np.float32)
    v = out[seen]
    out[seen] = np.where(v > 0, v / penalty, v * penalty)
    return out


class Sampler:
    """SamplingParams and the random stream drawn from them (seeded once, from params.seed): the
    one owner of a sequence's randomness. Calling it picks the next token."""

    def __init__(self, params: SamplingParams = SamplingParams(), exempt=()):
        if not isinstance(params, SamplingParams):
            hint = " (write SamplingParams(**params))" if isinstance(params, dict) else ""
            raise LlamanbError(f"params must be a llamanb.SamplingParams, got "
                               f"{type(params).__name__}{hint}")
        self.params = params
        self.exempt = frozenset(int(t) for t in exempt)
        self.rng = np.random.default_rng(params.seed)

    def penalize(self, logits: np.ndarray, history) -> np.ndarray:
        """The logits after the repeat penalty over the last repeat_last_n ids of history."""
        p = self.params
        if p.repeat_penalty == 1.0:
            return logits
        return repeat_penalty(logits, list(history)[-p.repeat_last_n:], p.repeat_penalty, self.exempt)

    def __call__(self, logits: np.ndarray, history=()) -> int:
        """The next token after `history` (every id of the sequence so far; only the repeat
        penalty reads it)."""
        return sample(self.penalize(logits, history), self.params, self.rng)
