"""One request's life in the server: waiting -> running -> finished (and, if memory runs short,
back to waiting, keeping what it has generated).

    tokens   = prompt + output            everything the sequence holds or will hold
    cached   = positions in the KV cache  (0 while waiting; reset to 0 by a preemption)

A running request's next piece of work is always "feed tokens[cached:...]":

    cached < len(prompt)                  prefill: the next chunk of the prompt
    len(prompt) <= cached < len(tokens)-1 replay: a token generated before a preemption goes
                                          back in, one per step, exactly as it first went in
    cached == len(tokens) - 1             decode: feed the newest token, sample the next one

Sampling is the same code as single-stream generation: the request's own llamanb.engine.sampling.Sampler,
seeded from its own seed, so a request draws the same tokens whatever else shares its steps.
"""
from __future__ import annotations

import enum
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from llamanb.errors import LlamanbError
from llamanb.engine.sampling import Sampler, SamplingParams

_ids = itertools.count()


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Request:
    prompt: list[int]
    max_new_tokens: int = 64
    params: SamplingParams = SamplingParams()
    stop_ids: frozenset[int] = frozenset()
    name: str = ""
    # --- state, kept by the scheduler and the runner ---------------------------------------
    output: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    slot: int | None = None
    cached: int = 0
    stop_reason: str | None = None        # "eos" or "length"
    preemptions: int = 0
    sampler: Sampler = field(init=False, repr=False)
    t_arrival: float = field(default_factory=time.perf_counter)
    t_admitted: float | None = None       # first time it got a slot
    t_first_token: float | None = None
    t_finished: float | None = None

    def __post_init__(self):
        self.id = next(_ids)
        self.name = self.name or f"r{self.id}"
        self.prompt = [int(t) for t in self.prompt]
        if not self.prompt:
            raise LlamanbError(f"request {self.name}: empty prompt")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) \
                or self.max_new_tokens < 1:
            raise LlamanbError(f"request {self.name}: max_new_tokens must be an integer >= 1, "
                               f"got {self.max_new_tokens!r}")
        if not isinstance(self.params, SamplingParams):
            raise LlamanbError(f"request {self.name}: params must be SamplingParams")
        self.stop_ids = frozenset(int(t) for t in self.stop_ids)
        self.sampler = Sampler(self.params, self.stop_ids)

    # --- where it stands ---------------------------------------------------------------------
    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.output

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED

    def prefill_target(self) -> int:
        """Positions to fill before the next sampled token: the prompt, plus the outputs of a
        preempted request except the newest (which the next decode feeds)."""
        return len(self.prompt) + max(0, len(self.output) - 1)

    def next_piece(self, room: int, chunk: int) -> tuple[list[int], bool]:
        """(ids to feed next, whether the step should return logits for the last of them), with
        at most `room` rows. A prompt is cut only at multiples of `chunk` (so every chunk starts
        where the attention's query tiles start, and the result is bit-identical to one shot);
        ([], False) when not even one chunk fits."""
        if self.cached < len(self.prompt):
            rest = len(self.prompt) - self.cached
            n = rest if rest <= room else room // chunk * chunk
            ids = self.prompt[self.cached:self.cached + n]
            # logits only when this finishes the prompt of a request that has sampled nothing yet
            return ids, bool(n) and self.cached + n == len(self.prompt) and not self.output
        if room < 1:
            return [], False
        tok = self.tokens[self.cached]
        return [tok], self.cached == len(self.tokens) - 1

    # --- what happens to it ------------------------------------------------------------------
    def take(self, logits: np.ndarray, now: float) -> bool:
        """Sample the next token from `logits`; returns True if the request is now done."""
        tok = self.sampler(logits, self.tokens)
        self.output.append(tok)
        if self.t_first_token is None:
            self.t_first_token = now
        if tok in self.stop_ids:
            self.stop_reason = "eos"
        elif len(self.output) >= self.max_new_tokens:
            self.stop_reason = "length"
        return self.stop_reason is not None

    # --- timings ------------------------------------------------------------------------------
    @property
    def queue_s(self) -> float | None:
        return None if self.t_admitted is None else self.t_admitted - self.t_arrival

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_arrival

    @property
    def latency_s(self) -> float | None:
        return None if self.t_finished is None else self.t_finished - self.t_arrival

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first, per second after the first."""
        if self.t_finished is None or len(self.output) < 2 or self.t_finished <= self.t_first_token:
            return None
        return (len(self.output) - 1) / (self.t_finished - self.t_first_token)
