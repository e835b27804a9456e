"""The KV cache: keys and values of every layer for every position seen so far.

    k, v : [L, N_kv, capacity, d_h]     positions [0, length) are filled; capacity >= max_seq

Prefill writes rows [0, S); each decode step writes one more row and advances `length`.
"""
from __future__ import annotations

import numpy as np

from .config import LlamaConfig
from .errors import LlamanbError


class KVCache:
    # Storage is rounded up to a multiple of ALIGN positions so that a backend may read a whole
    # tile of keys past `length` (it masks them), after first rounding up to a multiple of ROWS,
    # so that a prefill padded to a multiple of ROWS rows has room for its scratch rows. Only
    # max_seq positions can be used.
    ALIGN = 256
    ROWS = 48

    def __init__(self, cfg: LlamaConfig, max_seq: int, dtype=np.float32):
        if max_seq > cfg.max_seq:
            raise LlamanbError(f"cache of {max_seq} positions exceeds the model's context ({cfg.max_seq})")
        rows = -(-max_seq // self.ROWS) * self.ROWS
        capacity = -(-rows // self.ALIGN) * self.ALIGN
        shape = (cfg.n_layers, cfg.n_kv_heads, capacity, cfg.head_dim)
        # np.zeros maps untouched pages lazily: a long cache costs memory only as it fills.
        self.k = np.zeros(shape, dtype=dtype)
        self.v = np.zeros(shape, dtype=dtype)
        self.max_seq = max_seq
        self.capacity = capacity
        self.length = 0

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """k, v [S, N_kv, d_h] for positions start .. start+S-1."""
        end = start + k.shape[0]
        if end > self.capacity:
            raise LlamanbError(f"KV cache full: position {end - 1} >= {self.capacity}")
        if end == start + 1:                    # one position (decode): no transpose needed
            self.k[layer, :, start] = k[0]
            self.v[layer, :, start] = v[0]
            return
        self.k[layer, :, start:end] = k.transpose(1, 0, 2)
        self.v[layer, :, start:end] = v.transpose(1, 0, 2)

    def keys(self, layer: int, end: int) -> np.ndarray:
        return self.k[layer, :, :end]

    def values(self, layer: int, end: int) -> np.ndarray:
        return self.v[layer, :, :end]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def truncate(self, length: int, written: int) -> None:
        """Keep positions [0, length) and zero the scratch rows [length, written) that a padded
        prefill wrote, so that the cache holds exactly the real positions."""
        self.k[:, :, length:written] = 0.0
        self.v[:, :, length:written] = 0.0
        self.length = length

    def reset(self) -> None:
        self.length = 0
