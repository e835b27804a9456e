"""The KV cache: keys and values of every layer for every position seen so far.

    k, v : [L, N_kv, max_seq, d_h]      positions [0, length) are filled

Prefill writes rows [0, S); each decode step writes one more row and advances `length`.
"""
from __future__ import annotations

import numpy as np

from .config import LlamaConfig
from .errors import LlamanbError


class KVCache:
    def __init__(self, cfg: LlamaConfig, max_seq: int, dtype=np.float32):
        if max_seq > cfg.max_seq:
            raise LlamanbError(f"cache of {max_seq} positions exceeds the model's context ({cfg.max_seq})")
        shape = (cfg.n_layers, cfg.n_kv_heads, max_seq, cfg.head_dim)
        # np.zeros maps untouched pages lazily: a long cache costs memory only as it fills.
        self.k = np.zeros(shape, dtype=dtype)
        self.v = np.zeros(shape, dtype=dtype)
        self.max_seq = max_seq
        self.length = 0

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """k, v [S, N_kv, d_h] for positions start .. start+S-1."""
        end = start + k.shape[0]
        if end > self.max_seq:
            raise LlamanbError(f"KV cache full: position {end - 1} >= {self.max_seq}")
        self.k[layer, :, start:end] = k.transpose(1, 0, 2)
        self.v[layer, :, start:end] = v.transpose(1, 0, 2)

    def keys(self, layer: int, end: int) -> np.ndarray:
        return self.k[layer, :, :end]

    def values(self, layer: int, end: int) -> np.ndarray:
        return self.v[layer, :, :end]

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + self.v.nbytes

    def reset(self) -> None:
        self.length = 0
