"""The engine: token ids in, logits out, with a KV cache in between.

    ids [S] --embed--> x [S, H] --block 0..L-1--> x [S, H] --last real row--> head --> logits [V]

Prefill runs the prompt through every block at once and fills cache rows [0, S). Decode runs one
token (S = 1) at position cache.length. Only the last real row goes through the LM head in
prefill: the other rows' logits would be V x H multiply-adds each, thrown away.
"""
from __future__ import annotations

import numpy as np

from .backends import Backend, make_backend
from .errors import LlamanbError
from .kv_cache import KVCache
from .store import Model


class Engine:
    def __init__(self, model: Model, backend: str | Backend = "numpy", **backend_options):
        self.model = model
        self.config = model.config
        self.backend = backend if isinstance(backend, Backend) else make_backend(
            backend, model.weights, **backend_options)
        if KVCache.ROWS % self.backend.prefill_row_multiple:
            raise LlamanbError(f"backend {self.backend.name!r} pads prefill to multiples of "
                               f"{self.backend.prefill_row_multiple} rows; the KV cache has room "
                               f"for multiples of {KVCache.ROWS}")

    def new_cache(self, max_seq: int | None = None) -> KVCache:
        return KVCache(self.config, min(max_seq or self.config.max_seq, self.config.max_seq))

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise LlamanbError("empty prompt: nothing to run")
        if ids.min() < 0 or ids.max() >= self.config.vocab:
            raise LlamanbError(f"token id out of range [0, {self.config.vocab})")
        return ids

    def forward(self, ids, cache: KVCache, collect: list | None = None,
                _scratch: bool = False) -> np.ndarray:
        """Run ids at positions cache.length .. and return the final hidden rows [S, H]
        (before the final norm). Advances cache.length by S. If `collect` is a list, the
        embedding output and each block's output are appended to it. (`_scratch`: prefill's
        padding rows may use the cache's spare capacity past max_seq.)"""
        ids = self._check_ids(ids)
        start, S = cache.length, ids.size
        if start + S > (cache.capacity if _scratch else cache.max_seq):
            raise LlamanbError(f"sequence of {start + S} tokens exceeds the cache/context of "
                               f"{cache.max_seq}")
        x = self.backend.embed(ids)                                    # [S, H]
        if collect is not None:
            collect.append(x)
        for layer in range(self.config.n_layers):
            x = self.backend.block(layer, x, start, cache)             # [S, H]
            if collect is not None:
                collect.append(x)
        cache.length = start + S
        return x

    def prefill(self, ids, cache: KVCache, real_len: int | None = None,
                collect: list | None = None) -> np.ndarray:
        """Logits [V] for the next token after the prompt.

        `real_len`: when ids were padded to a fixed length, the number of real tokens. It is
        passed in, never guessed: a prompt may itself contain the pad (EOS) token. The causal mask
        keeps padded rows from touching the real ones; the cache keeps real_len positions (the rows
        written for padding are zeroed)."""
        if cache.length != 0:
            raise LlamanbError("prefill needs an empty cache (call cache.reset())")
        ids = self._check_ids(ids)
        n = ids.size if real_len is None else int(real_len)
        if not 1 <= n <= ids.size:
            raise LlamanbError(f"real_len {real_len} outside 1..{ids.size}")
        if n > cache.max_seq:
            raise LlamanbError(f"prompt of {n} tokens exceeds the cache/context of {cache.max_seq}")
        extra = -ids.size % self.backend.prefill_row_multiple
        if extra:
            # BLAS kernels compute a row differently depending on how many rows the matrix has
            # (GEMV for one row, small-matrix or edge kernels for short or ragged ones). Extra
            # rows after the prompt (invisible to it, by causality) give every prompt a row count
            # the kernels treat uniformly, so a prompt and its padded forms agree bit for bit.
            ids = np.concatenate([ids, np.full(extra, ids[-1])])
        x = self.forward(ids, cache, collect, _scratch=True)
        if collect is not None:
            collect[:] = [h[:n] for h in collect]
        cache.truncate(n, written=ids.size)            # padding rows are not part of the text
        return self.backend.head(x[n - 1:n])[0]                        # [V]

    def decode(self, token: int, cache: KVCache) -> np.ndarray:
        """Logits [V] after appending one token at position cache.length."""
        if cache.length >= cache.max_seq:
            raise LlamanbError(f"KV cache full ({cache.max_seq} positions)")
        x = self.forward([token], cache)
        return self.backend.head(x)[0]

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
