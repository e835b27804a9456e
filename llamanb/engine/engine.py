"""The engine: steps of token ids in, logits out, with a KV cache in between.

    step (ids, positions, slots) --embed--> x [R, H] --backend.layers--> x [R, H]
                                 --rows that want logits--> head --> logits [k, V]

`Engine.step` is the one call every path goes through: a prompt's prefill, one token's decode, a
chunk of a long prompt, or a batch mixing new prompts with decoding sequences (llamanb.engine.step).
It reads top to bottom: embed, the layers, the LM head; where the rows sit in the backend's matrix
products (PAD rows for a BLAS's sake) is one policy it consults, llamanb.engine.rows. `prefill`, `decode` and `forward` are thin single-sequence wrappers around it.

Only the rows whose logits are wanted go through the LM head: the other rows' logits would be
V x H multiply-adds each, thrown away.
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.kv.base import KVStore
from llamanb.engine.kv.contiguous import KVCache
from llamanb.engine.registry import Backend, backend_class, make_backend
from llamanb.engine.rows import RowPolicy
from llamanb.engine.step import PAD, Step
from llamanb.errors import LlamanbError
from llamanb.model.token_ids import token_ids


def _count(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise LlamanbError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def _make_backend(name: str, weights, options: dict) -> Backend:
    """make_backend, with a wrong option (an unknown keyword, a value the backend refuses) turned
    into a LlamanbError that names the backend."""
    import inspect

    cls = backend_class(name)               # imports a track's backend on first use
    if cls is not None:
        try:
            inspect.signature(cls).bind(weights, **options)
        except TypeError as e:
            known = [p for p in inspect.signature(cls).parameters if p != "weights"]
            raise LlamanbError(f"backend {name!r}: {e}; its options: {', '.join(known) or 'none'}") from None
    try:
        return make_backend(name, weights, **options)
    except ValueError as e:                 # the backend's own check of an option's value
        if not options:
            raise
        raise LlamanbError(f"backend {name!r}: {e}") from None


class Engine:
    def __init__(self, model, backend: str | Backend = "numpy", batch_invariant: bool = False,
                 **backend_options):
        """model: from llamanb.load_model(). backend: a name ("numpy") or a Backend.
        batch_invariant: pad every step, even a single decode row, to the backend's row multiple,
        so that a row's arithmetic never depends on which other rows share its step (costs decode
        speed: a GEMM instead of a GEMV)."""
        from llamanb.io.store import Model

        if not isinstance(model, Model):
            raise LlamanbError(f"Engine needs a model from llamanb.load_model(...), got "
                               f"{type(model).__name__} {model!r:.40}")
        self.model = model
        self.config = model.config
        if not isinstance(batch_invariant, (bool, np.bool_)):
            raise LlamanbError(f"batch_invariant must be True or False, got {batch_invariant!r:.40}")
        self.batch_invariant = bool(batch_invariant)
        if isinstance(backend, Backend):
            self.backend = backend
        elif isinstance(backend, str):
            self.backend = _make_backend(backend, model.weights, backend_options)
        else:
            raise LlamanbError(f"backend must be a name or a Backend, got {type(backend).__name__}")
        self.pad_id = int(self.config.eos_ids[0]) if self.config.eos_ids else 0
        self.rows                                           # a backend's lengths checked now

    @property
    def rows(self) -> RowPolicy:
        """Where each row of a step sits in the backend's matrix products (llamanb.engine.rows),
        read from the backend at each step (a compiled backend's lengths may change)."""
        return RowPolicy.of(self.backend, self.pad_id, self.batch_invariant)

    @property
    def query_tile(self) -> int:
        """Rows of queries the backend's attention takes at a time; a scheduler's prefill chunk
        must be a multiple of it (Backend.query_tile)."""
        return self.backend.query_tile

    # --- caches ----------------------------------------------------------------------------------
    def new_cache(self, max_seq: int | None = None, slots: int = 1, block: int | None = None,
                  n_blocks: int | None = None) -> KVStore:
        """A KV cache laid out for this backend: `slots` sequences of up to max_seq positions
        (default and cap: the model's context). Contiguous, or paged when `block` (positions per
        block) and `n_blocks` (the pool) are given."""
        max_seq = self.config.max_seq if max_seq is None else _count("max_seq", max_seq)
        kw = dict(dtype=self.backend.kv_dtype, slots=_count("slots", slots),
                  position_multiple=self.backend.kv_position_multiple)
        max_seq = min(max_seq, self.config.max_seq)
        if block is None and n_blocks is None:
            return KVCache(self.config, max_seq, **kw)
        from llamanb.engine.kv.paged import PagedKVCache

        return PagedKVCache(self.config, max_seq, n_blocks=_count("n_blocks", n_blocks),
                            block=_count("block", block), **kw)

    # --- the one call ----------------------------------------------------------------------------
    def step(self, step: Step, cache: KVStore, collect: list | None = None,
             hidden: bool = False) -> np.ndarray:
        """Run one step; returns logits [k, V] for step.logit_rows (or, with hidden=True, the
        final hidden rows [R_real, H] before the final norm). Each sequence in the step must be
        exactly as long as its segment's start says; afterwards it is start + n long. If
        `collect` is a list, the embedding output and each block's output are appended."""
        token_ids(step.ids, self.config.vocab, "step")
        cache.admit(step)                                   # continues each slot; room, all or nothing
        rows = self.rows
        run = rows.layout(step)                             # + PAD rows where the BLAS needs them
        x = self.backend.embed(run.ids)                                   # [R, H]
        if collect is not None:
            collect.append(x)
        x = self.backend.layers(x, run, cache, collect)                   # [R, H]
        cache.advance(step)
        real = run.slots != PAD
        if collect is not None:
            collect[:] = [h[real] for h in collect]
        if hidden:
            return x[real]                                                # [R_real, H]
        return rows.head(self.backend.head, x[run.logit_rows])            # [k, V]

    # --- single-sequence wrappers ------------------------------------------------------------------
    def forward(self, ids, cache: KVStore, collect: list | None = None, slot: int = 0) -> np.ndarray:
        """Run ids at positions cache.lengths[slot] .. and return the final hidden rows [S, H]
        (before the final norm). If `collect` is a list, the embedding output and each block's
        output are appended to it."""
        ids = token_ids(ids, self.config.vocab, "forward")
        step = Step.build([(slot, int(cache.lengths[cache.check_slot(slot)]), ids)], want_logits=False)
        return self.step(step, cache, collect, hidden=True)

    def prefill(self, ids, cache: KVStore, real_len: int | None = None,
                collect: list | None = None, slot: int = 0, chunk: int | None = None) -> np.ndarray:
        """Logits [V] for the next token after the prompt.

        `real_len`: when ids were padded to a fixed length, the number of real tokens. It is
        passed in, never guessed: a prompt may itself contain the pad (EOS) token. Rows after it
        are padding: computed (the row count stays fixed) but never stored or attended to.
        `chunk`: run the prompt in chunks of at most this many rows, each reading the earlier
        chunks from the cache (default: the backend's largest compiled length, if it has any)."""
        slot = cache.check_slot(slot)
        if cache.lengths[slot] != 0:
            raise LlamanbError("prefill needs an empty cache slot (call cache.free(slot) or cache.reset())")
        ids = token_ids(ids, self.config.vocab, "prefill")
        n = ids.size if real_len is None else _count("real_len", real_len)
        if n > ids.size:
            raise LlamanbError(f"real_len {real_len} outside 1..{ids.size}")
        if n > cache.max_seq:
            raise LlamanbError(f"prompt of {n} tokens exceeds the cache/context of {cache.max_seq}")
        if chunk is None and self.backend.prefill_lengths is not None:
            chunk = max(self.backend.prefill_lengths)
        chunk = ids.size if chunk is None else _count("chunk", chunk)
        if chunk < ids.size:                 # the user's padding is not needed when chunking
            ids = ids[:n]
        starts = list(range(0, ids.size, chunk))
        parts = [h for h in (collect,) if h is not None]
        for c0 in starts:
            part = ids[c0:c0 + chunk]
            step = Step.build([(slot, c0, part)])
            if c0 + part.size > n:                                         # caller's own padding
                step = step.with_pad_rows(n - c0)
            sink = [] if parts else None
            logits = self.step(step, cache, sink)
            if parts:
                collect[:] = sink if not collect else [np.concatenate([a, b]) for a, b in zip(collect, sink)]
        return logits[0]                                                   # [V]

    def decode(self, token: int, cache: KVStore, slot: int = 0) -> np.ndarray:
        """Logits [V] after appending one token at position cache.lengths[slot]."""
        slot = cache.check_slot(slot)
        if cache.lengths[slot] >= cache.max_seq:
            raise LlamanbError(f"KV cache full ({cache.max_seq} positions)")
        if isinstance(token, (bool, np.bool_)) or not isinstance(token, (int, np.integer)):
            raise LlamanbError(f"decode takes one token id (an int), got {type(token).__name__} "
                               f"{token!r:.20}" + (": encode text first" if isinstance(token, str) else ""))
        ids = token_ids([token], self.config.vocab, "decode")
        return self.step(Step.build([(slot, int(cache.lengths[slot]), ids)]), cache)[0]

    def logits_all(self, ids) -> np.ndarray:
        """Logits for every position of ids [S] -> [S, V] (for tests and diagnosis)."""
        cache = self.new_cache(len(ids))
        return self.backend.head(self.forward(ids, cache))


def pad_to(ids, length: int, pad_id: int) -> tuple[np.ndarray, int]:
    """ids right-padded with pad_id to `length`; returns (padded ids, real length)."""
    ids = list(ids)
    if len(ids) > length:
        raise LlamanbError(f"prompt of {len(ids)} tokens does not fit the padded length {length}")
    return np.array(ids + [pad_id] * (length - len(ids)), dtype=np.int64), len(ids)
