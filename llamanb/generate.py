"""Sampling and the generation loop: prefill once, then decode one token at a time."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .engine import Engine
from .errors import LlamanbError


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0        # 0 -> greedy
    top_k: int | None = None        # keep the k most likely tokens
    top_p: float = 1.0              # keep the smallest set whose probability reaches top_p
    seed: int | None = 0

    def __post_init__(self):
        if not self.temperature >= 0:                   # also rejects NaN
            raise LlamanbError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise LlamanbError(f"top_k must be >= 1, got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise LlamanbError(f"top_p must be in (0, 1], got {self.top_p}")


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
    if p.temperature == 0:
        return int(np.argmax(logits))
    probs = next_token_probs(logits, p)
    return int(rng.choice(probs.size, p=probs))


@dataclass
class GenerationResult:
    prompt_ids: list[int]
    ids: list[int]                   # generated ids (the stop token included if one was hit)
    text: str                        # generated text, special tokens dropped
    stop_reason: str                 # "eos" or "length"
    prefill_s: float
    decode_s: float
    decode_steps: int                # decode calls made (tokens after the first)
    logits: list = field(default_factory=list, repr=False)   # per step, when asked for

    @property
    def prefill_tok_s(self) -> float:
        return len(self.prompt_ids) / self.prefill_s if self.prefill_s else float("nan")

    @property
    def decode_tok_s(self) -> float:
        return self.decode_steps / self.decode_s if self.decode_s else float("nan")


def generate(engine: Engine, prompt_ids, max_new_tokens: int = 64,
             params: SamplingParams = SamplingParams(), stop_ids=None, on_token=None,
             keep_logits: bool = False) -> GenerationResult:
    """Generate up to max_new_tokens after prompt_ids.

    on_token(token_id, text_piece) is called as each token arrives (streaming). Stops at any of
    stop_ids (default: the model's EOS / end-of-turn ids)."""
    prompt_ids = [int(t) for t in prompt_ids]
    if not prompt_ids:
        raise LlamanbError("empty prompt: nothing to run")
    if max_new_tokens < 1:
        raise LlamanbError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    ctx = engine.config.max_seq
    if len(prompt_ids) >= ctx:
        raise LlamanbError(f"prompt of {len(prompt_ids)} tokens leaves no room in the "
                           f"{ctx}-token context")
    stop = set(engine.config.eos_ids if stop_ids is None else stop_ids)
    budget = min(max_new_tokens, ctx - len(prompt_ids))
    tok = engine.model.tokenizer
    rng = np.random.default_rng(params.seed)
    cache = engine.new_cache(len(prompt_ids) + budget)

    t0 = time.perf_counter()
    logits = engine.prefill(prompt_ids, cache)
    prefill_s = time.perf_counter() - t0

    out, kept, reason, steps = [], [], "length", 0
    shown = ""
    t1 = time.perf_counter()
    while True:
        if keep_logits:
            kept.append(logits)
        nxt = sample(logits, params, rng)
        out.append(nxt)
        if on_token is not None:
            text = tok.decode([t for t in out if t not in stop], skip_special_tokens=True)
            if not text.endswith("\ufffd"):        # wait for a multi-byte character to complete
                on_token(nxt, text[len(shown):])
                shown = text
        if nxt in stop:
            reason = "eos"
            break
        if len(out) >= budget:
            break
        logits = engine.decode(nxt, cache)
        steps += 1
    decode_s = time.perf_counter() - t1
    text = tok.decode([t for t in out if t not in stop], skip_special_tokens=True)
    return GenerationResult(prompt_ids, out, text, reason, prefill_s, decode_s, steps, kept)
