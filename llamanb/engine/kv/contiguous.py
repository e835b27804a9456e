"""The contiguous KV cache: every sequence (slot) owns one fixed range of positions.

    k, v : [slots, L, N_kv, capacity, d_h]      slot s, layer l: positions 0 .. lengths[s]-1 filled

One head's keys of one sequence are one contiguous [capacity, d_h] block, so attention reads them
as a plain view. `capacity` is max_seq rounded up to the position multiple the backend asks for
(a backend that reads keys in whole tiles reads past the end and masks; the rows it reads there
are zeros). With one slot, `cache.k` / `cache.v` are that slot's [L, N_kv, capacity, d_h] arrays.
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LlamaConfig
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore


class KVCache(KVStore):
    def __init__(self, cfg: LlamaConfig, max_seq: int, dtype=np.float32, slots: int = 1,
                 position_multiple: int = 1):
        for name, val in (("max_seq", max_seq), ("slots", slots), ("position_multiple", position_multiple)):
            if isinstance(val, bool) or not isinstance(val, (int, np.integer)) or val < 1:
                raise LlamanbError(f"{name} must be a positive integer, got {val!r}")
        if max_seq > cfg.max_seq:
            raise LlamanbError(f"cache of {max_seq} positions exceeds the model's context ({cfg.max_seq})")
        self.n_layers, self.n_kv_heads, self.head_dim = cfg.n_layers, cfg.n_kv_heads, cfg.head_dim
        self.slots, self.max_seq = int(slots), int(max_seq)
        self.capacity = -(-self.max_seq // position_multiple) * position_multiple
        shape = (self.slots, cfg.n_layers, cfg.n_kv_heads, self.capacity, cfg.head_dim)
        # np.zeros maps untouched pages lazily: a long cache costs memory only as it fills.
        self.k_all = np.zeros(shape, dtype=dtype)
        self.v_all = np.zeros(shape, dtype=dtype)
        self.lengths = np.zeros(self.slots, dtype=np.int64)
        self._written = np.zeros(self.slots, dtype=np.int64)   # high-water mark, for free()

    # single-sequence view: slot 0
    @property
    def k(self) -> np.ndarray:
        return self.k_all[0]

    @property
    def v(self) -> np.ndarray:
        return self.v_all[0]

    def write(self, layer: int, slot: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        end = start + k.shape[0]
        self.writing(slot, start, k.shape[0])   # room, high-water mark
        if end == start + 1:                    # one position (decode): no transpose needed
            self.k_all[slot, layer, :, start] = k[0]
            self.v_all[slot, layer, :, start] = v[0]
        else:
            self.k_all[slot, layer, :, start:end] = k.transpose(1, 0, 2)
            self.v_all[slot, layer, :, start:end] = v.transpose(1, 0, 2)

    def writing(self, slot: int, start: int, n: int) -> None:
        """Positions start .. start+n-1 of `slot` are about to be written into k_all / v_all
        (by write(), or in place by a backend's own kernel): check the room and note the
        high-water mark that free() clears up to."""
        end = start + n
        if end > self.capacity:
            raise LlamanbError(f"KV cache full: position {end - 1} >= {self.capacity}")
        if end > self._written[slot]:
            self._written[slot] = end

    def keys(self, layer: int, slot: int, n: int) -> np.ndarray:
        return self.k_all[slot, layer, :, :n]

    def values(self, layer: int, slot: int, n: int) -> np.ndarray:
        return self.v_all[slot, layer, :, :n]

    def free(self, slot: int) -> None:
        slot = self.check_slot(slot)
        w = int(self._written[slot])
        self.k_all[slot, :, :, :w] = 0
        self.v_all[slot, :, :, :w] = 0
        self._written[slot] = 0
        self.lengths[slot] = 0

    def truncate(self, slot: int, length: int) -> None:
        slot, length = self.check_truncate(slot, length)
        w = int(self._written[slot])
        self.k_all[slot, :, :, length:w] = 0
        self.v_all[slot, :, :, length:w] = 0
        self._written[slot] = min(w, length)
        self.lengths[slot] = length

    @property
    def nbytes(self) -> int:
        return self.k_all.nbytes + self.v_all.nbytes
