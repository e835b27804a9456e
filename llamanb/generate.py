"""Sampling and the generation loop: prefill once, then decode one token at a time."""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .engine import Engine, _count
from .errors import LlamanbError
from .progress import stages


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _is_real(v) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0        # 0 -> greedy
    top_k: int | None = None        # keep the k most likely tokens
    top_p: float = 1.0              # keep the smallest set whose probability reaches top_p
    seed: int | None = 0            # None: a fresh seed from the OS on every generate() call

    def __post_init__(self):
        t, k, p, seed = self.temperature, self.top_k, self.top_p, self.seed
        if not _is_real(t) or not 0 <= t < float("inf"):          # also rejects NaN
            raise LlamanbError(f"temperature must be a finite number >= 0 (0 = greedy), got {t!r}")
        if k is not None and (not _is_int(k) or k < 1):
            raise LlamanbError(f"top_k must be None (off) or an integer >= 1, got {k!r}")
        if not _is_real(p) or not 0 < p <= 1:
            raise LlamanbError(f"top_p must be a number in (0, 1] (1 = off), got {p!r}")
        if seed is not None and (not _is_int(seed) or seed < 0):
            raise LlamanbError(f"seed must be None or an integer >= 0, got {seed!r}")
        object.__setattr__(self, "temperature", float(t))
        object.__setattr__(self, "top_p", float(p))
        object.__setattr__(self, "top_k", None if k is None else int(k))
        object.__setattr__(self, "seed", None if seed is None else int(seed))


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


def _engine_arg(engine) -> Engine:
    if isinstance(engine, Engine):
        return engine
    from .io.store import Model

    if isinstance(engine, Model):
        raise LlamanbError("generate needs an Engine, got the Model itself: "
                           "write generate(Engine(model), ids, ...)")
    raise LlamanbError(f"generate needs an Engine (llamanb.Engine(model)), got "
                       f"{type(engine).__name__} {engine!r:.40}")


def token_ids(ids, vocab: int, what: str = "token ids", allow_empty: bool = False) -> list[int]:
    """ids as a list of Python ints, each in [0, vocab); anything else is a LlamanbError that
    says what was expected (text instead of ids, floats, nested lists, out-of-vocabulary ids)."""
    if isinstance(ids, (str, bytes)):
        raise LlamanbError(f"{what}: token ids expected, got text; encode it first, e.g. "
                           f"model.tokenizer.encode_prompt(text)")
    if _is_int(ids):
        raise LlamanbError(f"{what}: a list of token ids expected, got one int {ids!r} "
                           f"(write [{int(ids)}])")
    try:
        arr = np.asarray(ids if isinstance(ids, np.ndarray) else list(ids))
    except (TypeError, ValueError):
        raise LlamanbError(f"{what}: a list of integer token ids expected, got "
                           f"{type(ids).__name__} {ids!r:.40}") from None
    if arr.size == 0:
        if allow_empty:
            return []
        raise LlamanbError(f"{what}: empty prompt, nothing to run")
    if arr.ndim != 1:
        raise LlamanbError(f"{what}: a flat list of token ids expected, got shape {arr.shape} "
                           f"(one sequence at a time)")
    if arr.dtype.kind not in "iu":
        bad = next((v for v in arr.tolist() if not _is_int(v)), arr.flat[0])
        raise LlamanbError(f"{what}: token ids must be integers, got {type(bad).__name__} {bad!r}")
    out = [int(t) for t in arr]
    bad = next((t for t in out if not 0 <= t < vocab), None)
    if bad is not None:
        raise LlamanbError(f"{what}: token id {bad} is outside the vocabulary [0, {vocab})")
    return out


def generate(engine: Engine, prompt_ids, max_new_tokens: int = 64,
             params: SamplingParams = SamplingParams(), stop_ids=None, on_token=None,
             keep_logits: bool = False) -> GenerationResult:
    """Generate up to max_new_tokens after prompt_ids.

    on_token(token_id, text_piece) is called as each token arrives (streaming). Stops at any of
    stop_ids (default: the model's EOS / end-of-turn ids)."""
    engine = _engine_arg(engine)
    prompt_ids = token_ids(prompt_ids, engine.config.vocab, "prompt_ids")
    max_new_tokens = _count("max_new_tokens", max_new_tokens)
    if not isinstance(params, SamplingParams):
        hint = " (write SamplingParams(**params))" if isinstance(params, dict) else ""
        raise LlamanbError(f"params must be a llamanb.SamplingParams, got "
                           f"{type(params).__name__}{hint}")
    if stop_ids is not None:
        if _is_int(stop_ids) or isinstance(stop_ids, (str, bytes)):
            raise LlamanbError(f"stop_ids must be a list of token ids (e.g. "
                               f"{list(engine.config.eos_ids)}), got {type(stop_ids).__name__} "
                               f"{stop_ids!r}")
        stop_ids = token_ids(stop_ids, engine.config.vocab, "stop_ids", allow_empty=True)
    if on_token is not None and not callable(on_token):
        raise LlamanbError(f"on_token must be a function (token_id, text_piece), got "
                           f"{type(on_token).__name__}")
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
    with stages(after_s=3.0) as say:         # a notebook shows the count on a long generation
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
            say(f"generating: token {len(out)} of at most {budget}")
            logits = engine.decode(nxt, cache)
            steps += 1
    decode_s = time.perf_counter() - t1
    text = tok.decode([t for t in out if t not in stop], skip_special_tokens=True)
    return GenerationResult(prompt_ids, out, text, reason, prefill_s, decode_s, steps, kept)
