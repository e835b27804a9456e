"""A multi-turn chat that keeps its KV cache between turns.

    session = Chat(engine, system=None, context=2048)
    turn = session.send("Hello!", on_token=print_piece)     # streams, returns a Turn
    session.reset()                                         # forget the conversation

Each turn renders the whole conversation with the model's chat template (as a fresh prompt
would be), finds how much of it the cache already holds, and prefills only the rest:

    cached   [<system> <user 1> <assistant ...> answer-1 tokens <end of turn>]
    rendered [<system> <user 1> <assistant ...> answer-1 tokens <end of turn> \\n <user 2> <assistant>]
              |---------------- common prefix: kept in the cache ---------------| new rows: prefill

The answer's tokens as sampled are usually what the template re-tokenizes them to; where they
are not (a byte-pair split the tokenizer would not choose), the common prefix ends earlier and the
cache is cut back to it. Either way the cache ends up holding exactly the rendered conversation,
so a turn's tokens are those of one prefill of the whole conversation, up to float32 summation
order (tests/test_chat.py checks greedy tokens). A conversation that would outgrow the context
raises ContextFull before anything runs; the caller offers a reset.
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import numpy as np

from llamanb.engine.engine import Engine, _count
from llamanb.errors import LlamanbError
from llamanb.engine.generate import stream
from llamanb.engine.sampling import Sampler, SamplingParams


# The chat's sampling where the model says nothing (neither a GGUF's general.sampling.* keys nor
# an HF checkpoint's generation_config.json): a low temperature with top-k/top-p truncation, and
# llama.cpp's long-standing repeat penalty 1.1 over the last 64 tokens (its --repeat-penalty and
# --repeat-last-n). --greedy turns all of it off for a reproducible run.
CHAT_DEFAULT = {"temperature": 0.3, "top_k": 40, "top_p": 0.9, "repeat_penalty": 1.1,
                "repeat_last_n": 64}
_GGUF_KEYS = {"general.sampling.temp": "temperature", "general.sampling.top_k": "top_k",
              "general.sampling.top_p": "top_p", "general.sampling.penalty_repeat": "repeat_penalty",
              "general.sampling.penalty_last_n": "repeat_last_n"}
_HF_KEYS = {"temperature": "temperature", "top_k": "top_k", "top_p": "top_p",
            "repetition_penalty": "repeat_penalty"}


def _valid(name: str, v) -> bool:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v:
        return False
    return {"temperature": 0 <= v < 100, "top_k": v >= 1 and float(v).is_integer(),
            "top_p": 0 < v <= 1, "repeat_penalty": 1 <= v < 100,
            "repeat_last_n": v >= 1 and float(v).is_integer()}[name]


def recommended_sampling(source) -> tuple[dict, str]:
    """(sampling settings, where they come from) for chatting with the model converted from
    `source` (a GGUF file or an HF checkpoint directory): what the file recommends -- a GGUF's
    general.sampling.* keys, an HF generation_config.json (do_sample false means greedy) --
    over CHAT_DEFAULT; values out of range are ignored."""
    from pathlib import Path

    src, got = Path(source), {}
    if src.is_dir():
        from llamanb.io.hf_checkpoint import read_generation_config

        cfg = read_generation_config(src)              # a broken one: one line, not "none"
        got = {ours: cfg[k] for k, ours in _HF_KEYS.items() if k in cfg}
        if cfg.get("do_sample") is False:
            got["temperature"] = 0.0
    elif src.is_file():
        from llamanb.io.gguf import read_header

        found, _ = read_header(src, tuple(_GGUF_KEYS))
        got = {_GGUF_KEYS[k]: v for k, v in found.items()}
    got = {k: (int(v) if k in ("top_k", "repeat_last_n") else float(v))
           for k, v in got.items() if _valid(k, v)}
    if not got:
        return dict(CHAT_DEFAULT), "llamanb's chat default: the model recommends none"
    return {**CHAT_DEFAULT, **got}, f"recommended by {src.name}"


class ContextFull(LlamanbError):
    """The conversation no longer fits the cache: reset it (nothing was run or changed)."""


@dataclass
class Turn:
    """One answer: what was prefilled and generated, the time each took, and (device backends)
    the device's counters per token: index 0 is the prefill, then one entry per decode step."""
    reused: int                       # cached positions the turn kept
    prefilled: int                    # new positions the turn prefilled
    ids: list[int]                    # generated ids (the end-of-turn id included when hit)
    text: str
    stop_reason: str                  # "eos", "length" (max_new_tokens), "context" (full), "interrupted"
    prefill_s: float
    decode_s: float
    per_token: list = field(default_factory=list, repr=False)
    carried: int = 0                  # of `prefilled`: the previous answer's last token, which
                                      # that turn generated but never fed (counted there)

    @property
    def decode_tok_s(self) -> float:
        n = max(0, len(self.ids) - 1)
        return n / self.decode_s if self.decode_s > 0 and n else float("nan")


def common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def plan_turn(cached: list[int], rendered: list[int]) -> tuple[int, list[int]]:
    """(positions of the cache to keep, ids to prefill) for a turn whose whole conversation renders
    to `rendered` while the cache holds `cached`: keep the common prefix; when the cache already
    holds all of it, recompute the last position anyway, since its logits pick the next token."""
    keep = common_prefix(cached, rendered)
    if keep == len(rendered):
        keep -= 1
    return keep, list(rendered[keep:])


class Chat:
    def __init__(self, engine: Engine, system: str | None = None, context: int | None = None,
                 params: SamplingParams = SamplingParams(), max_new_tokens: int = 256,
                 repeat_penalty: float | None = None, repeat_last_n: int | None = None):
        """params: the sampling settings (repeat penalty included); repeat_penalty and
        repeat_last_n, when given, replace params' own."""
        if not isinstance(engine, Engine):
            raise LlamanbError(f"Chat needs an Engine, got {type(engine).__name__}")
        if not isinstance(params, SamplingParams):
            raise LlamanbError(f"params must be a llamanb.SamplingParams, got {type(params).__name__}")
        if not engine.model.tokenizer.chat_template:
            raise LlamanbError("this model has no chat template, so it cannot chat (try generate --raw)")
        given = {k: v for k, v in (("repeat_penalty", repeat_penalty), ("repeat_last_n", repeat_last_n))
                 if v is not None}
        params = dataclasses.replace(params, **given)            # checked there
        self.engine, self.params, self.system = engine, params, system
        self.max_new_tokens = _count("max_new_tokens", max_new_tokens)
        self.cache = engine.new_cache(context)
        self.context = self.cache.max_seq
        self.stop = frozenset(engine.config.eos_ids)
        self.sampler = Sampler(params, exempt=self.stop)       # one random stream per conversation
        self.reset()

    # --- state -----------------------------------------------------------------------------------
    def reset(self) -> None:
        """Forget the conversation and empty the cache."""
        self.messages: list[dict] = ([{"role": "system", "content": self.system}]
                                     if self.system else [])
        self.ids: list[int] = []                       # exactly what the cache holds
        # the conversation's tokens past the cache: the last token of an answer is sampled but
        # not fed (no step computes its keys); the next turn prefills it first
        self.pending = 0
        self.cache.reset()
        self.turns: list[Turn] = []

    @property
    def counters(self):
        return getattr(self.engine.backend, "counters", None)

    def _cut(self, n: int) -> None:
        """Keep the first n cached positions (the conversation keeps its tokens: those cut are
        pending, to be prefilled again)."""
        self.pending += max(0, len(self.ids) - n)
        self.ids = self.ids[:n]
        self.cache.truncate(0, n)

    def prompt_ids(self, text: str) -> list[int]:
        """The whole conversation with `text` as the next user message, as the template renders it."""
        tok = self.engine.model.tokenizer
        return tok.apply_chat_template(self.messages + [{"role": "user", "content": text}])

    def penalize(self, logits: np.ndarray, recent: list[int]) -> np.ndarray:
        """The chat's repeat penalty (llamanb.engine.sampling.repeat_penalty) over the last
        repeat_last_n ids of `recent`, end-of-turn ids left alone."""
        return self.sampler.penalize(logits, recent)

    def fits(self, text: str) -> str | None:
        """None if `text` can be the next message; else why not, in words, with what to do."""
        full = self.prompt_ids(text)
        if len(full) + 1 <= self.context:
            return None
        sys_msgs = [{"role": "system", "content": self.system}] if self.system else []
        alone = len(self.engine.model.tokenizer.apply_chat_template(
            sys_msgs + [{"role": "user", "content": text}]))
        if alone + 1 > self.context:
            return (f"this message alone is {alone} tokens ({len(text):,} characters) and the "
                    f"context holds {self.context}: shorten it (or raise --context, up to the "
                    f"model's {self.engine.config.max_seq})")
        return (f"the conversation would be {len(full)} tokens and the context holds "
                f"{self.context}: /reset to start over (this message alone is {alone} tokens)")

    # --- one turn ----------------------------------------------------------------------------------
    def send(self, text: str, on_token=None) -> Turn:
        """Answer `text`, streaming on_token(id, piece). KeyboardInterrupt during the answer ends
        the turn early (stop_reason "interrupted"); the cache stays consistent with the text kept."""
        from llamanb.model.tokenizer import as_text

        text = as_text(text, "message")
        if not text.strip():
            raise LlamanbError("empty message")
        why = self.fits(text)
        if why:
            raise ContextFull(why)
        full = self.prompt_ids(text)
        keep, _ = plan_turn(self.ids, full)
        self._cut(keep)
        self.messages.append({"role": "user", "content": text})
        cache = self.cache
        budget = min(self.max_new_tokens, self.context - len(full))
        reason = "length" if budget == self.max_new_tokens else "context"
        c0 = self.counters.copy() if self.counters is not None else None
        per_token, out, prefill_s = [], [], None
        t0 = time.perf_counter()
        try:
            for ev in stream(self.engine, full, budget, stop_ids=sorted(self.stop),
                             sampler=self.sampler, cache=cache, cached=keep, text=on_token is not None):
                if c0 is not None:                      # the device's work for this token's logits
                    c1 = self.counters.copy()
                    per_token.append(c1 - c0)
                    c0 = c1
                if prefill_s is None:
                    prefill_s = ev.step_s
                out.append(ev.id)
                if ev.id in self.stop:
                    reason = "eos"
                if on_token is not None and ev.piece is not None:
                    on_token(ev.id, ev.piece)
        except KeyboardInterrupt:
            reason = "interrupted"
            if not out:                                 # nothing answered: take the message back
                self.messages.pop()
                self._cut(min(int(cache.lengths[0]), keep))
                raise
        # the cache holds a prefix of the conversation so far (the last token is never fed)
        carried, self.pending = self.pending, len(full) + len(out) - int(cache.lengths[0])
        self.ids = (full + out)[:int(cache.lengths[0])]
        decode_s = time.perf_counter() - t0 - prefill_s
        answer = self.engine.model.tokenizer.decode([t for t in out if t not in self.stop],
                                                    skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": answer})
        turn = Turn(keep, len(full) - keep, out, answer, reason, prefill_s, decode_s, per_token,
                    carried)
        self.turns.append(turn)
        return turn

    def stats(self) -> dict:
        """Totals over the conversation so far (and the device's counters, if it has them).
        context_used: the conversation's tokens, the answer's last one included (the cache holds
        all but that one until the next turn feeds it); generated: the tokens the model wrote;
        prefilled: the tokens the turns' messages and template added (a previous answer's last
        token, prefilled again by the next turn, is counted once, as generated), so that
        prefilled + generated = context_used wherever the template reproduces the answers'
        tokens; reused: positions the turns found in the cache."""
        gen = sum(len(t.ids) for t in self.turns)
        dec_s = sum(t.decode_s for t in self.turns)
        steps = sum(max(0, len(t.ids) - 1) for t in self.turns)
        d = {"turns": len(self.turns), "context_used": len(self.ids) + self.pending,
             "context": self.context,
             "prefilled": sum(t.prefilled - t.carried for t in self.turns),
             "reused": sum(t.reused for t in self.turns), "generated": gen,
             "prefill_s": sum(t.prefill_s for t in self.turns), "decode_s": dec_s,
             "decode_tok_s": steps / dec_s if dec_s > 0 and steps else float("nan")}
        if self.counters is not None and self.turns:
            per = [c for t in self.turns for c in t.per_token]
            d["calls"] = sum(c.dispatches for c in per)
            d["bytes_to_device"] = sum(c.bytes_to_device for c in per)
            d["bytes_from_device"] = sum(c.bytes_from_device for c in per)
            d["estimated_device_s"] = sum(c.estimated_s for c in per)
            d["tokens_counted"] = len(per)
        return d
