"""The token loop: prefill once, then choose a token, feed it back, repeat -- written once.

    token_loop(first, advance, sampler, budget, stop)   any model: (token, the logits it came from)
    stream(engine, prompt_ids, ...)                     the engine: TokenEvents, text streamed
    generate(engine, prompt_ids, ...)                   stream, collected into a GenerationResult

`token_loop` does not know whose logits it reads: `stream` hands it the engine's prefill and decode
(a single prompt is a batch of one through Engine.step), the reference gate (llamanb.check.greedy)
the engine's or transformers' steps. It is a generator, so a caller that stops reading stops the
model: no decode runs for a token nobody asked for. Chat (llamanb.engine.chat) streams a conversation's
turns through `stream`, continuing a cache it keeps; the batching server (llamanb.serve) runs many
sequences per step and samples each with the same Sampler.

Streaming text: a token may end inside a multi-byte UTF-8 character (byte-fallback tokens), where
the text decoded so far ends in U+FFFD. Its piece is held back (None) until a later token completes
the character; the pieces joined are always the final text.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from llamanb.engine.engine import Engine, _count
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.platform.progress import stages
from llamanb.engine.sampling import Sampler, SamplingParams, next_token_probs, sample  # noqa: F401 (re-exported)
from llamanb.engine.step import Step
from llamanb.model.token_ids import is_int, token_ids


def token_loop(first: np.ndarray, advance: Callable[[int], np.ndarray], sampler: Sampler,
               budget: int, stop=frozenset(), history=()) -> Iterator[tuple[int, np.ndarray]]:
    """Up to `budget` tokens, each (token, the logits it was chosen from): choose from `first`,
    advance(token) -> the next logits, ... Ends after a token in `stop` (included) or the budget.
    history: the ids before the first token (the sampler's repeat penalty reads them)."""
    logits, seq = first, list(history)
    for n in range(1, budget + 1):
        tok = sampler(logits, seq)
        yield tok, logits
        if tok in stop or n == budget:
            return
        seq.append(tok)
        logits = advance(tok)


@dataclass(frozen=True)
class TokenEvent:
    id: int                     # the token chosen
    piece: str | None           # the text it adds; None while held back (or text not asked for)
    logits: np.ndarray          # [V] the logits it was chosen from (before any repeat penalty)
    step_s: float               # seconds of the engine call that produced those logits


def _engine_arg(engine) -> Engine:
    if isinstance(engine, Engine):
        return engine
    from llamanb.io.store import Model

    if isinstance(engine, Model):
        raise LlamanbError("generate needs an Engine, got the Model itself: "
                           "write generate(Engine(model), ids, ...)")
    raise LlamanbError(f"generate needs an Engine (llamanb.Engine(model)), got "
                       f"{type(engine).__name__} {engine!r:.40}")


def _stop_ids(engine: Engine, stop_ids) -> frozenset:
    if stop_ids is None:
        return frozenset(engine.config.eos_ids)
    if is_int(stop_ids) or isinstance(stop_ids, (str, bytes)):
        raise LlamanbError(f"stop_ids must be a list of token ids (e.g. "
                           f"{list(engine.config.eos_ids)}), got {type(stop_ids).__name__} "
                           f"{stop_ids!r}")
    return frozenset(token_ids(stop_ids, engine.config.vocab, "stop_ids", allow_empty=True).tolist())


def _prepare(engine, prompt_ids, max_new_tokens, params, stop_ids, sampler, cache, cached):
    """The checked arguments of a stream: (engine, prompt, stop set, sampler, cache, budget)."""
    engine = _engine_arg(engine)
    prompt = token_ids(prompt_ids, engine.config.vocab, "prompt_ids").tolist()
    max_new_tokens = _count("max_new_tokens", max_new_tokens)
    stop = _stop_ids(engine, stop_ids)
    if sampler is None:
        sampler = Sampler(params, stop)
    elif not isinstance(sampler, Sampler):
        raise LlamanbError(f"sampler must be a llamanb.engine.sampling.Sampler, got {type(sampler).__name__}")
    ctx = engine.config.max_seq if cache is None else cache.max_seq
    if len(prompt) >= ctx:
        raise LlamanbError(f"prompt of {len(prompt)} tokens leaves no room in the "
                           f"{ctx}-token context")
    budget = min(max_new_tokens, ctx - len(prompt))
    if cache is None:
        cache = engine.new_cache(len(prompt) + budget)
    if not 0 <= cached < len(prompt) or cache.lengths[0] != cached:
        raise LlamanbError(f"the cache holds {int(cache.lengths[0])} positions; the stream continues "
                           f"it at {cached} of a {len(prompt)}-token prompt")
    return engine, prompt, stop, sampler, cache, budget


def stream(engine: Engine, prompt_ids, max_new_tokens: int = 64,
           params: SamplingParams = SamplingParams(), stop_ids=None, *, sampler: Sampler | None = None,
           cache: KVStore | None = None, cached: int = 0, text: bool = True) -> Iterator[TokenEvent]:
    """The tokens after prompt_ids, one TokenEvent each, as they are chosen. Stops after any of
    stop_ids (default: the model's EOS / end-of-turn ids; the stop token is yielded) or after
    max_new_tokens (fewer if the context runs out). The arguments are checked now, the model
    runs as the events are read.

    sampler: a Sampler to draw with (a chat keeps one for the whole conversation); default a
    fresh Sampler(params). cache: a KV cache whose slot 0 already holds the first `cached`
    positions of prompt_ids (only the rest is prefilled); default a fresh one. text=False skips
    the decoding of pieces (every piece None)."""
    engine, prompt, stop, sampler, cache, budget = _prepare(
        engine, prompt_ids, max_new_tokens, params, stop_ids, sampler, cache, cached)
    return _stream(engine, prompt, cached, cache, sampler, budget, stop, text)


def _stream(engine, prompt, cached, cache, sampler, budget, stop, text) -> Iterator[TokenEvent]:
    tok = engine.model.tokenizer
    t0 = time.perf_counter()
    if cached == 0:
        first = engine.prefill(prompt, cache)
    else:                       # the cache holds the prompt's first `cached` positions
        new = np.asarray(prompt[cached:], dtype=np.int64)
        first = engine.step(Step.build([(0, cached, new)]), cache)[0]
    took = [time.perf_counter() - t0]

    def advance(token: int) -> np.ndarray:
        t = time.perf_counter()
        logits = engine.decode(token, cache)
        took[0] = time.perf_counter() - t
        return logits

    out, shown = [], ""
    for nxt, logits in token_loop(first, advance, sampler, budget, stop, prompt):
        out.append(nxt)
        piece = None
        if text:
            now = tok.decode([t for t in out if t not in stop], skip_special_tokens=True)
            if not now.endswith("\ufffd"):          # wait for a multi-byte character to complete
                piece, shown = now[len(shown):], now
        yield TokenEvent(nxt, piece, logits, took[0])


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
    """Generate up to max_new_tokens after prompt_ids (llamanb.engine.generate.stream, collected).

    on_token(token_id, text_piece) is called as each token arrives (streaming). Stops at any of
    stop_ids (default: the model's EOS / end-of-turn ids)."""
    if on_token is not None and not callable(on_token):
        raise LlamanbError(f"on_token must be a function (token_id, text_piece), got "
                           f"{type(on_token).__name__}")
    engine, prompt, stop, sampler, cache, budget = _prepare(
        engine, prompt_ids, max_new_tokens, params, stop_ids, None, None, 0)
    events = _stream(engine, prompt, 0, cache, sampler, budget, stop, on_token is not None)
    out, kept, prefill_s = [], [], 0.0
    t0 = time.perf_counter()
    with stages(after_s=3.0) as say:         # a notebook shows the count on a long generation
        for ev in events:
            if not out:
                prefill_s = ev.step_s
            out.append(ev.id)
            if keep_logits:
                kept.append(ev.logits)
            if on_token is not None and ev.piece is not None:
                on_token(ev.id, ev.piece)
            say(f"generating: token {len(out)} of at most {budget}")
    decode_s = time.perf_counter() - t0 - prefill_s
    reason = "eos" if out[-1] in stop else "length"
    text = engine.model.tokenizer.decode([t for t in out if t not in stop], skip_special_tokens=True)
    return GenerationResult(prompt, out, text, reason, prefill_s, decode_s, len(out) - 1, kept)
